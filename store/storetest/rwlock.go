package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// The shared/exclusive cases: Locker.RWLock is built on the lease contract
// (the resource's lease is a gate every grant passes through, each shared
// holder has a lease of its own, and an exclusive request lists them), so
// every store runs them.

// rwlock returns the RWLock on r of a Locker of its own.
func (e *env) rwlock(r string, opts ...tenure.Option) *tenure.RWLock {
	e.t.Helper()
	rw, err := e.locker(e.store, opts...).RWLock(r)
	if err != nil {
		e.t.Fatal(err)
	}
	return rw
}

// retryUnknown calls acquire again while it reports an unknown outcome, a
// few times: an honest answer under contention (Cassandra's CAS timeouts
// on a cluster); the Locker frees what the attempt may have taken.
func retryUnknown(acquire func() (*tenure.Lease, error)) (*tenure.Lease, error) {
	l, err := acquire()
	for tries := 0; errors.Is(err, tenure.ErrUnknownOutcome) && tries < 5; tries++ {
		l, err = acquire()
	}
	return l, err
}

// testRWSharedTogether: shared holders of their own Lockers hold at once,
// an exclusive request beside them is refused (naming them) and leaves the
// gate free, it is granted once they left, a shared request beside it is
// refused, and tokens grow in grant order across both modes.
func testRWSharedTogether(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	ctx := ctxT(t)
	r := e.res("rw")
	const n = 4
	shared := make([]*tenure.Lease, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		rw := e.rwlock(r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			shared[i], errs[i] = retryUnknown(func() (*tenure.Lease, error) { return rw.AcquireShared(ctx, longTTL) })
		}()
	}
	wg.Wait()
	var top uint64
	seen := map[uint64]bool{}
	for i, l := range shared {
		if errs[i] != nil {
			t.Fatalf("shared holder %d: %v", i, errs[i])
		}
		if !cfg.NoFencing {
			if seen[l.Token()] {
				t.Fatalf("two shared holders with token %d", l.Token())
			}
			seen[l.Token()] = true
		}
		top = max(top, l.Token())
		if err := l.Err(); err != nil {
			t.Fatalf("shared holder %d no longer trusts its lease: %v", i, err)
		}
	}
	ex := e.rwlock(r)
	recs, err := ex.SharedHolders(ctx)
	if err != nil || len(recs) != n {
		t.Fatalf("SharedHolders: %d records (%v); want %d", len(recs), err, n)
	}
	_, err = ex.TryAcquireExclusive(ctx, longTTL)
	var sh *tenure.SharedHeldError
	if !errors.As(err, &sh) || !errors.Is(err, tenure.ErrHeld) || len(sh.Holders) != n {
		t.Fatalf("TryAcquireExclusive beside %d shared holders: %v; want a SharedHeldError naming them", n, err)
	}
	e.mustFree(ctx, r)
	for _, l := range shared {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	x, err := retryUnknown(func() (*tenure.Lease, error) { return ex.TryAcquireExclusive(ctx, longTTL) })
	if err != nil {
		t.Fatalf("TryAcquireExclusive once the shared holders left: %v", err)
	}
	if x.Resource() != r || (!cfg.NoFencing && x.Token() <= top) {
		t.Fatalf("exclusive lease on %q with token %d; want %q with a token above the shared holders' %d", x.Resource(), x.Token(), r, top)
	}
	other := e.rwlock(r)
	var held *tenure.HeldError
	if _, err := other.TryAcquireShared(ctx, longTTL); !errors.As(err, &held) || held.Holder.Owner != x.Owner() {
		t.Fatalf("TryAcquireShared beside the exclusive holder: %v; want a HeldError naming it", err)
	}
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := retryUnknown(func() (*tenure.Lease, error) { return other.TryAcquireShared(ctx, longTTL) })
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.NoFencing && s.Token() <= x.Token() {
		t.Fatalf("shared holder after the exclusive one: token %d, not above %d", s.Token(), x.Token())
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// testRWNeverSharedBesideExclusive: contenders of their own Lockers take
// the lock in random modes, round after round: never a shared holder
// beside an exclusive one, never two exclusive holders, and every grant's
// token is larger than those of the grants that came in before it across
// both modes (each exclusive grant's above every token granted before it,
// and below every token granted after its holder left).
func testRWNeverSharedBesideExclusive(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	ctx := ctxT(t)
	r := e.res("rw")
	const contenders, rounds = 6, 4
	type grant struct {
		exclusive bool
		token     uint64
	}
	var (
		mu        sync.Mutex
		sharedIn  int
		exclusive int
		grants    []grant
		wg        sync.WaitGroup
		errs      = make(chan error, contenders)
	)
	for c := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rw := e.rwlock(r)
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for range rounds {
				ex := rng.IntN(3) == 0
				l, err := retryUnknown(func() (*tenure.Lease, error) {
					if ex {
						return rw.AcquireExclusive(ctx, longTTL)
					}
					return rw.AcquireShared(ctx, longTTL)
				})
				if err != nil {
					errs <- fmt.Errorf("contender %d: %w", c, err)
					return
				}
				mu.Lock()
				switch {
				case ex && (exclusive > 0 || sharedIn > 0):
					errs <- fmt.Errorf("contender %d granted exclusive (token %d) beside %d exclusive and %d shared holders", c, l.Token(), exclusive, sharedIn)
				case !ex && exclusive > 0:
					errs <- fmt.Errorf("contender %d granted shared (token %d) beside an exclusive holder", c, l.Token())
				}
				if ex {
					exclusive++
				} else {
					sharedIn++
				}
				grants = append(grants, grant{ex, l.Token()})
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				if ex {
					exclusive--
					// Marks where its holder left.
					grants = append(grants, grant{})
				} else {
					sharedIn--
				}
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					// As in SemaphoreAtMostN: a release that could not be
					// confirmed leaves the lease to expire; what this test
					// checks is the holders and the tokens.
					t.Logf("contender %d: release: %v", c, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() || cfg.NoFencing {
		return
	}
	for i, g := range grants {
		if !g.exclusive {
			continue
		}
		for _, b := range grants[:i] {
			if b.token != 0 && b.token >= g.token {
				t.Fatalf("exclusive token %d granted after token %d", g.token, b.token)
			}
		}
		left := i + 1
		for grants[left].token != 0 {
			left++
		}
		for _, a := range grants[left:] {
			if a.token != 0 && a.token <= g.token {
				t.Fatalf("token %d granted after the exclusive holder of token %d left", a.token, g.token)
			}
		}
	}
}

// testRWExclusiveWaiterNotStarved: an exclusive request that waits for a
// shared holder is granted when that holder leaves, although shared
// requests kept arriving while it waited; none of those is granted before
// it (they would be compatible with the shared holder), and they are
// granted after it, with larger tokens.
func testRWExclusiveWaiterNotStarved(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	ctx := ctxT(t)
	r := e.res("rw")
	first, err := retryUnknown(func() (*tenure.Lease, error) { return e.rwlock(r).AcquireShared(ctx, longTTL) })
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	var once sync.Once
	type result struct {
		l   *tenure.Lease
		err error
		at  time.Time
	}
	exGot := make(chan result, 1)
	ex := e.rwlock(r)
	go func() {
		l, err := ex.AcquireExclusive(ctx, longTTL, tenure.OnSharedWait(func(*tenure.SharedHeldError, time.Duration) {
			once.Do(func() { close(waiting) })
		}))
		exGot <- result{l, err, time.Now()}
	}()
	select {
	case <-waiting:
	case res := <-exGot:
		t.Fatalf("the exclusive request returned (%v) while a shared holder held", res.err)
	}
	// Shared requests keep arriving while the exclusive one waits.
	const arrivals = 4
	sharedGot := make(chan result, arrivals)
	for range arrivals {
		rw := e.rwlock(r)
		go func() {
			l, err := retryUnknown(func() (*tenure.Lease, error) { return rw.AcquireShared(ctx, longTTL) })
			sharedGot <- result{l, err, time.Now()}
		}()
		time.Sleep(20 * time.Millisecond)
		select {
		case res := <-sharedGot:
			t.Fatalf("a shared request that arrived while an exclusive one waited was granted first (%v)", res.err)
		default:
		}
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	x := <-exGot
	if x.err != nil {
		t.Fatalf("the exclusive request: %v", x.err)
	}
	if err := x.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range arrivals {
		s := <-sharedGot
		if s.err != nil {
			t.Fatalf("a shared request: %v", s.err)
		}
		if !s.at.After(x.at) {
			t.Errorf("a shared request that arrived while the exclusive one waited was granted before it")
		}
		if !cfg.NoFencing && s.l.Token() <= x.l.Token() {
			t.Errorf("shared token %d, not above the exclusive token %d granted before it", s.l.Token(), x.l.Token())
		}
		s.l.Release(ctx)
	}
}

// testRWLastSharedReleaseWakesExclusive: on a store whose releases notify
// (driver.Watcher), an exclusive request waiting for shared holders is
// granted when the last leaves, at once: it would poll only after an hour.
func testRWLastSharedReleaseWakesExclusive(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	if _, ok := e.store.(driver.Watcher); !ok {
		t.Skip("the store sends no release notifications (no driver.Watcher)")
	}
	ctx := ctxT(t)
	r := e.res("rw")
	var shared []*tenure.Lease
	for range 2 {
		l, err := retryUnknown(func() (*tenure.Lease, error) { return e.rwlock(r).AcquireShared(ctx, longTTL) })
		if err != nil {
			t.Fatal(err)
		}
		shared = append(shared, l)
	}
	ex := e.rwlock(r, hourBackoff)
	waits := make(chan int, 64)
	got := make(chan error, 1)
	var x *tenure.Lease
	go func() {
		var err error
		x, err = ex.AcquireExclusive(ctx, longTTL, tenure.OnSharedWait(func(h *tenure.SharedHeldError, _ time.Duration) { waits <- len(h.Holders) }))
		got <- err
	}()
	select {
	case <-waits:
	case err := <-got:
		t.Fatalf("the exclusive request returned (%v) beside shared holders", err)
	}
	for _, l := range shared {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		x.Release(ctx)
	case <-time.After(notifyBound):
		t.Fatalf("the exclusive request was not granted within %v of the last shared holder's release", notifyBound)
	}
}

// testRWKilledSharedHolderFreedByTTL: a shared holder that dies (its
// store calls hang from then on) keeps an exclusive request out until its
// lease expires, and the request is granted then.
func testRWKilledSharedHolderFreedByTTL(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	ctx := ctxT(t)
	r := e.res("rw")
	dead := NewFaulty(e.store)
	rw, err := e.locker(dead).RWLock(r)
	if err != nil {
		t.Fatal(err)
	}
	s, err := retryUnknown(func() (*tenure.Lease, error) { return rw.AcquireShared(ctx, cfg.ShortTTL) })
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{OpAcquire, OpRenew, OpRelease, OpGet, OpKeep} {
		dead.Set(op, Hang, 0)
	}
	ex := e.rwlock(r)
	got := make(chan error, 1)
	var x *tenure.Lease
	go func() {
		var err error
		x, err = ex.AcquireExclusive(ctx, longTTL)
		got <- err
	}()
	limit := time.Now().Add(cfg.ShortTTL + cfg.ExpirySlack + 30*time.Second)
	for {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Advance == nil && s.Err() == nil {
				t.Fatal("the exclusive request was granted while the dead shared holder still trusted its lease")
			}
			x.Release(ctx)
			return
		case <-time.After(20 * time.Millisecond):
			if cfg.Advance != nil {
				cfg.Advance(cfg.ShortTTL / 4)
			}
			if time.Now().After(limit) {
				t.Fatalf("the exclusive request was not granted %v after a shared holder of TTL %v died", time.Since(limit.Add(-cfg.ShortTTL-cfg.ExpirySlack-30*time.Second)).Round(time.Millisecond), cfg.ShortTTL)
			}
		}
	}
}

// testRWClosedLockerWritesNothing: after Locker.Close, the lock's acquires
// return ErrClosed and write nothing.
func testRWClosedLockerWritesNothing(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	ctx := ctxT(t)
	lk := e.locker(e.store)
	rw, err := lk.RWLock(e.res("rw"))
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{
		"TryAcquireShared":    func() error { _, err := rw.TryAcquireShared(ctx, longTTL); return err },
		"AcquireShared":       func() error { _, err := rw.AcquireShared(ctx, longTTL); return err },
		"TryAcquireExclusive": func() error { _, err := rw.TryAcquireExclusive(ctx, longTTL); return err },
		"AcquireExclusive":    func() error { _, err := rw.AcquireExclusive(ctx, longTTL); return err },
	} {
		if err := f(); !errors.Is(err, tenure.ErrClosed) {
			t.Errorf("%s after Close: %v; want ErrClosed", name, err)
		}
	}
	if recs, err := e.store.List(ctx, e.res("")); err != nil || len(recs) != 0 {
		t.Fatalf("a closed Locker wrote %v (%v)", recs, err)
	}
}
