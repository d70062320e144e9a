package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure/clock"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// The case functions turn the failure scenarios of docs/cases.md (taken
// from real bug reports) into tests that drive a tenure.Locker against the
// real store. Faults between the Locker and the store come from Faulty;
// pauses of the holder come from a fake clock on the holder's Locker, so
// the tests wait on channels and clocks, not on sleeps.

func (e *env) locker(s driver.Store, opts ...tenure.Option) *tenure.Locker {
	e.t.Helper()
	opts = append([]tenure.Option{tenure.WithRetry(10*time.Millisecond, 100*time.Millisecond)}, opts...)
	lk, err := tenure.New(s, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = lk.Close(ctx)
	})
	return lk
}

// waitDone waits for a lease's done channel, failing the test after a
// generous real-time bound (the channel is closed by a timer goroutine).
func waitDone(t *testing.T, l *tenure.Lease) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("lease on %q still not done", l.Resource())
	}
}

func waitFree(t *testing.T, ctx context.Context, s driver.Store, resource string) {
	t.Helper()
	limit := time.Now().Add(30 * time.Second)
	for {
		_, err := s.Get(ctx, resource)
		if errors.Is(err, tenure.ErrNotHeld) {
			return
		}
		if time.Now().After(limit) {
			t.Fatalf("%q not freed: Get = %v", resource, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustLost(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("%s: %v; want ErrLeaseLost", what, err)
	}
}

// caseC01CleanShutdown: a holder asked to stop frees the lease in the store
// before it returns, conditioned on its owner and token, so a contender is
// granted within one retry interval rather than after the TTL; a follower
// that stops frees nothing.
func caseC01CleanShutdown(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	r := e.res("r")
	a, b, c := e.locker(e.store), e.locker(e.store), e.locker(e.store)

	actx, stopA := context.WithCancel(ctx)
	started := make(chan uint64, 1)
	doneA := make(chan error, 1)
	go func() {
		doneA <- a.Do(actx, r, longTTL, func(ctx context.Context) error {
			l, _ := e.store.Get(ctx, r)
			started <- l.Token
			<-ctx.Done()
			return nil
		})
	}()
	tokenA := <-started

	// C waits too, then gives up while A holds: it must free nothing.
	cctx, stopC := context.WithCancel(ctx)
	waitingC := make(chan struct{})
	doneC := make(chan error, 1)
	go func() {
		var once sync.Once
		_, err := c.Acquire(cctx, r, longTTL, tenure.OnWait(func(*tenure.HeldError, time.Duration) { once.Do(func() { close(waitingC) }) }))
		doneC <- err
	}()
	<-waitingC
	stopC()
	if err := <-doneC; !errors.Is(err, context.Canceled) || !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("cancelled follower's Acquire: %v; want context.Canceled and ErrHeld", err)
	}
	e.mustHeldByLocker(ctx, r, a, tokenA)

	granted := make(chan *tenure.Lease, 1)
	waitingB := make(chan struct{})
	go func() {
		var once sync.Once
		l, err := b.Acquire(ctx, r, longTTL, tenure.OnWait(func(*tenure.HeldError, time.Duration) { once.Do(func() { close(waitingB) }) }))
		if err != nil {
			t.Errorf("B's Acquire: %v", err)
		}
		granted <- l
	}()
	<-waitingB
	stopA()
	if err := <-doneA; err != nil {
		t.Fatalf("A's Do after a clean stop: %v", err)
	}
	released := time.Now()
	// A freed the lease before Do returned: it is free now, or already B's.
	if rec, err := e.store.Get(ctx, r); err == nil && !b.Owns(rec.Owner) {
		t.Fatalf("after A's Do returned, %q is still held by %s", r, rec.Owner)
	}
	lb := <-granted
	if lb == nil {
		t.FailNow()
	}
	if waited := time.Since(released); waited > longTTL/2 {
		t.Fatalf("B was granted %v after A released; it waited for the TTL (%v)", waited, longTTL)
	}
	if !cfg.NoFencing && lb.Token() <= tokenA {
		t.Fatalf("B's token %d after A's %d", lb.Token(), tokenA)
	}
	// Close frees B's lease too.
	if err := b.Close(ctx); err != nil {
		t.Fatalf("B's Close: %v", err)
	}
	if lb.Err() == nil {
		t.Fatal("B's lease still trusted after Close")
	}
	e.mustFree(ctx, r)
}

// caseC02UnknownOutcome: an operation applied by the store whose answer is
// lost is never reported as plainly done or not done. The Locker resolves
// it: its own lease → acquired and renewed from then on; another owner →
// not acquired; still unclear when it gives up → ErrUnknownOutcome, and
// whatever it may have taken is freed. Same for renew and release.
func caseC02UnknownOutcome(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	f := NewFaulty(e.store)
	lk := e.locker(f)

	t.Run("AppliedAcquireResolvesToGranted", func(t *testing.T) {
		r := e.res("applied")
		f.Set(OpAcquire, DropReply, 1)
		l, err := lk.TryAcquire(ctx, r, longTTL)
		if err != nil {
			t.Fatalf("TryAcquire whose first answer was lost: %v", err)
		}
		e.mustHeldBy(ctx, r, l.Owner(), l.Token())
		if n := f.Calls(OpAcquire); n < 2 {
			t.Fatalf("%d acquire calls: the outcome was guessed, not resolved", n)
		}
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("Renew after the resolved acquire: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		e.mustFree(ctx, r)
	})

	t.Run("LostRequestResolvesToHeld", func(t *testing.T) {
		r := e.res("lost-request")
		other := e.owner("other")
		rec := e.mustAcquire(ctx, r, other, longTTL)
		f.Set(OpAcquire, DropRequest, 1)
		_, err := lk.TryAcquire(ctx, r, longTTL)
		if !errors.Is(err, tenure.ErrHeld) || errors.Is(err, tenure.ErrUnknownOutcome) {
			t.Fatalf("TryAcquire whose request was lost while another owner holds: %v; want ErrHeld", err)
		}
		e.mustHeldBy(ctx, r, other, rec.Token)
	})

	t.Run("StillUnknownFreesWhatItTook", func(t *testing.T) {
		r := e.res("unknown")
		f.Set(OpAcquire, DropReply, 0)
		defer f.Heal()
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := lk.TryAcquire(cctx, r, longTTL)
		if !errors.Is(err, tenure.ErrUnknownOutcome) {
			t.Fatalf("TryAcquire with every answer lost: %v; want ErrUnknownOutcome", err)
		}
		// The acquires were applied; the Locker frees the orphan instead of
		// leaving it to block others for the whole TTL.
		waitFree(t, ctx, e.store, r)
	})

	t.Run("RenewAndRelease", func(t *testing.T) {
		r := e.res("renew")
		l, err := lk.TryAcquire(ctx, r, longTTL)
		if err != nil {
			t.Fatal(err)
		}
		f.Set(OpRenew, DropReply, 1)
		if err := l.Renew(ctx); err == nil || errors.Is(err, tenure.ErrLeaseLost) {
			t.Fatalf("Renew whose answer was lost: %v; want an error that is not ErrLeaseLost", err)
		}
		if err := l.Err(); err != nil {
			t.Fatalf("one lost renew answer with time left ended the lease: %v", err)
		}
		f.Set(OpRenew, DropRequest, 1)
		if err := l.Renew(ctx); err == nil || errors.Is(err, tenure.ErrLeaseLost) {
			t.Fatalf("Renew whose request was lost: %v", err)
		}
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("Renew after the lost ones: %v", err)
		}
		f.Set(OpRelease, DropReply, 1)
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release whose first answer was lost: %v; want it resolved", err)
		}
		e.mustFree(ctx, r)
	})
}

// caseC03SubSecondTTL: TTLs the store cannot keep exactly are rejected with
// ErrInvalidTTL before any write, never sent as "no expiry"; a lease with the
// smallest accepted TTL whose holder vanished is gone within TTL plus the
// store's slack.
func caseC03SubSecondTTL(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	lk := e.locker(e.store)
	for _, ttl := range append([]time.Duration{0, -time.Second, time.Nanosecond}, e.cfg.InvalidTTLs...) {
		if ttl == time.Nanosecond && len(e.cfg.InvalidTTLs) == 0 {
			continue
		}
		if _, err := lk.TryAcquire(ctx, e.res("r"), ttl); !errors.Is(err, tenure.ErrInvalidTTL) {
			t.Errorf("TryAcquire with TTL %v: %v; want ErrInvalidTTL", ttl, err)
		}
	}
	if recs, err := e.store.List(ctx, e.prefix); err != nil || len(recs) != 0 {
		t.Fatalf("rejected TTLs wrote %v (%v)", recs, err)
	}
	// A holder with the smallest TTL dies (it never renews): gone in time.
	owner := e.owner("dead")
	start := time.Now()
	e.mustAcquire(ctx, e.res("r"), owner, e.cfg.ShortTTL)
	e.waitExpiry(ctx, e.res("r"), e.cfg.ShortTTL)
	if e.cfg.Advance == nil {
		if took := time.Since(start); took > e.cfg.ShortTTL+e.cfg.ExpirySlack+time.Second {
			t.Fatalf("lease with TTL %v lived %v", e.cfg.ShortTTL, took)
		}
	}
}

// caseC04RenewalsFail: when every renewal fails, the holder's lease context
// is cancelled no later than its local deadline, whatever the error; a
// definite "not the owner" answer ends it at once; one transient failure
// with time left is retried and does not end the lease.
func caseC04RenewalsFail(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	f := NewFaulty(e.store)
	fc := clock.NewFake()
	lost := make(chan *tenure.Lease, 8)
	lk := e.locker(f, tenure.WithClock(fc), tenure.WithOnLost(func(l *tenure.Lease, _ error) { lost <- l }))
	other := e.locker(e.store)

	t.Run("EveryRenewalFails", func(t *testing.T) {
		r := e.res("all-fail")
		l, err := lk.TryAcquire(ctx, r, longTTL)
		if err != nil {
			t.Fatal(err)
		}
		f.Set(OpRenew, Fail, 0)
		defer f.Heal()
		deadline := l.Deadline()
		fc.Advance(deadline.Sub(fc.Now()) - time.Millisecond)
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost before its deadline on transient errors: %v", err)
		}
		fc.Advance(time.Millisecond)
		// At the deadline the lease is lost, whatever the timers are doing.
		if err := l.Err(); !errors.Is(err, tenure.ErrLeaseLost) {
			t.Fatalf("at the deadline, Err = %v; want ErrLeaseLost", err)
		}
		if err := l.Context().Err(); err == nil {
			t.Fatal("lease context live at the deadline")
		}
		waitDone(t, l)
		if cause := context.Cause(l.Context()); !errors.Is(cause, tenure.ErrLeaseLost) {
			t.Fatalf("context cause %v; want ErrLeaseLost", cause)
		}
		// The holder stopped first; now B may be granted (A freed it).
		lb, err := other.Acquire(ctx, r, longTTL)
		if err != nil {
			t.Fatalf("B's Acquire after A lost the lease: %v", err)
		}
		defer lb.Release(ctx)
		mustLost(t, l.Renew(ctx), "Renew after the loss")
		mustLost(t, l.Release(ctx), "Release after the loss")
	})

	t.Run("NotOwnerEndsAtOnce", func(t *testing.T) {
		r := e.res("not-owner")
		l, err := lk.TryAcquire(ctx, r, longTTL)
		if err != nil {
			t.Fatal(err)
		}
		// An operator frees it and B takes it.
		if err := e.store.Release(ctx, r, l.Owner(), l.Token()); err != nil {
			t.Fatal(err)
		}
		lb, err := other.TryAcquire(ctx, r, longTTL)
		if err != nil {
			t.Fatal(err)
		}
		defer lb.Release(ctx)
		mustLost(t, l.Renew(ctx), "Renew of a lease another owner holds")
		select {
		case <-l.Done():
		default:
			t.Fatal("a definite not-the-owner answer did not end the lease at once")
		}
		e.mustHeldBy(ctx, r, lb.Owner(), lb.Token())
	})

	t.Run("OneTransientFailureIsRetried", func(t *testing.T) {
		r := e.res("one-fail")
		l, err := lk.TryAcquire(ctx, r, longTTL)
		if err != nil {
			t.Fatal(err)
		}
		fc.Advance(longTTL / 10)
		before := l.Deadline()
		f.Set(OpRenew, Fail, 1)
		if err := l.Renew(ctx); !errors.Is(err, ErrInjected) {
			t.Fatalf("Renew with the store refusing: %v", err)
		}
		if err := l.Err(); err != nil {
			t.Fatalf("one transient failure with time left ended the lease: %v", err)
		}
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("retried Renew: %v", err)
		}
		if !l.Deadline().After(before) {
			t.Fatalf("deadline %v did not move after a confirmed renewal (was %v)", l.Deadline(), before)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	// The loss callback ran once for each of the two lost leases, and not
	// for the released one.
	seen := map[string]int{}
	for range 2 {
		select {
		case l := <-lost:
			seen[l.Resource()]++
		case <-time.After(30 * time.Second):
			t.Fatalf("loss callback ran for %v only", seen)
		}
	}
	if seen[e.res("all-fail")] != 1 || seen[e.res("not-owner")] != 1 {
		t.Fatalf("loss callbacks: %v", seen)
	}
}

// caseC05BlackHole: when the network between holder and store drops
// everything silently, each renew call is bounded by the time left, the
// lease context is cancelled at the local deadline while a call is stuck,
// and the holder stops before any contender is granted.
func caseC05BlackHole(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	f := NewFaulty(e.store)
	r := e.res("r")
	a := e.locker(f, tenure.WithRenewInterval(e.cfg.ShortTTL/4))
	b := e.locker(e.store)
	la, err := a.TryAcquire(ctx, r, e.cfg.ShortTTL)
	if err != nil {
		t.Fatal(err)
	}
	f.Set(OpRenew, Hang, 0)
	f.Set(OpRelease, Hang, 0)
	defer f.Heal()
	lb, err := b.Acquire(ctx, r, longTTL)
	if err != nil {
		t.Fatalf("B's Acquire: %v", err)
	}
	grantedB := time.Now()
	defer lb.Release(ctx)
	if !la.Deadline().Before(grantedB) {
		t.Fatalf("B was granted at %v, before A's deadline %v", grantedB, la.Deadline())
	}
	if err := la.Err(); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("A still trusts its lease after B was granted: %v", err)
	}
	waitDone(t, la)
	if f.Calls(OpRenew) == 0 {
		t.Fatal("no renewal was attempted")
	}
	// The stuck calls were bounded and abandoned.
	for limit := time.Now().Add(30 * time.Second); f.Hung() > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatalf("%d store calls still hung after the lease ended", f.Hung())
		}
	}
}

// caseC06cPauseBeforeWrite: a holder that pauses between taking its send
// time and the store's answer for longer than the TTL must not trust the
// lease, since its deadline counts from the send time, and must leave
// nothing held: a pause before the write reaches the store ends the call by
// its bound; a pause after the store granted it makes the answer late, and
// the Locker frees what it was granted too late.
func caseC06cPauseBeforeWrite(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	ttl := 5 * time.Second
	pause := ttl + ttl/5 // a 6 s pause with a 5 s TTL
	for _, when := range []string{"BeforeWrite", "AfterWrite"} {
		t.Run(when, func(t *testing.T) {
			fc := clock.NewFake()
			f := NewFaulty(e.store)
			hook := func(op string) {
				if op == OpAcquire {
					fc.Advance(pause)
				}
			}
			if when == "BeforeWrite" {
				f.OnCall(hook)
			} else {
				f.AfterCall(hook)
			}
			lk := e.locker(f, tenure.WithClock(fc))
			r := e.res(when)
			l, err := lk.TryAcquire(ctx, r, ttl)
			if err == nil {
				t.Fatalf("TryAcquire across a %v pause with TTL %v returned a lease (token %d, deadline %v, now %v)", pause, ttl, l.Token(), l.Deadline(), fc.Now())
			}
			if when == "AfterWrite" && !errors.Is(err, tenure.ErrLeaseLost) {
				t.Fatalf("TryAcquire answered after the deadline: %v; want ErrLeaseLost", err)
			}
			f.OnCall(nil)
			f.AfterCall(nil)
			waitFree(t, ctx, e.store, r)
		})
	}
}

// caseC07PartitionedHolderFencing: a holder cut off from the store for twice
// its TTL keeps writing to a shared sink; the next holder's fencing token is
// greater, and a sink that keeps the highest token seen rejects the old
// holder's writes.
func caseC07PartitionedHolderFencing(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	f := NewFaulty(e.store)
	r := e.res("r")
	a, b := e.locker(f), e.locker(e.store)
	var sink FencedSink
	la, err := a.TryAcquire(ctx, r, e.cfg.ShortTTL)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Write(la.Token()); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{OpAcquire, OpRenew, OpRelease, OpGet} {
		f.Set(op, Fail, 0)
	}
	defer f.Heal()
	lb, err := b.Acquire(ctx, r, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(ctx)
	if lb.Token() <= la.Token() {
		t.Fatalf("B's token %d is not greater than A's %d", lb.Token(), la.Token())
	}
	if err := sink.Write(lb.Token()); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	// A, partitioned and perhaps unaware, writes again with its old token.
	if err := sink.Write(la.Token()); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("A's late write: %v; want ErrStaleToken", err)
	}
	waitDone(t, la)
}

// FencedSink is a resource protected by fencing tokens: it accepts a write
// only with a token at least as high as any it has seen (Kleppmann, "How to
// do distributed locking", 2016).
type FencedSink struct {
	mu      sync.Mutex
	highest uint64
}

// ErrStaleToken is returned by FencedSink.Write for an old token.
var ErrStaleToken = errors.New("storetest: write with a stale fencing token")

// Write records a write made under token.
func (s *FencedSink) Write(token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return ErrStaleToken
	}
	s.highest = token
	return nil
}

// caseC08LateRenewal: a holder paused past its TTL, while another owner
// acquired and released the resource, must not revive the lease when it
// resumes: its lease is lost at once (the validity check reads the clock),
// the loss callback runs once, a renewal is ErrLeaseLost and re-creates
// nothing.
func caseC08LateRenewal(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	fc := clock.NewFake()
	lost := make(chan error, 4)
	a := e.locker(e.store, tenure.WithClock(fc), tenure.WithOnLost(func(_ *tenure.Lease, cause error) { lost <- cause }))
	b := e.locker(e.store)
	r := e.res("r")
	la, err := a.TryAcquire(ctx, r, e.cfg.ShortTTL)
	if err != nil {
		t.Fatal(err)
	}
	// A is paused: its clock stands still while the store's runs.
	e.waitExpiry(ctx, r, e.cfg.ShortTTL)
	lb, err := b.TryAcquire(ctx, r, longTTL)
	if err != nil {
		t.Fatalf("B's acquire while A is paused: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A resumes 1.5 TTL later.
	fc.Advance(e.cfg.ShortTTL + e.cfg.ShortTTL/2)
	if err := la.Err(); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("resumed holder's first check: %v; want ErrLeaseLost", err)
	}
	mustLost(t, la.Renew(ctx), "late Renew")
	e.mustFree(ctx, r)
	select {
	case cause := <-lost:
		mustLost(t, cause, "loss callback cause")
	case <-time.After(30 * time.Second):
		t.Fatal("loss callback did not run")
	}
	select {
	case cause := <-lost:
		t.Fatalf("loss callback ran twice (%v)", cause)
	default:
	}
}

// caseC10SameOwnerID: two Lockers configured with the same readable owner
// id (identical containers) exclude each other: exactly one is granted, the
// other is told the lease is held.
func caseC10SameOwnerID(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	r := e.res("r")
	a := e.locker(e.store, tenure.WithOwnerID("same-host:1"))
	b := e.locker(e.store, tenure.WithOwnerID("same-host:1"))
	if a.Owner() == b.Owner() {
		t.Fatalf("two Lockers share the owner %q", a.Owner())
	}
	type result struct {
		l   *tenure.Lease
		err error
	}
	res := make(chan result, 2)
	for _, lk := range []*tenure.Locker{a, b} {
		go func() {
			l, err := lk.TryAcquire(ctx, r, longTTL)
			res <- result{l, err}
		}()
	}
	r1, r2 := <-res, <-res
	if (r1.err == nil) == (r2.err == nil) {
		t.Fatalf("same owner id: results %v and %v; want exactly one granted", r1.err, r2.err)
	}
	win, lose := r1, r2
	if win.err != nil {
		win, lose = r2, r1
	}
	var held *tenure.HeldError
	if !errors.As(lose.err, &held) || held.Holder.Owner != win.l.Owner() {
		t.Fatalf("loser's error %v; want a HeldError naming %s", lose.err, win.l.Owner())
	}
	if err := win.l.Renew(ctx); err != nil {
		t.Fatalf("winner's Renew: %v", err)
	}
	e.mustHeldBy(ctx, r, win.l.Owner(), win.l.Token())
}
