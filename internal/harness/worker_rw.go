package harness

import (
	"context"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/store"
)

// WorkloadRW holds a shared/exclusive lock on the resource
// (Locker.RWLock): each round, exclusive with probability exclusiveProb,
// shared otherwise; like WorkloadReacquire, it acquires again at once after
// a loss.
const WorkloadRW = "rwlock"

// exclusiveProb is the share of a shared/exclusive worker's rounds that
// take the lock exclusively.
const exclusiveProb = 1.0 / 3

// acquireRW acquires the worker's shared/exclusive lock (blocking) in a
// mode drawn at random.
func (w *worker) acquireRW(ctx context.Context) (*tenure.Lease, Event, error) {
	g := Event{Ev: EvGrant, RW: w.rw.Resource(), Mode: "shared"}
	var l *tenure.Lease
	var err error
	if w.rng.Float64() < exclusiveProb {
		g.Mode = "exclusive"
		l, err = w.rw.AcquireExclusive(ctx, w.cfg.TTL)
	} else {
		l, err = w.rw.AcquireShared(ctx, w.cfg.TTL)
	}
	return l, g, err
}

// rwResource is the shared/exclusive workers' resource.
func (o *orch) rwResource() string { return o.resource + "-rw" }

// kind is the workload of the slot's worker, for striking each in turn: 0
// a lease, 1 a semaphore, 2 a shared/exclusive lock.
func (s *slot) kind() int {
	switch {
	case s.sem:
		return 1
	case s.rw:
		return 2
	}
	return 0
}

// rwShared returns the names of the shared holders' leases of the
// shared/exclusive workers' lock that the store has now.
func (o *orch) rwShared(ctx context.Context) ([]string, error) {
	su, err := store.Parse(o.env.raw)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ds, err := su.Open(octx)
	if err != nil {
		return nil, err
	}
	defer ds.Close() //nolint:errcheck // clean-up
	recs, err := ds.List(octx, o.rwResource()+"/shared-")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range recs {
		if of, ok := naming.ParseSharedName(r.Resource); ok && of == o.rwResource() {
			names = append(names, r.Resource)
		}
	}
	return names, nil
}
