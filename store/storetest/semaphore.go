package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
)

// The semaphore cases: Locker.Semaphore is built on the lease contract
// (one lease per slot and a marker lease naming the number of slots), so
// every store runs them.

// testSemaphoreAtMostN: contenders from Lockers of their own take and give
// back slots of a three-slot semaphore; never more than three hold a slot at
// once, no two hold one slot at once, and each slot's tokens increase from
// one grant to the next.
func testSemaphoreAtMostN(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	ctx := ctxT(t)
	const slots, contenders, rounds = 3, 6, 4
	r := e.res("sem")
	var (
		mu      sync.Mutex
		holding int
		most    int
		bySlot  = map[int]bool{}
		tokens  = map[int][]uint64{}
		wg      sync.WaitGroup
		errs    = make(chan error, contenders)
		granted int
	)
	for c := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk := e.locker(e.store, tenure.WithRetry(10*time.Millisecond, 100*time.Millisecond))
			sem, err := lk.Semaphore(r, slots)
			if err != nil {
				errs <- err
				return
			}
			for range rounds {
				sl, err := sem.Acquire(ctx, longTTL)
				for tries := 0; errors.Is(err, tenure.ErrUnknownOutcome) && tries < 5; tries++ {
					// An honest answer under contention (Cassandra's CAS
					// timeouts on a cluster); the Locker frees what it may
					// have taken. Try again.
					sl, err = sem.Acquire(ctx, longTTL)
				}
				if err != nil {
					errs <- fmt.Errorf("contender %d: %w", c, err)
					return
				}
				mu.Lock()
				if bySlot[sl.Slot] {
					mu.Unlock()
					errs <- fmt.Errorf("slot %d granted to contender %d while another held it", sl.Slot, c)
					return
				}
				bySlot[sl.Slot] = true
				holding++
				granted++
				most = max(most, holding)
				tokens[sl.Slot] = append(tokens[sl.Slot], sl.Token())
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				bySlot[sl.Slot] = false
				holding--
				mu.Unlock()
				if err := sl.Release(ctx); err != nil {
					// A release whose answer was lost can only be resolved
					// by reading the slot afterwards: on a Cassandra
					// cluster under contention (CAS timeouts) the read
					// found the slot already held by the next contender,
					// and the release said "lost". Either way the slot is
					// no longer this contender's. A release that was not
					// confirmed at all lets the slot expire by its TTL. What
					// this test checks is the holders and the tokens (the
					// Release cases check releases); a slot never freed
					// shows as missing grants.
					t.Logf("contender %d: release slot %d: %v", c, sl.Slot, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if most > slots {
		t.Fatalf("%d holders at once of a %d-slot semaphore", most, slots)
	}
	if granted != contenders*rounds {
		t.Fatalf("%d grants; want %d", granted, contenders*rounds)
	}
	if cfg.NoFencing {
		return
	}
	for slot, ts := range tokens {
		for i := 1; i < len(ts); i++ {
			if ts[i] <= ts[i-1] {
				t.Fatalf("slot %d: token %d granted after token %d (tokens %v)", slot, ts[i], ts[i-1], ts)
			}
		}
	}
}

// testSemaphoreFullAndHolders: with every slot held, TryAcquire reports
// the holders (SlotsHeldError, matching ErrHeld) and writes nothing;
// Holders lists one record per held slot; a released slot is granted next.
func testSemaphoreFullAndHolders(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	ctx := ctxT(t)
	r := e.res("sem")
	a := e.semaphore(r, 2)
	s1, err := a.TryAcquire(ctx, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := a.TryAcquire(ctx, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	if s1.Slot == s2.Slot {
		t.Fatalf("both grants on slot %d", s1.Slot)
	}
	b := e.semaphore(r, 2)
	_, err = b.TryAcquire(ctx, longTTL)
	var held *tenure.SlotsHeldError
	if !errors.As(err, &held) || !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("TryAcquire with every slot held: %v; want a SlotsHeldError matching ErrHeld", err)
	}
	if len(held.Holders) != 2 {
		t.Fatalf("SlotsHeldError names %d holders; want 2: %v", len(held.Holders), err)
	}
	recs, err := b.Holders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("Holders: %d records; want 2: %+v", len(recs), recs)
	}
	freed := s1.Slot
	if err := s1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	s3, err := b.TryAcquire(ctx, longTTL)
	if err != nil {
		t.Fatalf("TryAcquire after a slot was released: %v", err)
	}
	if s3.Slot != freed {
		t.Fatalf("granted slot %d; want the released slot %d", s3.Slot, freed)
	}
	if !cfg.NoFencing && s3.Token() <= s1.Token() {
		t.Fatalf("slot %d granted again with token %d, not above %d", freed, s3.Token(), s1.Token())
	}
	for _, sl := range []*tenure.SlotLease{s2, s3} {
		if err := sl.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// testSemaphoreSlotsMismatch: a holder asking with another number of slots
// while the semaphore is in use gets ErrSlotsMismatch, never a slot of its
// own count.
func testSemaphoreSlotsMismatch(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	ctx := ctxT(t)
	r := e.res("sem")
	a := e.semaphore(r, 2)
	sl, err := a.TryAcquire(ctx, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Release(ctx)
	b := e.semaphore(r, 3)
	if got, err := b.TryAcquire(ctx, longTTL); !errors.Is(err, tenure.ErrSlotsMismatch) {
		if err == nil {
			got.Release(ctx)
		}
		t.Fatalf("TryAcquire with 3 slots while 2 are in use: %v; want ErrSlotsMismatch", err)
	}
}

// testSemaphoreSlotTrustedAtAnyTTL: a slot of a long TTL is trusted as a
// plain lease of that TTL is, TTL·(1−ρ) from its grant, not for as long as
// the semaphore's marker (MarkerTTL) only.
func testSemaphoreSlotTrustedAtAnyTTL(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	ctx := ctxT(t)
	const ttl = 2 * time.Minute
	lk := e.locker(e.store)
	sem, err := lk.Semaphore(e.res("sem"), 2)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sl, err := sem.TryAcquire(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Release(ctx)
	if left, least := sl.Remaining(), lk.Timing(ttl).TrustedFor-time.Since(start); left < least {
		t.Fatalf("a slot of TTL %v has %v left right after its grant; a plain lease would have at least %v", ttl, left, least)
	}
}

// testSemaphoreKeptSlotsKeepTheCount: slots held and slots kept
// (ReleaseAfter) keep the number of slots even when the marker is gone
// (here freed by an operator, as its expiry would): a holder of another
// number takes the marker, finds the slots and is refused, and the
// holder's slot is not lost for it.
func testSemaphoreKeptSlotsKeepTheCount(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	ctx := ctxT(t)
	r := e.res("sem")
	held, err := e.semaphore(r, 2).TryAcquire(ctx, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	kept, err := e.semaphore(r, 2).TryAcquire(ctx, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	if err := kept.ReleaseAfter(ctx, longTTL); err != nil {
		t.Fatal(err)
	}
	freeMarker := func() {
		rec, err := e.store.Get(ctx, tenure.MarkerName(r))
		if err != nil {
			t.Fatalf("the marker: %v", err)
		}
		if err := e.store.Release(ctx, rec.Resource, rec.Owner, rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	freeMarker()
	three := e.semaphore(r, 3)
	if sl, err := three.TryAcquire(ctx, longTTL); !errors.Is(err, tenure.ErrSlotsMismatch) {
		if err == nil {
			sl.Release(ctx)
			t.Fatalf("a 3-slot holder got slot %d while 2-slot holders hold one slot and keep another", sl.Slot)
		}
		t.Fatalf("a 3-slot holder: %v; want ErrSlotsMismatch", err)
	}
	// Only the kept slot now.
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	freeMarker()
	if sl, err := three.TryAcquire(ctx, longTTL); !errors.Is(err, tenure.ErrSlotsMismatch) {
		if err == nil {
			sl.Release(ctx)
			t.Fatalf("a 3-slot holder got slot %d while a 2-slot holder keeps one", sl.Slot)
		}
		t.Fatalf("a 3-slot holder: %v; want ErrSlotsMismatch", err)
	}
}

// testSemaphoreClosedLockerWritesNothing: after Locker.Close, a
// semaphore's TryAcquire returns ErrClosed and writes no marker.
func testSemaphoreClosedLockerWritesNothing(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	ctx := ctxT(t)
	lk := e.locker(e.store)
	sem, err := lk.Semaphore(e.res("sem"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx, longTTL); !errors.Is(err, tenure.ErrClosed) {
		t.Fatalf("TryAcquire after Close: %v; want ErrClosed", err)
	}
	if recs, err := e.store.List(ctx, e.res("")); err != nil || len(recs) != 0 {
		t.Fatalf("a closed Locker wrote %v (%v)", recs, err)
	}
}

// semaphore returns a Semaphore of slots slots on r, on a Locker of its own.
func (e *env) semaphore(r string, slots int) *tenure.Semaphore {
	e.t.Helper()
	sem, err := e.locker(e.store).Semaphore(r, slots)
	if err != nil {
		e.t.Fatal(err)
	}
	return sem
}
