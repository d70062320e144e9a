package tenure_test

// Wake-ups are never lost: a release with a waiter leads to a grant, also
// when the waiter that took the wake-up gives up, and a semaphore wakes as
// many waiters as slots were freed. The Lockers run on a fake clock that
// the tests never advance, so no waiter polls: only a wake-up grants.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/memory"
)

// stallingStore blocks the next acquire while armed, until the caller's
// context ends: a waiter's attempt that is slow, and given up meanwhile.
type stallingStore struct {
	*memory.Store
	armed   atomic.Bool
	entered chan struct{}
}

func (s *stallingStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-ctx.Done()
		return driver.Record{}, driver.UnknownOutcome(context.Cause(ctx))
	}
	return s.Store.Acquire(ctx, resource, owner, ttl)
}

// waitResult is what a waiting Acquire returned.
type waitResult struct {
	slot int
	err  error
}

// A release wakes the waiter that has waited longest; its attempt stalls
// and its caller gives up during it. The wake-up goes on to the next
// waiter, which is granted the resource.
func TestWakeUpTakenByAWaiterThatGivesUpIsPassedOn(t *testing.T) {
	ctx := ctxT(t)
	fc := clock.NewFake()
	mem, _ := memory.Open(ctx, memory.Config{Clock: fc})
	stalling := &stallingStore{Store: mem, entered: make(chan struct{})}
	newLocker := func(s driver.Store) *tenure.Locker {
		lk, err := tenure.New(s, tenure.WithClock(fc))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lk.Close(context.Background()) })
		return lk
	}
	holder, err := newLocker(mem).TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	first, second := make(chan error, 1), make(chan error, 1)
	wait := func(lk *tenure.Locker, ctx context.Context, out chan<- error) {
		waiting := make(chan struct{})
		var once sync.Once
		go func() {
			l, err := lk.Acquire(ctx, "r", ttl, tenure.OnWait(func(*tenure.HeldError, time.Duration) { once.Do(func() { close(waiting) }) }))
			if err == nil {
				defer l.Release(context.Background())
			}
			out <- err
		}()
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter never waited")
		}
	}
	ctx1, giveUp := context.WithCancel(ctx)
	defer giveUp()
	wait(newLocker(stalling), ctx1, first)
	wait(newLocker(mem), ctx, second)

	stalling.armed.Store(true)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stalling.entered: // the first waiter took the wake-up
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not wake the first waiter")
	}
	giveUp()
	if err := <-first; err == nil {
		t.Fatal("the first waiter was granted the resource although its attempt stalled")
	}
	select {
	case err := <-second:
		if err != nil {
			t.Fatalf("the second waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wake-up taken by the waiter that gave up was lost: the second waiter is still waiting")
	}
}

// Two slots held, two waiters: both slots released back to back grant
// both waiters, although each release wakes the waiter that has waited
// longest (the first, subscribed to every slot).
func TestSemaphoreWakesAsManyWaitersAsSlotsFreed(t *testing.T) {
	ctx := ctxT(t)
	fc := clock.NewFake()
	mem, _ := memory.Open(ctx, memory.Config{Clock: fc})
	sem := func() *tenure.Semaphore {
		lk, err := tenure.New(mem, tenure.WithClock(fc))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lk.Close(context.Background()) })
		s, err := lk.Semaphore("r", 2)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var holders []*tenure.SlotLease
	for range 2 {
		sl, err := sem().TryAcquire(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, sl)
	}
	results := make(chan waitResult, 2)
	for range 2 {
		waiting := make(chan struct{})
		var once sync.Once
		s := sem()
		go func() {
			sl, err := s.Acquire(ctx, ttl, tenure.OnSlotsWait(func(*tenure.SlotsHeldError, time.Duration) { once.Do(func() { close(waiting) }) }))
			r := waitResult{err: err}
			if err == nil {
				r.slot = sl.Slot
			}
			results <- r
		}()
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter never waited")
		}
	}
	for _, h := range holders {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	slots := map[int]bool{}
	for i := range 2 {
		select {
		case r := <-results:
			if r.err != nil {
				t.Fatalf("waiter: %v", r.err)
			}
			slots[r.slot] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 2 waiters granted after both slots were released: a wake-up was swallowed", i)
		}
	}
	if len(slots) != 2 {
		t.Fatalf("both waiters granted the same slot: %v", slots)
	}
}
