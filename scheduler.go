package tenure

import (
	"container/heap"
	"sync"
	"time"

	"github.com/tenure-go/tenure/clock"
)

// scheduler runs each lease's next background renewal at its time, with one
// timer for all the leases of a Locker (a min-heap of due times), so that
// thousands of leases cost one timer and no goroutine while they wait. Due
// renewals go to the Locker's renewal pool.
type scheduler struct {
	clock  clock.Clock
	submit func([]*Lease)
	// early pulls renewals due within this much after now into the same
	// firing, so that a store that renews many leases in one request
	// (driver.BatchRenewer) gets them together. Zero for other stores.
	early time.Duration

	mu    sync.Mutex
	h     schedHeap
	timer clock.Timer
	armed time.Time // when the timer fires; zero when it is not armed
}

type schedEntry struct {
	at    time.Time
	l     *Lease
	index int
}

type schedHeap []*schedEntry

func (h schedHeap) Len() int           { return len(h) }
func (h schedHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h schedHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *schedHeap) Push(x any) {
	e := x.(*schedEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *schedHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// schedule sets l's next renewal at, replacing any earlier schedule.
func (s *scheduler) schedule(l *Lease, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := l.sched; e != nil && e.index >= 0 {
		e.at = at
		heap.Fix(&s.h, e.index)
	} else {
		l.sched = &schedEntry{at: at, l: l}
		heap.Push(&s.h, l.sched)
	}
	s.armLocked()
}

// due returns the time l's renewal that fired last was due, while l has no
// later renewal scheduled (zero otherwise).
func (s *scheduler) due(l *Lease) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := l.sched; e != nil && e.index < 0 {
		return e.at
	}
	return time.Time{}
}

// cancel removes l's next renewal, if any.
func (s *scheduler) cancel(l *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := l.sched; e != nil && e.index >= 0 {
		heap.Remove(&s.h, e.index)
		s.armLocked()
	}
}

// armLocked makes sure the timer fires no later than the earliest due
// time. It leaves an armed timer alone when it fires at or before that
// time: fire then finds nothing due and arms the timer for the earliest
// due time. Moving a runtime timer costs more than an early firing, and
// a lease renewed moves its renewal later every time.
//
// When no renewal is due at all, the timer is left to fire for nothing, but
// it is no longer trusted (armed is cleared), and the next schedule arms it
// again: a Go timer fires late by the time the machine was suspended, and
// while the Locker holds no lease, no suspend watch (startWatchLocked)
// would notice a suspend and kick the scheduler, so a timer armed before a
// suspend could fire long after a later lease's renewal was due.
func (s *scheduler) armLocked() {
	if len(s.h) == 0 {
		s.armed = time.Time{}
		return
	}
	at := s.h[0].at
	if !s.armed.IsZero() && !s.armed.After(at) {
		return
	}
	d := at.Sub(s.clock.Now())
	if s.timer == nil {
		s.timer = s.clock.AfterFunc(d, s.fire)
	} else {
		s.timer.Stop()
		s.timer.Reset(d)
	}
	s.armed = at
}

func (s *scheduler) fire() {
	s.mu.Lock()
	s.armed = time.Time{}
	limit := s.clock.Now().Add(s.early)
	var due []*Lease
	for len(s.h) > 0 && !s.h[0].at.After(limit) {
		due = append(due, heap.Pop(&s.h).(*schedEntry).l)
	}
	s.armLocked()
	s.mu.Unlock()
	if len(due) > 0 {
		s.submit(due)
	}
}

// kick runs every renewal that is due now, without waiting for the timer
// (after a suspend, Go's timers fire late by the time suspended).
func (s *scheduler) kick() { s.fire() }
