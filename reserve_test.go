package tenure_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/memory"
)

// reserving is a store without notifications that records how a Locker
// uses driver.Reserver: AcquireWaiting acquires as Acquire does.
type reserving struct {
	driver.Store
	mu        sync.Mutex
	plain     int
	waiting   []string // waiter of each AcquireWaiting
	waits     []time.Duration
	unreserve []string
}

func (r *reserving) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	r.mu.Lock()
	r.plain++
	r.mu.Unlock()
	return r.Store.Acquire(ctx, resource, owner, ttl)
}

func (r *reserving) AcquireWaiting(ctx context.Context, resource, owner, waiter string, ttl, wait time.Duration) (driver.Record, error) {
	r.mu.Lock()
	r.waiting = append(r.waiting, waiter)
	r.waits = append(r.waits, wait)
	r.mu.Unlock()
	return r.Store.Acquire(ctx, resource, owner, ttl)
}

func (r *reserving) Unreserve(ctx context.Context, resource, waiter string) error {
	r.mu.Lock()
	r.unreserve = append(r.unreserve, waiter)
	r.mu.Unlock()
	return nil
}

// TestAcquireReservesWhileWaiting: on a driver.Reserver store, a blocking
// Acquire's first attempt is a plain Acquire; once it found the resource
// held, its attempts are AcquireWaiting, naming the Locker's waiter and a
// reservation of the retry interval plus a second; a waiter that gives up
// ends its reservation (Unreserve), and one that is granted does not.
func TestAcquireReservesWhileWaiting(t *testing.T) {
	ctx := ctxT(t)
	s := &reserving{Store: memory.New()}
	holder, err := tenure.New(s)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	waiter, err := tenure.New(s, tenure.WithRetry(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close(ctx)
	l, err := holder.TryAcquire(ctx, "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = waiter.Acquire(wctx, "r", time.Minute)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of a held resource: %v", err)
	}
	s.mu.Lock()
	plain, waiting, waits := s.plain, s.waiting, s.waits
	s.mu.Unlock()
	if plain != 2 || len(waiting) == 0 { // the holder's grant, and the waiter's first attempt
		t.Fatalf("%d plain acquires and %d waiting ones; want 2 and some", plain, len(waiting))
	}
	for i, w := range waiting {
		if w != waiter.Owner()+"/waiting" || waits[i] != 5*time.Millisecond+time.Second {
			t.Fatalf("AcquireWaiting by %q for %v; want %q for %v", w, waits[i], waiter.Owner()+"/waiting", 5*time.Millisecond+time.Second)
		}
	}
	// The waiter gave up: its reservation is ended, in the background.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		n := len(s.unreserve)
		s.mu.Unlock()
		if n == 1 {
			break
		}
		if n > 1 || time.Now().After(deadline) {
			t.Fatalf("Unreserve called %d times after the waiter gave up; want once", n)
		}
	}
	// A waiter that is granted leaves no reservation to end.
	go func() {
		time.Sleep(20 * time.Millisecond)
		l.Release(ctx)
	}()
	got, err := waiter.Acquire(ctx, "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release(ctx)
	if err := waiter.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.unreserve) != 1 {
		t.Fatalf("Unreserve called %d times in all; want once (not after the grant)", len(s.unreserve))
	}
}
