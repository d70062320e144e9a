package tenure_test

// After Close, nothing: once Locker.Close returns, no store call the Locker
// started is in flight and none starts; releases do not retry a store that
// never gets better.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/memory"
)

// watchedStore counts the calls in flight and reports every call that
// starts once closed is set (after the Locker's Close returned). Its
// releases wait for proceed when it is not nil.
type watchedStore struct {
	*memory.Store
	t        *testing.T
	inFlight atomic.Int32
	closed   atomic.Bool
	releases atomic.Int32
	entered  chan struct{} // a release entered (once)
	once     sync.Once
	proceed  chan struct{}
}

func (s *watchedStore) call(op, resource string) func() {
	if s.closed.Load() {
		s.t.Errorf("%s %q after the Locker's Close returned", op, resource)
	}
	s.inFlight.Add(1)
	return func() { s.inFlight.Add(-1) }
}

func (s *watchedStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	defer s.call("acquire", resource)()
	return s.Store.Acquire(ctx, resource, owner, ttl)
}

func (s *watchedStore) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	defer s.call("renew", resource)()
	return s.Store.Renew(ctx, resource, owner, token, ttl)
}

func (s *watchedStore) Release(ctx context.Context, resource, owner string, token uint64) error {
	defer s.call("release", resource)()
	s.releases.Add(1)
	if s.entered != nil {
		s.once.Do(func() { close(s.entered) })
	}
	if s.proceed != nil {
		<-s.proceed
	}
	return s.Store.Release(ctx, resource, owner, token)
}

func (s *watchedStore) Get(ctx context.Context, resource string) (driver.Record, error) {
	defer s.call("get", resource)()
	return s.Store.Get(ctx, resource)
}

func (s *watchedStore) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	defer s.call("list", prefix)()
	return s.Store.List(ctx, prefix)
}

func (s *watchedStore) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	defer s.call("subscribe", resource)()
	return s.Store.Subscribe(ctx, resource)
}

// A release in flight when Close runs (a worker's, the store slow to
// answer) is waited for: when Close returns, no store call is in flight,
// so the program may close the store.
func TestCloseWaitsForAReleaseInFlight(t *testing.T) {
	ctx := ctxT(t)
	s := &watchedStore{Store: memory.New(), t: t, entered: make(chan struct{}), proceed: make(chan struct{})}
	lk, err := tenure.New(s)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.TryAcquire(ctx, "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { released <- l.Release(ctx) }()
	<-s.entered
	time.AfterFunc(100*time.Millisecond, func() { close(s.proceed) })
	if err := lk.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.inFlight.Load(); n != 0 {
		t.Fatalf("Close returned with %d store calls in flight", n)
	}
	s.closed.Store(true)
	if err := <-released; err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// A release on a store that was closed (the program closed it while the
// lease was held) fails at once with the store's ErrStoreUnusable, after
// one call: it does not retry an error that never gets better until the
// lease's TTL, and Close then has nothing to wait for.
func TestReleaseDoesNotRetryAnUnusableStore(t *testing.T) {
	ctx := ctxT(t)
	s := &watchedStore{Store: memory.New(), t: t}
	lk, err := tenure.New(s)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.TryAcquire(ctx, "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.Store.Close()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err = l.Release(rctx)
	if !errors.Is(err, tenure.ErrStoreUnusable) || rctx.Err() != nil {
		t.Fatalf("Release on a closed store: %v (ctx %v); want ErrStoreUnusable at once", err, rctx.Err())
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := lk.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := s.releases.Load(); n != 1 {
		t.Fatalf("%d release calls to a closed store; want 1", n)
	}
}

// A closed Locker touches nothing: a semaphore's TryAcquire writes no
// marker, its Acquire (the store closed after the Locker, as documented)
// returns ErrClosed rather than the store's error, and reads through the
// Locker return ErrClosed.
func TestClosedLockerTouchesNothing(t *testing.T) {
	ctx := ctxT(t)
	mem := memory.New()
	s := &watchedStore{Store: mem, t: t}
	lk, err := tenure.New(s)
	if err != nil {
		t.Fatal(err)
	}
	sem, err := lk.Semaphore("jobs", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s.closed.Store(true)
	if _, err := sem.TryAcquire(ctx, time.Minute); !errors.Is(err, tenure.ErrClosed) {
		t.Errorf("Semaphore.TryAcquire after Close: %v; want ErrClosed", err)
	}
	mem.Close()
	if _, err := sem.Acquire(ctx, time.Minute); !errors.Is(err, tenure.ErrClosed) {
		t.Errorf("Semaphore.Acquire after Close (store closed): %v; want ErrClosed", err)
	}
	if _, err := sem.Holders(ctx); !errors.Is(err, tenure.ErrClosed) {
		t.Errorf("Semaphore.Holders after Close: %v; want ErrClosed", err)
	}
	if _, err := lk.Acquire(ctx, "r", time.Minute); !errors.Is(err, tenure.ErrClosed) {
		t.Errorf("Acquire after Close: %v; want ErrClosed", err)
	}
	if _, err := lk.Get(ctx, "r"); !errors.Is(err, tenure.ErrClosed) {
		t.Errorf("Get after Close: %v; want ErrClosed", err)
	}
	if _, err := lk.List(ctx, ""); !errors.Is(err, tenure.ErrClosed) {
		t.Errorf("List after Close: %v; want ErrClosed", err)
	}
}

// Leases of every kind (plain, watched, semaphore slots, a lease lost with
// its release left to the background, a released one), then Close: no
// store call starts afterwards, however far the clock moves.
func TestNothingAfterClose(t *testing.T) {
	ctx := ctxT(t)
	fc := clock.NewFake()
	mem, _ := memory.Open(ctx, memory.Config{Clock: fc})
	s := &watchedStore{Store: mem, t: t}
	lk, err := tenure.New(s, tenure.WithClock(fc), tenure.WithReleaseWatch())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"a", "b", "c"} {
		if _, err := lk.TryAcquire(ctx, r, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	sem, _ := lk.Semaphore("jobs", 3)
	for range 2 {
		if _, err := sem.TryAcquire(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	released, _ := lk.TryAcquire(ctx, "d", 10*time.Second)
	if err := released.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// "b" is taken over behind the Locker's back: its next renewal loses it.
	rec, _ := mem.Get(ctx, "b")
	if err := mem.Release(ctx, "b", rec.Owner, rec.Token); err != nil {
		t.Fatal(err)
	}
	fc.Advance(4 * time.Second) // renewals run
	time.Sleep(20 * time.Millisecond)
	if err := lk.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.inFlight.Load(); n != 0 {
		t.Fatalf("Close returned with %d store calls in flight", n)
	}
	s.closed.Store(true)
	for range 20 {
		fc.Advance(time.Minute)
		time.Sleep(2 * time.Millisecond)
	}
}
