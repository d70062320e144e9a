package clock

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Fake is a clock for tests: time stands still until Advance or Suspend
// moves it. It is safe for concurrent use.
type Fake struct {
	mu        sync.Mutex
	now       time.Time
	timers    timerHeap     // pending, earliest first
	changed   chan struct{} // closed and replaced whenever timers change
	seq       uint64        // orders timers due at the same time by creation
	suspended time.Duration
}

// Suspended implements Suspender: the total of every Suspend.
func (f *Fake) Suspended() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.suspended
}

// NewFake returns a Fake clock set to an arbitrary fixed time.
func NewFake() *Fake {
	return NewFakeAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

// NewFakeAt returns a Fake clock set to t.
func NewFakeAt(t time.Time) *Fake {
	return &Fake{now: t, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the clock has been advanced by d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	ch := make(chan time.Time, 1)
	t := &fakeTimer{f: f, c: ch}
	t.fire = func(now time.Time) {
		select {
		case ch <- now:
		default:
		}
	}
	f.add(t, d)
	return t
}

// AfterFunc calls fn in its own goroutine when the clock has been advanced by
// d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f}
	t.fire = func(time.Time) { go fn() }
	f.add(t, d)
	return t
}

// Advance moves the clock forward by d, then fires, in order, every timer
// that came due. Timers made by the functions it fires count from the new
// time, so one Advance never cascades.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	var due []*fakeTimer
	for len(f.timers) > 0 && !f.timers[0].at.After(now) {
		t := heap.Pop(&f.timers).(*fakeTimer)
		t.active = false
		due = append(due, t)
	}
	if len(due) > 0 {
		f.notifyLocked()
	}
	f.mu.Unlock()
	for _, t := range due {
		t.fire(now)
	}
}

// Suspend models a suspended machine on Linux: the clock (CLOCK_BOOTTIME)
// moves forward by d, but no timer fires, and every pending timer comes due
// d later than it would have, as Go's timers run on CLOCK_MONOTONIC, which
// stops while the system is suspended.
func (f *Fake) Suspend(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.suspended += d
	for _, t := range f.timers {
		t.at = t.at.Add(d) // the same shift for all: the heap order holds
	}
}

// Pending returns the number of timers that have not fired or been stopped.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// BlockUntilContext waits until at least n timers are pending, or ctx ends.
func (f *Fake) BlockUntilContext(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		pending, ch := len(f.timers), f.changed
		f.mu.Unlock()
		if pending >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *Fake) add(t *fakeTimer, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addLocked(t, d)
}

func (f *Fake) addLocked(t *fakeTimer, d time.Duration) {
	t.at = f.now.Add(d)
	t.active = true
	t.seq = f.seq
	f.seq++
	heap.Push(&f.timers, t)
	f.notifyLocked()
}

func (f *Fake) removeLocked(t *fakeTimer) bool {
	if !t.active {
		return false
	}
	heap.Remove(&f.timers, t.index)
	t.active = false
	f.notifyLocked()
	return true
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	fire   func(time.Time)
	at     time.Time
	seq    uint64
	index  int
	active bool // guarded by f.mu
}

type timerHeap []*fakeTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*fakeTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

func (t *fakeTimer) C() <-chan time.Time {
	if t.c == nil {
		return nil
	}
	return t.c
}

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.removeLocked(t)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.f.removeLocked(t)
	t.f.addLocked(t, d)
	return was
}
