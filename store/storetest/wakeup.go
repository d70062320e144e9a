package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// The wake-up cases: on a store whose release notifications wake one
// waiter per release (driver.Watcher), no wake-up is lost. The waiters
// back off for an hour between attempts, so only a wake-up grants them
// anything within the test; the holders' TTL is longTTL, so a waiter that
// was not woken would look again only when the holder's lease would have
// expired.

// notifyBound is how long a woken waiter may take to be granted: far
// longer than a round trip, far shorter than longTTL.
const notifyBound = 30 * time.Second

// hourBackoff makes a waiter poll only after an hour: only a wake-up
// grants it anything within a test.
var hourBackoff = tenure.WithRetry(time.Hour, time.Hour)

// stallingStore blocks the next acquire while armed, until the caller's
// context ends, and then reports an unknown outcome without calling the
// store: an attempt that is slow, and given up meanwhile. It passes the
// store's notifications through.
type stallingStore struct {
	driver.Store
	armed   atomic.Bool
	entered chan struct{}
}

func (s *stallingStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (tenure.Record, error) {
	if s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-ctx.Done()
		return tenure.Record{}, driver.UnknownOutcome(context.Cause(ctx))
	}
	return s.Store.Acquire(ctx, resource, owner, ttl)
}

func (s *stallingStore) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.Store.(driver.Notifier).Subscribe(ctx, resource)
}

func (s *stallingStore) Watch(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.Store.(driver.Watcher).Watch(ctx, resource)
}

func (s *stallingStore) CheckTTL(ttl time.Duration) error {
	if tc, ok := s.Store.(driver.TTLChecker); ok {
		return tc.CheckTTL(ttl)
	}
	return nil
}

// warmUp subscribes to a resource of its own and ends the subscription:
// a store whose listening connection wakes every subscriber when it comes
// up (driver.Hub.WakeAll) has done so before the test's waiters subscribe,
// so that they make no attempt but those the test causes.
func warmUp(t *testing.T, s driver.Store) {
	t.Helper()
	_, stop, err := s.(driver.Notifier).Subscribe(ctxT(t), "storetest/warm-up")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	stop()
}

// waitingNow starts f, a blocking acquire that calls the returned wait
// callback after each attempt that found the resource held, and returns
// once f waits (or fails the test when ctx ends first).
func waitingNow(t *testing.T, ctx context.Context, f func(waiting func())) {
	t.Helper()
	ch := make(chan struct{})
	var once sync.Once
	go f(func() { once.Do(func() { close(ch) }) })
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("a waiter never waited")
	}
}

// testWakeUpPassedOn: a release wakes the waiter that has waited longest;
// its attempt stalls and its caller gives up during it. The wake-up goes
// on to the next waiter, which is granted the resource.
func testWakeUpPassedOn(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	if _, ok := e.store.(driver.Watcher); !ok {
		t.Skip("the store's notifications do not wake one waiter (no driver.Watcher)")
	}
	ctx := ctxT(t)
	warmUp(t, e.store)
	r := e.res("r")
	holder, err := e.locker(e.store).TryAcquire(ctx, r, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	stalling := &stallingStore{Store: e.store, entered: make(chan struct{})}

	first, second := make(chan error, 1), make(chan error, 1)
	ctx1, giveUp := context.WithCancel(ctx)
	defer giveUp()
	for _, w := range []struct {
		lk  *tenure.Locker
		ctx context.Context
		out chan error
	}{{e.locker(stalling, hourBackoff), ctx1, first}, {e.locker(e.store, hourBackoff), ctx, second}} {
		waitingNow(t, ctx, func(waiting func()) {
			l, err := w.lk.Acquire(w.ctx, r, longTTL, tenure.OnWait(func(*tenure.HeldError, time.Duration) { waiting() }))
			if err == nil {
				defer l.Release(context.Background())
			}
			w.out <- err
		})
	}
	stalling.armed.Store(true)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stalling.entered: // the first waiter took the wake-up
	case <-time.After(notifyBound):
		t.Fatal("the release did not wake the first waiter")
	}
	giveUp()
	if err := <-first; err == nil {
		t.Fatal("the first waiter was granted the resource although its attempt stalled")
	}
	start := time.Now()
	select {
	case err := <-second:
		if err != nil {
			t.Fatalf("the second waiter: %v", err)
		}
		t.Logf("the second waiter was granted %v after the first gave up", time.Since(start))
	case <-time.After(notifyBound):
		t.Fatal("the wake-up taken by the waiter that gave up was lost: the second waiter is still waiting")
	}
}

// testSemaphoreWakesAsManyAsFreed: two slots held, two waiters in one
// process; both slots released back to back grant both waiters, although
// each release wakes the waiter that has waited longest (the first, which
// waits for every slot).
func testSemaphoreWakesAsManyAsFreed(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	if _, ok := e.store.(driver.Watcher); !ok {
		t.Skip("the store's notifications do not wake one waiter (no driver.Watcher)")
	}
	ctx := ctxT(t)
	r := e.res("sem")
	var holders []*tenure.SlotLease
	for range 2 {
		sl, err := e.semaphore(r, 2).TryAcquire(ctx, longTTL)
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, sl)
	}
	// The waiters keep their slots until the end: a slot released by a
	// granted waiter would wake the other one by itself.
	granted := make(chan error, 2)
	for range 2 {
		sem, err := e.locker(e.store, hourBackoff).Semaphore(r, 2)
		if err != nil {
			t.Fatal(err)
		}
		waitingNow(t, ctx, func(waiting func()) {
			_, err := sem.Acquire(ctx, longTTL, tenure.OnSlotsWait(func(*tenure.SlotsHeldError, time.Duration) { waiting() }))
			granted <- err
		})
	}
	for _, h := range holders {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		select {
		case err := <-granted:
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
		case <-time.After(notifyBound):
			t.Fatalf("%d of 2 waiters granted after both slots were released: a wake-up was swallowed", i)
		}
	}
}
