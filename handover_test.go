package tenure_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/memory"
)

// countingStore counts acquire calls; it keeps the memory store's
// notifications (Subscribe wakes one waiter, Watch every watcher).
type countingStore struct {
	*memory.Store
	acquires atomic.Int64
}

func (s *countingStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (tenure.Record, error) {
	s.acquires.Add(1)
	return s.Store.Acquire(ctx, resource, owner, ttl)
}

// 50 waiters queue on one resource; the lease is handed down the whole
// queue. Each hand-over costs a few store calls whatever the number of
// waiters (a release wakes one waiter, and waiters that get notifications
// only look again when the holder's lease would expire), and waiters in one
// process are served in the order they came.
func TestHandOverWakesOneWaiter(t *testing.T) {
	s := &countingStore{Store: memory.New()}
	ctx := ctxT(t)
	holder, _ := tenure.New(s)
	l, err := holder.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		before := s.acquires.Load()
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk, _ := tenure.New(s)
			l, err := lk.Acquire(ctx, "r", ttl)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
		// The next waiter comes only once this one waits: it subscribes
		// after its first refused attempt, then tries again, and waiters
		// are woken in the order they subscribed.
		waitFor(t, func() bool { return s.acquires.Load() >= before+2 }, "the waiter's attempt after it subscribed")
	}
	time.Sleep(50 * time.Millisecond)
	before := s.acquires.Load()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	calls := s.acquires.Load() - before
	if calls > 2*n {
		t.Fatalf("%d acquire calls to hand the resource down %d waiters; want a few per hand-over", calls, n)
	}
	next := 0
	for i := range order {
		if i != next {
			t.Fatalf("waiter %d granted when waiter %d was next: not in arrival order", i, next)
		}
		next++
	}
	t.Logf("%d acquire calls for %d hand-overs", calls, n)
}
