package tenure

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/memory"
)

// slowMarkerStore holds the next acquire of the semaphore's marker while
// hold is set, until release is closed: a marker renewal whose answer comes
// late (a slow store, or a suspend while it was in flight).
type slowMarkerStore struct {
	*memory.Store
	marker  string
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *slowMarkerStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if resource == s.marker && s.hold.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.release
	}
	return s.Store.Acquire(ctx, resource, owner, ttl)
}

// slowMarkerSlot returns a slot lease of a 2-slot semaphore on "r" (TTL
// 10 minutes, so that only the marker's bound can end it) whose marker
// renewal, sent MarkerTTL/3 after the grant, is in flight and held.
func slowMarkerSlot(t *testing.T) (*clock.Fake, *memory.Store, *slowMarkerStore, *SlotLease) {
	t.Helper()
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	st := &slowMarkerStore{Store: mem, marker: MarkerName("r"), entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-st.release:
		default:
			close(st.release)
		}
	})
	lk, err := New(st, WithClock(fc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Close(context.Background()) })
	sem, err := lk.Semaphore("r", 2)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := sem.TryAcquire(context.Background(), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The watchdog, the renewal timer and keepMarker's timer.
	waitFor(t, "keepMarker did not arm its timer", func() bool { return fc.Pending() >= 3 })
	st.hold.Store(true)
	fc.Advance(MarkerTTL / 3)
	<-st.entered
	return fc, mem, st, sl
}

// A slot lease ends at its bound (the marker's deadline) while the marker's
// renewal hangs: the watchdog watches the bound too, not only the lease's
// own deadline, so the lease's Done channel closes before a holder of
// another number of slots can be granted (adversarial review: it stayed
// open while a 3-slot holder held the resource).
func TestSlotLostAtItsBoundWhileTheMarkerRenewalHangs(t *testing.T) {
	fc, mem, _, sl := slowMarkerSlot(t)
	bound := sl.Deadline()
	done := sl.Done()
	fc.Advance(MarkerTTL) // past the bound, and past the marker's expiry in the store
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%v past the slot's bound, its Done channel is still open", fc.Now().Sub(bound))
	}
	if cause := context.Cause(sl.Context()); !errors.Is(cause, ErrLeaseLost) || !errors.Is(cause, errBound) {
		t.Fatalf("cause %v, want a loss at the marker's bound", cause)
	}
	// The resource is now free for holders of 3 slots, and the 2-slot
	// holder no longer trusts its slot.
	lk3, err := New(mem, WithClock(fc))
	if err != nil {
		t.Fatal(err)
	}
	defer lk3.Close(context.Background())
	sem3, _ := lk3.Semaphore("r", 3)
	if _, err := sem3.TryAcquire(context.Background(), time.Minute); err != nil {
		t.Fatalf("3-slot holder: %v", err)
	}
}

// A marker renewal confirmed after the slot's bound has passed leaves the
// slot lost, its loss reported once. (Whether the watchdog or a read of Err
// sees the passed bound first is up to the scheduler here;
// TestSetBoundRefusesAPassedBound pins the refusal to move a passed bound.)
func TestLateMarkerConfirmationDoesNotReviveTheSlot(t *testing.T) {
	fc, mem, st, sl := slowMarkerSlot(t)
	var losses atomic.Int32
	go func() { <-sl.Done(); losses.Add(1) }()
	fc.Advance(MarkerTTL/3*2 + 5*time.Second) // the bound and the marker's expiry in the store have passed
	if _, err := mem.Get(context.Background(), MarkerName("r")); err == nil {
		t.Fatal("test setup: the marker is still live in the store")
	}
	close(st.release) // the late answer: the request writes the marker again
	waitFor(t, "the slot is still trusted past its bound", func() bool { return sl.Err() != nil })
	waitFor(t, "the slot's loss was never reported", func() bool { return losses.Load() == 1 })
	if err := sl.Err(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Err %v, want ErrLeaseLost", err)
	}
}

// frozenClock is a fake clock whose AfterFunc timers never fire: a
// watchdog that was not run (the machine was suspended, the runtime late).
type frozenClock struct{ *clock.Fake }

func (frozenClock) AfterFunc(time.Duration, func()) clock.Timer { return stuckTimer{} }

type stuckTimer struct{}

func (stuckTimer) C() <-chan time.Time      { return nil }
func (stuckTimer) Reset(time.Duration) bool { return false }
func (stuckTimer) Stop() bool               { return false }

// setBound does not move a bound that has passed, even when no timer has
// ended the lease yet: the lease is lost at once.
func TestSetBoundRefusesAPassedBound(t *testing.T) {
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	lk, err := New(mem, WithClock(frozenClock{fc}))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close(context.Background())
	l, err := lk.TryAcquire(context.Background(), "r", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	l.setBound(fc.Now().Add(10 * time.Second))
	fc.Advance(11 * time.Second)
	l.setBound(fc.Now().Add(10 * time.Second)) // a confirmation that came too late
	l.mu.Lock()
	state := l.state
	l.mu.Unlock()
	if state != stateLost {
		t.Fatalf("a bound that passed was moved: the lease is still held, until %v", l.Deadline())
	}
}
