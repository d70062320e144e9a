package kubernetes

import (
	"strconv"
	"sync"
	"time"

	"github.com/tenure-go/tenure/clock"
)

// observations keep, for each Lease this Store has read or written, the
// resourceVersion it saw last and when it first saw it, on the Store's
// clock (CLOCK_BOOTTIME by default: it never steps, and it counts time
// suspended, so it never reads less than the time that passed). The API
// server never expires a Lease; a holder's lease ends for this Store when
// the Store has seen the same resourceVersion for the record's
// leaseDurationSeconds, as client-go's leader election counts it: from its
// own observation, never from the holder's renewTime, whose clock may be
// skewed. Any write to the object (a renewal, or anything else) restarts the
// count, since it changes the resourceVersion.
//
// Why this is safe: a reading is taken after the answer that carried the
// version arrived, so after the write that made it; the holder's trust ends
// at its local deadline, tSend + TTL·(1−ρ), counted from before it sent that
// write (or an earlier one); and a take-over is an update conditioned on the
// very resourceVersion observed, so it fails if the holder wrote anything
// since. The holder's last confirmed write therefore made the observed
// version, and the observer waited at least ceil(TTL) after it on a clock
// that runs at most ρ faster than the holder's.
type observations struct {
	clock clock.Clock

	mu        sync.Mutex
	m         map[string]*observation // by Lease name
	lastPrune time.Time
}

type observation struct {
	rv    string
	dur   time.Duration // the record's leaseDurationSeconds
	since time.Time     // first seen, on the Store's clock
	used  time.Time     // last read or written
}

// pruneAfter is how long an observation nobody asked about is kept, beyond
// twice its record's duration.
const pruneAfter = 10 * time.Minute

func newObservations(c clock.Clock) *observations {
	return &observations{clock: c, m: map[string]*observation{}, lastPrune: c.Now()}
}

// seen records that the Lease name was at rv, with leaseDurationSeconds
// dur, just now (call it after the answer arrived), and returns how long
// this Store has seen it at rv.
func (o *observations) seen(name, rv string, dur time.Duration) time.Duration {
	now := o.clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked(now)
	ob := o.m[name]
	if ob == nil || ob.rv != rv {
		ob = &observation{rv: rv, since: now}
		o.m[name] = ob
	}
	ob.used, ob.dur = now, dur
	return now.Sub(ob.since)
}

// elapsed returns how long this Store has seen the Lease name at rv, and
// false when its last observation of the Lease is not rv.
func (o *observations) elapsed(name, rv string) (time.Duration, bool) {
	now := o.clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	ob := o.m[name]
	if ob == nil || ob.rv != rv {
		return 0, false
	}
	ob.used = now
	return now.Sub(ob.since), true
}

// event records a version that a watch delivered, if this Store observes
// the Lease and the version is newer than the one it saw: a watch event
// comes after the write too, so it may only start the count earlier than
// the next read would.
func (o *observations) event(name, rv string) {
	now := o.clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	ob := o.m[name]
	if ob == nil || ob.rv == rv || !newer(rv, ob.rv) {
		return
	}
	ob.rv, ob.since = rv, now
}

// forget drops the observation of a Lease that is gone.
func (o *observations) forget(name string) {
	o.mu.Lock()
	delete(o.m, name)
	o.mu.Unlock()
}

func (o *observations) pruneLocked(now time.Time) {
	if now.Sub(o.lastPrune) < time.Minute {
		return
	}
	o.lastPrune = now
	for k, ob := range o.m {
		if now.Sub(ob.used) > pruneAfter+2*ob.dur {
			delete(o.m, k)
		}
	}
}

// newer reports whether resourceVersion a is greater than b. Resource
// versions of one resource are decimal integers that grow with every write
// (Kubernetes' comparable resource versions); anything else is not newer.
func newer(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x > y
}
