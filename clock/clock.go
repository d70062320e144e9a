// Package clock is the time source of tenure's local deadlines, renewals and
// backoff: an interface small enough to fake in tests, the real clock, and
// a fake one that can model a suspended machine.
//
// Local deadlines must count the time a machine spends suspended. On Linux,
// Go's monotonic clock (CLOCK_MONOTONIC) stops while the system is
// suspended, but store clocks keep running: SQLite's CLOCK_BOOTTIME, the
// wall clocks of Cassandra, PostgreSQL, etcd and Redis servers. A laptop or
// VM that holds a lease with a 3 s TTL, sleeps for 10 s and resumes would
// otherwise go on trusting a lease that others were granted meanwhile
// (field case C14). Real therefore reads CLOCK_BOOTTIME on Linux (macOS:
// CLOCK_MONOTONIC), which counts suspended time and never steps (see
// clock_gettime(2)).
package clock

import (
	"time"
)

// Clock tells the time and makes timers. Implementations are safe for
// concurrent use.
type Clock interface {
	// Now returns the current time. Only differences between two readings
	// of the same Clock are meaningful for deadlines; the real clock's
	// readings also carry a wall time for display.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel after d.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine after d and returns a Timer
	// that can stop or reset it.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a single event, like *time.Timer.
type Timer interface {
	// C returns the channel on which the timer delivers the time (nil for
	// timers made by AfterFunc).
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether the call
	// stopped it.
	Stop() bool
	// Reset changes the timer to fire after d; it reports whether the timer
	// had been active.
	Reset(d time.Duration) bool
}

// Since returns the time elapsed on c since t.
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// Real returns the real clock. Its readings are time.Now() moved forward by
// the time the machine has spent suspended since the process started, as
// measured by CLOCK_BOOTTIME on Linux and CLOCK_MONOTONIC on macOS
// (elsewhere Go's monotonic clock alone, which may stop during sleep). Deadlines compared between two
// of its readings therefore count suspended time; while the machine has
// never been suspended, a reading equals time.Now().
//
// Its timers are Go timers, which run on the monotonic clock and so fire
// late after a suspend by the time spent suspended. Code that must notice a
// deadline passed during a suspend reads Now (tenure's leases do on every
// Err, Done and Value call) and watches for jumps (see tenure's Locker).
func Real() Clock { return realClock{} }

// Suspender is implemented by clocks that know how long the machine has
// spent suspended: the real clock on Linux, and Fake. A Locker whose clock
// implements it checks its leases' deadlines as soon as that time grows, so
// a lease whose deadline passed during a suspend is lost at resume, not when
// its monotonic timer would fire.
type Suspender interface {
	// Suspended returns the total time spent suspended since the process
	// started (or since the Fake was made). It never decreases.
	Suspended() time.Duration
}

type realClock struct{}

func (realClock) Now() time.Time { return now() }

// Suspended implements Suspender.
func (realClock) Suspended() time.Duration { return suspendedNow() }

func (realClock) NewTimer(d time.Duration) Timer {
	t := time.NewTimer(d)
	return realTimer{t: t, c: t.C}
}

func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{t: time.AfterFunc(d, f)}
}

type realTimer struct {
	t *time.Timer
	c <-chan time.Time
}

func (r realTimer) C() <-chan time.Time        { return r.c }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
