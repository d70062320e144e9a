package tenure_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

func newRW(t *testing.T, s driver.Store, r string, opts ...tenure.Option) (*tenure.Locker, *tenure.RWLock) {
	t.Helper()
	lk, err := tenure.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		lk.Close(ctx)
	})
	rw, err := lk.RWLock(r)
	if err != nil {
		t.Fatal(err)
	}
	return lk, rw
}

func TestRWLockSharedTogetherExclusiveAlone(t *testing.T) {
	mem := memory.New()
	ctx := ctxT(t)
	var shared []*tenure.Lease
	for i := range 3 {
		_, rw := newRW(t, mem, "reports")
		l, err := rw.TryAcquireShared(ctx, ttl)
		if err != nil {
			t.Fatalf("shared holder %d: %v", i, err)
		}
		if r, ok := naming.ParseSharedName(l.Resource()); !ok || r != "reports" {
			t.Fatalf("shared holder %d holds %q, not a shared holder's lease of reports", i, l.Resource())
		}
		if i > 0 && l.Token() <= shared[i-1].Token() {
			t.Fatalf("shared holder %d: token %d after %d", i, l.Token(), shared[i-1].Token())
		}
		shared = append(shared, l)
	}
	// The gate is free again once every shared request passed.
	if _, err := mem.Get(ctx, "reports"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("the gate after the shared requests: %v; want free", err)
	}
	_, ex := newRW(t, mem, "reports")
	_, err := ex.TryAcquireExclusive(ctx, ttl)
	var sh *tenure.SharedHeldError
	if !errors.As(err, &sh) || !errors.Is(err, tenure.ErrHeld) || len(sh.Holders) != 3 {
		t.Fatalf("exclusive beside 3 shared holders: %v; want a SharedHeldError naming 3", err)
	}
	if _, err := mem.Get(ctx, "reports"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("a refused TryAcquireExclusive left the gate held: %v", err)
	}
	for _, l := range shared {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e, err := ex.TryAcquireExclusive(ctx, ttl)
	if err != nil {
		t.Fatalf("exclusive once the shared holders left: %v", err)
	}
	if e.Resource() != "reports" || e.Token() <= shared[2].Token() {
		t.Fatalf("exclusive lease on %q token %d; want the gate with a token above %d", e.Resource(), e.Token(), shared[2].Token())
	}
	_, other := newRW(t, mem, "reports")
	var held *tenure.HeldError
	if _, err := other.TryAcquireShared(ctx, ttl); !errors.As(err, &held) || held.Holder.Owner != e.Owner() {
		t.Fatalf("shared beside an exclusive holder: %v; want a HeldError naming it", err)
	}
	if _, err := other.TryAcquireExclusive(ctx, ttl); !errors.As(err, &held) {
		t.Fatalf("a second exclusive: %v; want a HeldError", err)
	}
	if err := e.Release(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := other.TryAcquireShared(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if s.Token() <= e.Token() {
		t.Fatalf("shared after exclusive: token %d, not above %d", s.Token(), e.Token())
	}
}

// TestRWLockSharedLeaseIsARealLease: a shared holder's lease is renewed,
// lost and released as any lease; its context carries it, and its token
// is the gate's, not its registration's.
func TestRWLockSharedLeaseIsARealLease(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	rw, err := f.lk.RWLock("r")
	if err != nil {
		t.Fatal(err)
	}
	// Two grants of the gate first, so that its tokens and the
	// registration's (per name on the memory store) differ.
	var last uint64
	for range 2 {
		p, err := f.lk.TryAcquire(ctx, "r", ttl)
		if err != nil {
			t.Fatal(err)
		}
		last = p.Token()
		p.Release(ctx)
	}
	l, err := rw.TryAcquireShared(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := f.mem.Get(ctx, l.Resource())
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= last || reg.Token == l.Token() {
		t.Fatalf("the shared lease reports token %d (its registration's is %d, the gate's last was %d); want the gate's next", l.Token(), reg.Token, last)
	}
	if got := tenure.LeaseFromContext(l.Context()); got != l || got.Token() != l.Token() {
		t.Fatalf("LeaseFromContext: %v", got)
	}
	// Renewals fail: the lease is lost at its deadline, with its token.
	f.faulty.Set(storetest.OpRenew, storetest.Fail, 0)
	f.clock.Advance(ttl)
	cause := context.Cause(l.Context())
	var lost *tenure.LostError
	if !errors.As(cause, &lost) || !errors.Is(cause, tenure.ErrLeaseExpired) || lost.Token != l.Token() {
		t.Fatalf("cause %v; want a LostError (expired) naming token %d", cause, l.Token())
	}
}

// TestRWLockExclusiveWakesWhenSharedLeave: an exclusive request waiting
// for shared holders is granted when the last leaves, on the release's
// notification: the clock never moves, so no poll could have found it.
func TestRWLockExclusiveWakesWhenSharedLeave(t *testing.T) {
	clk := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: clk})
	ctx := ctxT(t)
	_, a := newRW(t, mem, "r", tenure.WithClock(clk))
	_, b := newRW(t, mem, "r", tenure.WithClock(clk))
	s1, err := a.TryAcquireShared(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := b.TryAcquireShared(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	_, ex := newRW(t, mem, "r", tenure.WithClock(clk))
	waits := make(chan int, 16)
	got := make(chan error, 1)
	var e *tenure.Lease
	go func() {
		var err error
		e, err = ex.AcquireExclusive(ctx, ttl, tenure.OnSharedWait(func(h *tenure.SharedHeldError, _ time.Duration) { waits <- len(h.Holders) }))
		got <- err
	}()
	nextWait := func() int {
		t.Helper()
		select {
		case n := <-waits:
			return n
		case err := <-got:
			t.Fatalf("the exclusive request returned (%v) while shared holders held", err)
		case <-ctx.Done():
			t.Fatal("the exclusive request never waited for the shared holders")
		}
		return 0
	}
	if n := nextWait(); n != 2 {
		t.Fatalf("the exclusive request saw %d shared holders; want 2", n)
	}
	// While it waits, it holds the gate: no shared request is granted.
	_, c := newRW(t, mem, "r", tenure.WithClock(clk))
	var held *tenure.HeldError
	if _, err := c.TryAcquireShared(ctx, ttl); !errors.As(err, &held) || naming.IsSharedRequest(held.Holder.Owner) {
		t.Fatalf("a shared request while an exclusive one waits: %v; want a HeldError naming the exclusive request", err)
	}
	if err := s1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for nextWait() != 1 {
	}
	if err := s2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if e.Token() <= s2.Token() {
		t.Fatalf("exclusive token %d, not above the shared %d", e.Token(), s2.Token())
	}
}

// TestRWLockKilledSharedHolderFreedByTTL: a shared holder that stops
// renewing (its process died) keeps an exclusive request out until its
// lease expires in the store, and no longer.
func TestRWLockKilledSharedHolderFreedByTTL(t *testing.T) {
	clk := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: clk})
	ctx := ctxT(t)
	dead := storetest.NewFaulty(mem)
	_, a := newRW(t, dead, "r", tenure.WithClock(clk))
	s, err := a.TryAcquireShared(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{storetest.OpRenew, storetest.OpRelease, storetest.OpAcquire} {
		dead.Set(op, storetest.Hang, 0)
	}
	_, ex := newRW(t, mem, "r", tenure.WithClock(clk))
	got := make(chan error, 1)
	waits := make(chan struct{}, 64)
	go func() {
		_, err := ex.AcquireExclusive(ctx, 2*ttl, tenure.OnSharedWait(func(*tenure.SharedHeldError, time.Duration) { waits <- struct{}{} }))
		got <- err
	}()
	select {
	case <-waits:
	case err := <-got:
		t.Fatalf("the exclusive request returned (%v) beside a live shared holder", err)
	}
	began := clk.Now()
	limit := ttl + 10*tenure.DefaultRetryInterval + time.Second
	for {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			if s.Err() == nil {
				t.Fatal("the exclusive request was granted while the dead shared holder still trusted its lease")
			}
			if waited := clk.Now().Sub(began); waited > limit {
				t.Fatalf("granted %v after the shared holder died; want within its TTL and a poll (%v)", waited, limit)
			}
			return
		case <-waits:
		case <-time.After(2 * time.Millisecond):
			clk.Advance(100 * time.Millisecond)
		}
	}
}

// TestRWLockExclusiveNotStarvedByShared: shared requests keep coming, each
// holding a while, so that some shared holder always holds; an exclusive
// request is still granted, with no shared holder beside it, and tokens
// follow grant order across modes.
func TestRWLockExclusiveNotStarvedByShared(t *testing.T) {
	mem := memory.New()
	ctx := ctxT(t)
	const readers = 4
	var (
		mu        sync.Mutex
		sharedIn  int
		exclusive bool
		tokens    []struct {
			mode  string
			token uint64
		}
		errs = make(chan error, readers+1)
		stop = make(chan struct{})
		wg   sync.WaitGroup
	)
	grant := func(mode string, token uint64) {
		tokens = append(tokens, struct {
			mode  string
			token uint64
		}{mode, token})
	}
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, rw := newRW(t, mem, "r", tenure.WithRetry(time.Millisecond, 5*time.Millisecond))
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := rw.AcquireShared(ctx, ttl)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if exclusive {
					errs <- errors.New("a shared holder was granted beside the exclusive holder")
				}
				sharedIn++
				grant("shared", l.Token())
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				sharedIn--
				mu.Unlock()
				l.Release(ctx)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	_, ex := newRW(t, mem, "r", tenure.WithRetry(time.Millisecond, 5*time.Millisecond))
	e, err := ex.AcquireExclusive(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if sharedIn != 0 {
		t.Errorf("the exclusive holder was granted beside %d shared holders", sharedIn)
	}
	exclusive = true
	grant("exclusive", e.Token())
	mu.Unlock()
	time.Sleep(30 * time.Millisecond)
	mu.Lock()
	exclusive = false
	mu.Unlock()
	if err := e.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Shared holders come in again after it.
	for {
		mu.Lock()
		n := len(tokens)
		last := tokens[n-1]
		mu.Unlock()
		if last.mode == "shared" {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Every shared grant before the exclusive one has a smaller token, and
	// every one after it a larger.
	var te uint64
	before := true
	for _, g := range tokens {
		switch {
		case g.mode == "exclusive":
			te, before = g.token, false
		case !before && g.token <= te:
			t.Errorf("shared token %d granted after the exclusive token %d", g.token, te)
		}
	}
	for _, g := range tokens {
		if g.mode == "exclusive" {
			break
		}
		if g.token >= te {
			t.Errorf("shared token %d granted before the exclusive token %d", g.token, te)
		}
	}
}

// TestRWLockManySharedInOneLocker: shared requests of one Locker queue at
// the gate in the process, and all are granted.
func TestRWLockManySharedInOneLocker(t *testing.T) {
	mem := memory.New()
	ctx := ctxT(t)
	_, rw := newRW(t, mem, "r")
	var wg sync.WaitGroup
	leases := make([]*tenure.Lease, 20)
	errs := make([]error, 20)
	for i := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leases[i], errs[i] = rw.TryAcquireShared(ctx, ttl)
		}()
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for i, l := range leases {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if seen[l.Token()] {
			t.Fatalf("token %d twice", l.Token())
		}
		seen[l.Token()] = true
	}
	recs, err := rw.SharedHolders(ctx)
	if err != nil || len(recs) != len(leases) {
		t.Fatalf("SharedHolders: %d, %v; want %d", len(recs), err, len(leases))
	}
}

// TestRWLockRegistrationAfterGateDeadline: a registration confirmed after
// the gate's deadline does not count: it is freed, and the request tries
// again.
func TestRWLockRegistrationAfterGateDeadline(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	rw, _ := f.lk.RWLock("r")
	var mu sync.Mutex
	acquires := 0
	f.faulty.AfterCall(func(op string) {
		mu.Lock()
		defer mu.Unlock()
		if op == storetest.OpAcquire {
			if acquires++; acquires == 2 { // the first registration
				f.clock.Advance(tenure.MaxSharedGateTTL)
			}
		}
	})
	l, err := rw.TryAcquireShared(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := rw.SharedHolders(ctx)
	if err != nil || len(recs) != 1 || recs[0].Resource != l.Resource() {
		t.Fatalf("shared holders %+v (%v); want only the second registration %q", recs, err, l.Resource())
	}
	if acquires != 4 {
		t.Fatalf("%d acquires; want 4 (gate, late registration, gate, registration)", acquires)
	}
}

// TestRWLockKeptSharedKeepsExclusiveOut: a shared holder's ReleaseAfter
// keeps its share; an exclusive request waits for it too.
func TestRWLockKeptSharedKeepsExclusiveOut(t *testing.T) {
	mem := memory.New()
	ctx := ctxT(t)
	_, rw := newRW(t, mem, "r")
	s, err := rw.TryAcquireShared(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseAfter(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.TryAcquireExclusive(ctx, ttl); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("exclusive beside a kept share: %v; want ErrHeld", err)
	}
}

// TestRWLockPlainAcquireBlocksShared: a plain lease on the resource is the
// gate: shared requests wait for it.
func TestRWLockPlainAcquireBlocksShared(t *testing.T) {
	mem := memory.New()
	ctx := ctxT(t)
	lk, rw := newRW(t, mem, "r")
	l, err := lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	_, other := newRW(t, mem, "r")
	if _, err := other.TryAcquireShared(ctx, ttl); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("shared beside a plain lease: %v; want ErrHeld", err)
	}
	_ = rw
	l.Release(ctx)
}

func TestRWLockBadInput(t *testing.T) {
	lk, _ := tenure.New(memory.New())
	if _, err := lk.RWLock(""); !errors.Is(err, tenure.ErrInvalidResource) {
		t.Errorf("empty resource: %v", err)
	}
	if _, err := lk.RWLock(strings.Repeat("x", tenure.MaxResourceLen-23)); !errors.Is(err, tenure.ErrInvalidResource) {
		t.Errorf("a resource whose shared names are too long: %v", err)
	}
	rw, err := lk.RWLock(strings.Repeat("x", tenure.MaxResourceLen-24))
	if err != nil {
		t.Fatalf("the longest resource: %v", err)
	}
	ctx := ctxT(t)
	for _, f := range []func() error{
		func() error { _, err := rw.TryAcquireShared(ctx, 0); return err },
		func() error { _, err := rw.AcquireShared(ctx, -1); return err },
		func() error { _, err := rw.TryAcquireExclusive(ctx, time.Millisecond); return err },
		func() error { _, err := rw.AcquireExclusive(ctx, 0); return err },
	} {
		if err := f(); !errors.Is(err, tenure.ErrInvalidTTL) {
			t.Errorf("bad TTL: %v", err)
		}
	}
	lk.Close(ctx)
	if _, err := rw.TryAcquireShared(ctx, ttl); !errors.Is(err, tenure.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if _, err := rw.AcquireExclusive(ctx, ttl); !errors.Is(err, tenure.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	for name, want := range map[string]string{
		"a/shared-0123456789abcdef": "a", "a/shared-x/shared-0000000000000000": "a/shared-x",
		"a/shared-0123456789ABCDEF": "", "a/shared-0123": "", "/shared-0123456789abcdef": "", "a": "",
	} {
		got, ok := naming.ParseSharedName(name)
		if got != want || ok != (want != "") {
			t.Errorf("ParseSharedName(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}
