package tenure

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/memory"
)

// lateSlotStore answers the acquire of a slot lease only after moving the
// fake clock past the marker's window: a slot grant whose answer came late
// (a slow store, or a pause while it was in flight).
type lateSlotStore struct {
	*memory.Store
	fc *clock.Fake
}

func (s *lateSlotStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	rec, err := s.Store.Acquire(ctx, resource, owner, ttl)
	if strings.Contains(resource, "/slot-") {
		s.fc.Advance(MarkerTTL)
	}
	return rec, err
}

// A slot granted after the marker's window (when holders of another number
// of slots may hold the marker) is not trusted: it is freed, and the error
// says why.
func TestSlotGrantedPastTheMarkersWindowIsFreed(t *testing.T) {
	ctx := context.Background()
	fc := clock.NewFake()
	mem, _ := memory.Open(ctx, memory.Config{Clock: fc})
	lk, err := New(&lateSlotStore{Store: mem, fc: fc}, WithClock(fc))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close(ctx)
	sem, _ := lk.Semaphore("r", 2)
	sl, err := sem.TryAcquire(ctx, 10*time.Minute)
	if err == nil {
		t.Fatalf("slot %d granted past the marker's window", sl.Slot)
	}
	if !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "released it") {
		t.Fatalf("TryAcquire: %v; want the slot freed, wrapping ErrLeaseLost", err)
	}
	if recs, _ := mem.List(ctx, "r/slot-"); len(recs) != 0 {
		t.Fatalf("the late slot is still held: %v", recs)
	}
}

// countingRenewals counts the renewals (one by one, in batches, and the
// marker's, which are acquires) per resource.
type countingRenewals struct {
	*memory.Store
	mu      sync.Mutex
	renews  map[string]int
	batches int
}

func (s *countingRenewals) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if strings.HasSuffix(resource, "/slots") {
		s.mu.Lock()
		s.renews[resource]++
		s.mu.Unlock()
	}
	return s.Store.Acquire(ctx, resource, owner, ttl)
}

func (s *countingRenewals) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	s.mu.Lock()
	s.renews[resource]++
	s.mu.Unlock()
	return s.Store.Renew(ctx, resource, owner, token, ttl)
}

func (s *countingRenewals) RenewBatch(ctx context.Context, leases []driver.Renewal) []error {
	s.mu.Lock()
	s.batches++
	for _, r := range leases {
		s.renews[r.Resource]++
	}
	s.mu.Unlock()
	return s.Store.RenewBatch(ctx, leases)
}

func (s *countingRenewals) count(resource string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renews[resource]
}

// The marker is renewed by the Locker's one renewal engine: the scheduler
// and the renewal pool, at the Locker's renew interval (with an acquire by
// the owner string every holder shares, which no batch carries; the slot
// is renewed in a batch). While the slot is held
// the marker stays live, however long; once the slot is released, it is
// no longer renewed and expires (it is never released: others share it).
func TestMarkerRenewedLikeAnyLease(t *testing.T) {
	ctx := context.Background()
	fc := clock.NewFake()
	mem, _ := memory.Open(ctx, memory.Config{Clock: fc})
	st := &countingRenewals{Store: mem, renews: map[string]int{}}
	lk, err := New(st, WithClock(fc), WithRenewInterval(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close(ctx)
	sem, _ := lk.Semaphore("r", 2)
	sl, err := sem.TryAcquire(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 24 { // two minutes, four marker TTLs
		fc.Advance(5 * time.Second)
		waitFor(t, "the renewals did not run", func() bool {
			return st.count(sl.Resource()) >= i+1 && st.count(MarkerName("r")) >= i+1 && scheduledAfter(lk, fc.Now()) == 2
		})
	}
	if n := st.count(MarkerName("r")) - 1; n < 24 || n > 26 { // less its first acquire
		t.Fatalf("%d marker renewals in 24 renew intervals", n)
	}
	if _, err := mem.Get(ctx, MarkerName("r")); err != nil {
		t.Fatalf("the marker is gone while its slot is held: %v", err)
	}
	if err := sl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Get(ctx, MarkerName("r")); err != nil {
		t.Fatalf("the marker was released with the slot: %v", err)
	}
	before := st.count(MarkerName("r"))
	fc.Advance(MarkerTTL + time.Second)
	time.Sleep(10 * time.Millisecond)
	if n := st.count(MarkerName("r")); n != before {
		t.Fatalf("the marker was renewed %d times after its slot was released", n-before)
	}
	if _, err := mem.Get(ctx, MarkerName("r")); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("the marker outlived its TTL after the last slot was released: %v", err)
	}
}

// scheduledAfter returns how many renewals lk's scheduler has due after t.
func scheduledAfter(lk *Locker, t time.Time) int {
	lk.sched.mu.Lock()
	defer lk.sched.mu.Unlock()
	n := 0
	for _, e := range lk.sched.h {
		if e.at.After(t) {
			n++
		}
	}
	return n
}
