package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure/clock"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

const ttl = 30 * time.Second

// fixture is a Locker on a fake clock over a memory store (on the same fake
// clock), with faults injectable between the two.
type fixture struct {
	t      *testing.T
	clock  *clock.Fake
	mem    *memory.Store
	faulty *storetest.Faulty
	lk     *tenure.Locker
	lost   chan error
}

func newFixture(t *testing.T, opts ...tenure.Option) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: clock.NewFake(), lost: make(chan error, 16)}
	f.mem, _ = memory.Open(context.Background(), memory.Config{Clock: f.clock})
	f.faulty = storetest.NewFaulty(f.mem)
	opts = append([]tenure.Option{
		tenure.WithClock(f.clock),
		tenure.WithOwnerID("test"),
		tenure.WithOnLost(func(_ *tenure.Lease, cause error) { f.lost <- cause }),
	}, opts...)
	lk, err := tenure.New(f.faulty, opts...)
	if err != nil {
		t.Fatal(err)
	}
	f.lk = lk
	return f
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// idle waits until the lease's timers are armed again: the watchdog and the
// next renewal (n = 2 per lease), which happens once a renewal completed.
func (f *fixture) idle(n int) {
	f.t.Helper()
	if err := f.clock.BlockUntilContext(ctxT(f.t), n); err != nil {
		f.t.Fatalf("timers not re-armed: %v", err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	s := memory.New()
	for name, opt := range map[string]tenure.Option{
		"owner with separator": tenure.WithOwnerID("a#b"),
		"owner with NUL":       tenure.WithOwnerID("a\x00"),
		"long owner":           tenure.WithOwnerID(strings.Repeat("x", tenure.MaxOwnerIDLen+1)),
		"drift bound":          tenure.WithDriftBound(0.5),
		"negative drift":       tenure.WithDriftBound(-0.1),
		"renew interval":       tenure.WithRenewInterval(-time.Second),
		"retry":                tenure.WithRetry(0, time.Second),
		"retry max below base": tenure.WithRetry(time.Second, time.Millisecond),
		"renewals":             tenure.WithMaxConcurrentRenewals(0),
	} {
		if _, err := tenure.New(s, opt); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := tenure.New(s, tenure.WithOwnerID("a#b")); !errors.Is(err, tenure.ErrInvalidOwner) {
		t.Errorf("bad owner id: %v; want ErrInvalidOwner", err)
	}
	if _, err := tenure.New(nil); err == nil {
		t.Error("New(nil) accepted")
	}
}

func TestOwnerHasRandomNonce(t *testing.T) {
	a, _ := tenure.NewOwner("host:1")
	b, _ := tenure.NewOwner("host:1")
	if a == b {
		t.Fatalf("two owners with one id are equal: %q", a)
	}
	if tenure.OwnerID(a) != "host:1" || !strings.HasPrefix(a, "host:1#") || len(a) != len("host:1#")+16 {
		t.Fatalf("owner %q: want host:1#<16 hex digits>", a)
	}
	if tenure.OwnerID("jaeger-host") != "jaeger-host" {
		t.Fatal("OwnerID of a foreign owner changed it")
	}
}

func TestTryAcquireRejectsBadInputBeforeIO(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	for _, r := range []string{"", strings.Repeat("r", tenure.MaxResourceLen+1), "\xc3\x28", "a\x00"} {
		if _, err := f.lk.TryAcquire(ctx, r, ttl); !errors.Is(err, tenure.ErrInvalidResource) {
			t.Errorf("TryAcquire(%q): %v; want ErrInvalidResource", r, err)
		}
		if _, err := f.lk.Acquire(ctx, r, ttl); !errors.Is(err, tenure.ErrInvalidResource) {
			t.Errorf("Acquire(%q): %v; want ErrInvalidResource", r, err)
		}
	}
	for _, d := range []time.Duration{0, -time.Second, 2} {
		if _, err := f.lk.TryAcquire(ctx, "r", d); !errors.Is(err, tenure.ErrInvalidTTL) {
			t.Errorf("TryAcquire with TTL %v: %v; want ErrInvalidTTL", d, err)
		}
	}
	fixed := newFixture(t, tenure.WithRenewInterval(10*time.Second))
	if _, err := fixed.lk.TryAcquire(ctx, "r", 10*time.Second); !errors.Is(err, tenure.ErrInvalidTTL) {
		t.Errorf("TTL not longer than the renew interval: %v; want ErrInvalidTTL", err)
	}
	if n := f.faulty.Calls(storetest.OpAcquire) + fixed.faulty.Calls(storetest.OpAcquire); n != 0 {
		t.Fatalf("bad input reached the store %d times", n)
	}
}

// The deadline counts from the moment before the request was sent, not from
// the reply: a slow answer shortens the lease, never lengthens it.
func TestDeadlineCountsFromSendTime(t *testing.T) {
	f := newFixture(t)
	f.faulty.AfterCall(func(op string) {
		if op == storetest.OpAcquire {
			f.clock.Advance(2 * time.Second) // the answer takes 2 s to arrive
		}
	})
	t0 := f.clock.Now()
	l, err := f.lk.TryAcquire(ctxT(t), "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	want := t0.Add(time.Duration(float64(ttl) * (1 - tenure.DefaultDriftBound)))
	if !l.Deadline().Equal(want) {
		t.Fatalf("deadline %v; want tSend + TTL·(1−ρ) = %v", l.Deadline(), want)
	}
}

// C06a: on the real clock, deadlines carry Go's monotonic reading, so a
// wall-clock jump cannot move them.
func TestCaseC06aDeadlineIsMonotonic(t *testing.T) {
	lk, err := tenure.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.TryAcquire(ctxT(t), "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if !strings.Contains(l.Deadline().String(), " m=") {
		t.Fatalf("deadline %v has no monotonic clock reading", l.Deadline())
	}
}

func TestBackgroundRenewalEveryThirdOfTTL(t *testing.T) {
	f := newFixture(t)
	t0 := f.clock.Now()
	l, err := f.lk.TryAcquire(ctxT(t), "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		f.clock.Advance(ttl / 3)
		want := t0.Add(time.Duration(i)*ttl/3 + time.Duration(float64(ttl)*(1-tenure.DefaultDriftBound)))
		// The renewal runs on a goroutine of its own: wait for its
		// confirmation (the timers alone may be re-armed before it).
		waitFor(t, func() bool { return !l.Deadline().Before(want) }, "the renewal's confirmation")
		if !l.Deadline().Equal(want) {
			t.Fatalf("after renewal %d, deadline %v; want %v", i, l.Deadline(), want)
		}
	}
	if n := f.faulty.Calls(storetest.OpRenew); n != 5 {
		t.Fatalf("%d renewals in 5 intervals", n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	rec, err := f.mem.Get(ctxT(t), "r")
	if err != nil || rec.Remaining != ttl {
		t.Fatalf("store record after renewal: %+v, %v", rec, err)
	}
}

// A check made right after a pause past the deadline sees the loss, even
// when no timer has fired yet: the check reads the clock itself.
func TestPausePastDeadlineSeenWithoutTimers(t *testing.T) {
	fake := clock.NewFake()
	fc := &frozenTimers{Fake: fake}
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fake})
	lk, err := tenure.New(mem, tenure.WithClock(fc))
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.TryAcquire(ctxT(t), "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	ctx := l.Context()
	fake.Advance(2 * ttl) // the process was stopped for twice the TTL
	if err := l.Err(); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("Err after the pause: %v", err)
	}
	if ctx.Err() == nil {
		t.Fatal("lease context still live after the pause")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, tenure.ErrLeaseLost) {
		t.Fatalf("cause %v", cause)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("done channel open after the pause")
	}
}

// frozenTimers is a clock whose timers never fire.
type frozenTimers struct{ *clock.Fake }

func (c *frozenTimers) AfterFunc(time.Duration, func()) clock.Timer { return neverTimer{} }

type neverTimer struct{}

func (neverTimer) C() <-chan time.Time        { return nil }
func (neverTimer) Reset(d time.Duration) bool { return false }
func (neverTimer) Stop() bool                 { return false }
func (c *frozenTimers) Now() time.Time        { return c.Fake.Now() }

// Transient renewal failures are retried with backoff until the deadline;
// then the lease is lost exactly once, at the deadline, and what may remain
// in the store is freed.
func TestTransientFailuresLoseAtDeadline(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	l, err := f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	f.faulty.Set(storetest.OpRenew, storetest.Fail, 0)
	deadline := l.Deadline()
	f.clock.Advance(ttl / 3) // the first renewal fails; a retry is scheduled
	f.idle(2)
	// Each retry fails and schedules the next, at most one retry interval
	// later; none is scheduled past the deadline.
	for f.clock.Now().Add(2 * tenure.DefaultRetryInterval).Before(deadline) {
		f.clock.Advance(tenure.DefaultRetryInterval)
		f.idle(2)
		if err := l.Err(); err != nil {
			t.Fatalf("lost at %v, before the deadline %v: %v", f.clock.Now(), deadline, err)
		}
	}
	if n := f.faulty.Calls(storetest.OpRenew); n < 2 {
		t.Fatalf("only %d renewal attempts before the deadline", n)
	}
	f.clock.Advance(deadline.Sub(f.clock.Now()))
	if err := l.Err(); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("at the deadline: %v", err)
	}
	select {
	case cause := <-f.lost:
		if !errors.Is(cause, tenure.ErrLeaseLost) {
			t.Fatalf("loss callback cause %v", cause)
		}
	case <-ctx.Done():
		t.Fatal("no loss callback")
	}
	waitFree(t, f.mem, "r")
	f.clock.Advance(ttl)
	select {
	case cause := <-f.lost:
		t.Fatalf("second loss callback: %v", cause)
	default:
	}
}

func waitFree(t *testing.T, s driver.Store, r string) {
	t.Helper()
	for limit := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := s.Get(context.Background(), r); errors.Is(err, tenure.ErrNotHeld) {
			return
		}
		if time.Now().After(limit) {
			t.Fatalf("%q not freed", r)
		}
	}
}

// C04, second half: one background renewal fails when 10% of the TTL has
// passed; it is retried and the lease lives on.
func TestOneFailedBackgroundRenewalIsRetried(t *testing.T) {
	f := newFixture(t, tenure.WithRenewInterval(ttl/10))
	l, err := f.lk.TryAcquire(ctxT(t), "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	f.faulty.Set(storetest.OpRenew, storetest.Fail, 1)
	f.clock.Advance(ttl / 10)
	f.idle(2) // the retry is scheduled
	if err := l.Err(); err != nil {
		t.Fatalf("one failed renewal ended the lease: %v", err)
	}
	before := l.Deadline()
	f.clock.Advance(tenure.DefaultRetryInterval)
	f.idle(2)
	if !l.Deadline().After(before) {
		t.Fatalf("the retried renewal did not move the deadline")
	}
	if n := f.faulty.Calls(storetest.OpRenew); n != 2 {
		t.Fatalf("%d renew calls; want the failed one and its retry", n)
	}
}

func TestNotOwnerAnswerLosesAtOnce(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	l, err := f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.mem.Release(ctx, "r", l.Owner(), l.Token()); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(ttl / 3)
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("lease not lost after the store said it is gone")
	}
	if err := l.Err(); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("Release after the loss: %v", err)
	}
}

// Release stops the work (cancels the context) before it asks the store.
func TestReleaseCancelsBeforeFreeing(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	l, err := f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	var liveAtRelease atomic.Bool
	f.faulty.OnCall(func(op string) {
		if op == storetest.OpRelease {
			liveAtRelease.Store(l.Context().Err() == nil)
		}
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if liveAtRelease.Load() {
		t.Fatal("the lease context was live when the store was asked to free it")
	}
	// A release is not a loss: code that alerts on ErrLeaseLost must not
	// alert on every clean release.
	if cause := context.Cause(l.Context()); !errors.Is(cause, tenure.ErrReleased) || errors.Is(cause, tenure.ErrLeaseLost) {
		t.Fatalf("cause after Release: %v; want ErrReleased, not matching ErrLeaseLost", cause)
	}
	if err := l.Err(); !errors.Is(err, tenure.ErrReleased) || errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("Err after Release: %v; want ErrReleased, not matching ErrLeaseLost", err)
	}
	if err := l.Release(ctx); !errors.Is(err, tenure.ErrReleased) || errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("second Release: %v; want ErrReleased", err)
	}
	if err := l.Renew(ctx); !errors.Is(err, tenure.ErrReleased) || errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("Renew after Release: %v; want ErrReleased", err)
	}
	if err := l.ReleaseAfter(ctx, time.Minute); !errors.Is(err, tenure.ErrReleased) || errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("ReleaseAfter after Release: %v; want ErrReleased", err)
	}
	select {
	case cause := <-f.lost:
		t.Fatalf("loss callback for a released lease: %v", cause)
	default:
	}
}

func TestReleaseWithStoreUnreachableSaysTTL(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	l, err := f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	f.faulty.Set(storetest.OpRelease, storetest.Fail, 0)
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	go func() {
		// The retries wait on the fake clock.
		for rctx.Err() == nil {
			f.clock.Advance(100 * time.Millisecond)
			time.Sleep(time.Millisecond)
		}
	}()
	err = l.Release(rctx)
	if err == nil || !strings.Contains(err.Error(), "expire by its TTL") || !errors.Is(err, storetest.ErrInjected) {
		t.Fatalf("Release with the store down: %v", err)
	}
	if l.Context().Err() == nil {
		t.Fatal("lease context live after a failed release")
	}
}

// A release whose first attempt fails is retried while the caller waits,
// and Release reports the store's confirmation.
func TestReleaseRetriedWhileCallerWaits(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	l, err := f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	f.faulty.Set(storetest.OpRelease, storetest.Fail, 1)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Release(rctx) }()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Release after one failed attempt: %v; want confirmed", err)
			}
			if n := f.faulty.Calls(storetest.OpRelease); n != 2 {
				t.Fatalf("%d release calls; want 2", n)
			}
			if _, err := f.mem.Get(ctx, "r"); !errors.Is(err, tenure.ErrNotHeld) {
				t.Fatalf("after Release: %v; want free", err)
			}
			return
		default:
			f.clock.Advance(10 * time.Millisecond) // the retry waits on the fake clock
			time.Sleep(time.Millisecond)
		}
	}
}

func TestNotReentrant(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	l, err := f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.lk.TryAcquire(ctx, "r", ttl)
	var held *tenure.HeldError
	if !errors.As(err, &held) || held.Holder.Owner != l.Owner() || !f.lk.Owns(held.Holder.Owner) || held.Holder.Token != l.Token() {
		t.Fatalf("second TryAcquire by the same Locker: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatalf("TryAcquire after Release: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d", l2.Token(), l.Token())
	}
}

func TestAcquireWaitsWithBackoffAndHonoursContext(t *testing.T) {
	f := newFixture(t)
	other, err := tenure.New(f.mem, tenure.WithClock(f.clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := other.TryAcquire(ctx, "r", ttl); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	waits := make(chan time.Duration, 100)
	done := make(chan error, 1)
	go func() {
		_, err := f.lk.Acquire(actx, "r", ttl, tenure.OnWait(func(h *tenure.HeldError, waited time.Duration) {
			if !other.Owns(h.Holder.Owner) {
				t.Errorf("OnWait names %s, want a grant of %s", h.Holder.Owner, other.Owner())
			}
			waits <- waited
		}))
		done <- err
	}()
	for i := 0; i < 5; i++ {
		<-waits
		f.idle(3) // the waiter's backoff timer, besides the holder's two
		f.clock.Advance(tenure.DefaultRetryInterval)
	}
	<-waits
	cancel()
	err = <-done
	if !errors.Is(err, context.Canceled) || !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("cancelled Acquire: %v; want context.Canceled and ErrHeld", err)
	}
	if n := f.faulty.Calls(storetest.OpAcquire); n != 6 {
		t.Fatalf("%d attempts in 5 retry intervals", n)
	}
}

// A waiter on a store with release notifications is granted on release,
// without waiting for its backoff timer.
func TestAcquireWakesOnReleaseNotification(t *testing.T) {
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	a, _ := tenure.New(mem, tenure.WithClock(fc))
	b, _ := tenure.New(mem, tenure.WithClock(fc), tenure.WithRetry(time.Hour, time.Hour))
	ctx := ctxT(t)
	la, err := a.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 1)
	got := make(chan *tenure.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "r", ttl, tenure.OnWait(func(*tenure.HeldError, time.Duration) { waiting <- struct{}{} }))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	<-waiting
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil || l.Token() <= la.Token() {
			t.Fatalf("woken waiter got %v", l)
		}
	case <-ctx.Done():
		t.Fatal("waiter not woken by the release")
	}
}

func TestDo(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	want := errors.New("work failed")
	err := f.lk.Do(ctx, "r", ttl, func(ctx context.Context) error {
		if ctx.Err() != nil {
			t.Error("work started with a dead context")
		}
		return want
	})
	if !errors.Is(err, want) {
		t.Fatalf("Do: %v; want the work's error", err)
	}
	if _, err := f.mem.Get(ctx, "r"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("Do left the lease held: %v", err)
	}
	// The lease is lost while the work runs: the work's context ends and Do
	// reports the loss.
	err = f.lk.Do(ctx, "r", ttl, func(wctx context.Context) error {
		l, _ := f.mem.Get(ctx, "r")
		_ = f.mem.Release(ctx, "r", l.Owner, l.Token)
		f.clock.Advance(ttl / 3)
		<-wctx.Done()
		return context.Cause(wctx)
	})
	if !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("Do with the lease lost: %v", err)
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	var leases []*tenure.Lease
	for _, r := range []string{"a", "b", "c"} {
		l, err := f.lk.TryAcquire(ctx, r, ttl)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if err := f.lk.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if l.Err() == nil {
			t.Fatalf("%s still trusted after Close", l.Resource())
		}
	}
	if recs, _ := f.mem.List(ctx, ""); len(recs) != 0 {
		t.Fatalf("after Close the store holds %v", recs)
	}
	if _, err := f.lk.TryAcquire(ctx, "d", ttl); !errors.Is(err, tenure.ErrClosed) {
		t.Fatalf("TryAcquire after Close: %v", err)
	}
}

// storeOnly hides every optional interface of a store (batch renewal,
// notifications): the Locker then renews one lease per call.
type storeOnly struct{ driver.Store }

// Background renewal of many leases uses a bounded number of goroutines,
// and released leases leave none behind: one call per lease (at most the
// pool's bound at once), or batches on a store that renews many leases in
// one request. The clock is fake, so the test waits for each round of
// renewals to be applied instead of racing real time.
func TestManyLeasesFewGoroutinesNothingLeaks(t *testing.T) {
	for name, wrap := range map[string]func(*memory.Store) driver.Store{
		"one call per lease": func(m *memory.Store) driver.Store { return storeOnly{m} },
		"batches":            func(m *memory.Store) driver.Store { return m },
	} {
		t.Run(name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			fc := clock.NewFake()
			mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
			lk, err := tenure.New(wrap(mem), tenure.WithClock(fc), tenure.WithMaxConcurrentRenewals(8))
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			const n = 2000
			const leaseTTL = 1500 * time.Millisecond
			leases := make([]*tenure.Lease, n)
			for i := range leases {
				if leases[i], err = lk.TryAcquire(ctx, fmt.Sprintf("r/%d", i), leaseTTL); err != nil {
					t.Fatal(err)
				}
			}
			peak := 0
			for round := range 6 { // three TTLs
				fc.Advance(leaseTTL / 3)
				renewedBy := fc.Now().Add(leaseTTL * 9 / 10)
				// A renewal call is bounded in real time by the lease's time
				// left; on a loaded machine one may run out, and its retry is
				// scheduled on the fake clock: nudge the clock while nothing
				// moves (it never approaches a deadline: each round stays
				// far within the TTL).
				stalled := time.Now()
				for done := false; !done; time.Sleep(time.Millisecond) {
					if time.Since(stalled) > 200*time.Millisecond {
						fc.Advance(5 * time.Millisecond)
						stalled = time.Now()
					}
					peak = max(peak, runtime.NumGoroutine()-base)
					done = true
					for i, l := range leases {
						if err := l.Err(); err != nil {
							t.Fatalf("round %d: lease %d lost while renewing %d leases: %v", round, i, n, err)
						}
						if l.Deadline().Before(renewedBy) {
							done = false
							break
						}
					}
				}
			}
			if peak > n/20 {
				t.Fatalf("%d goroutines for %d leases", peak, n)
			}
			for _, l := range leases {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for limit := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > base; time.Sleep(time.Millisecond) {
				if time.Now().After(limit) {
					t.Fatalf("%d goroutines left after releasing every lease (%d before)", runtime.NumGoroutine(), base)
				}
			}
			t.Logf("%d leases renewed every %v with at most %d extra goroutines", n, leaseTTL/3, peak)
		})
	}
}

// A client whose requests reach the store but whose answers are lost must
// not keep re-taking the lease it cannot confirm: after an unresolved
// acquire it writes again only once a read is answered, so a healthy
// contender gets the lease once the orphan expires.
func TestHalfConnectedClientStopsWriting(t *testing.T) {
	mem := memory.New()
	f := storetest.NewFaulty(mem)
	a, _ := tenure.New(f, tenure.WithRetry(time.Millisecond, 10*time.Millisecond))
	b, _ := tenure.New(mem, tenure.WithRetry(time.Millisecond, 10*time.Millisecond))
	for _, op := range []string{storetest.OpAcquire, storetest.OpRenew, storetest.OpRelease, storetest.OpGet} {
		f.Set(op, storetest.DropReply, 0)
	}
	ctx := ctxT(t)
	const short = 300 * time.Millisecond
	if _, err := a.TryAcquire(ctx, "r", short); !errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("acquire with every answer lost: %v", err)
	}
	writes := f.Calls(storetest.OpAcquire)
	if writes != 1 {
		t.Fatalf("%d acquire writes while resolving; reads should have come first", writes)
	}
	// It keeps trying for three TTLs, as an election loop would, without
	// writing.
	for end := time.Now().Add(3 * short); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if _, err := a.TryAcquire(ctx, "r", short); err == nil {
			t.Fatal("granted without an answer")
		}
	}
	if n := f.Calls(storetest.OpAcquire); n != writes {
		t.Fatalf("the half-connected client wrote %d more acquires", n-writes)
	}
	// The orphan expired: a healthy contender gets the lease.
	lb, err := b.TryAcquire(ctx, "r", short)
	if err != nil {
		t.Fatalf("healthy contender: %v", err)
	}
	lb.Release(ctx)
}

func TestLeaseFromContext(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	if tenure.LeaseFromContext(ctx) != nil {
		t.Fatal("a lease in a plain context")
	}
	err := f.lk.Do(ctx, "r", ttl, func(wctx context.Context) error {
		l := tenure.LeaseFromContext(wctx)
		if l == nil || l.Resource() != "r" || l.Token() == 0 {
			t.Errorf("LeaseFromContext in Do's function: %v", l)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// An acquire in flight when Close runs gives the lease back.
func TestCloseDuringAcquire(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	closed := make(chan error, 1)
	f.faulty.OnCall(func(op string) {
		if op != storetest.OpAcquire {
			return
		}
		f.faulty.OnCall(nil)
		// Close runs while this acquire is in flight; it waits for it.
		go func() { closed <- f.lk.Close(ctx) }()
		for {
			if _, err := f.lk.TryAcquire(ctx, "other", ttl); errors.Is(err, tenure.ErrClosed) {
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	if _, err := f.lk.TryAcquire(ctx, "r", ttl); !errors.Is(err, tenure.ErrClosed) {
		t.Fatalf("acquire across Close: %v; want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := f.mem.Get(ctx, "r"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("the lease granted during Close is still held: %v", err)
	}
}

func TestHeldErrorMessages(t *testing.T) {
	e := &tenure.HeldError{Holder: tenure.Record{Resource: "r", Owner: "web-1:7#00ff", Token: 4, Remaining: 1500 * time.Millisecond}}
	if got := e.Error(); got != `tenure: "r" is held by "web-1:7#00ff" (token 4, 1.5s left)` {
		t.Errorf("HeldError = %q", got)
	}
	// Strings from other hosts are quoted: no control character or terminal
	// escape reaches a log or a terminal.
	e = &tenure.HeldError{Holder: tenure.Record{Resource: "r\x1b[2J", Owner: "evil\x1b]0;x\x07#1"}}
	if got := e.Error(); strings.ContainsAny(got, "\x1b\x07") {
		t.Errorf("HeldError prints control characters raw: %q", got)
	}
	e = &tenure.HeldError{Holder: tenure.Record{Resource: "r", Token: 5}}
	if got := e.Error(); !strings.Contains(got, "changed hands") || !errors.Is(e, tenure.ErrHeld) {
		t.Errorf("HeldError without owner = %q", got)
	}
}

// TestLossDuringClose: a lease found lost (starting its clean-up) while
// Close is waiting for clean-ups. Run with -race: the clean-up's start must
// be ordered with Close's wait. The store's clock stands still, so the
// lease stays held there until the clean-up or Close frees it.
func TestLossDuringClose(t *testing.T) {
	for i := 0; i < 100; i++ {
		local := clock.NewFake()
		mem, _ := memory.Open(context.Background(), memory.Config{Clock: clock.NewFake()})
		lk, err := tenure.New(mem, tenure.WithClock(&frozenTimers{Fake: local}))
		if err != nil {
			t.Fatal(err)
		}
		l, err := lk.TryAcquire(ctxT(t), "r", ttl)
		if err != nil {
			t.Fatal(err)
		}
		local.Advance(2 * ttl) // the holder was paused; no timer fires (frozen)
		checked := make(chan error, 1)
		go func() { checked <- l.Err() }() // sees the deadline: lose, clean-up
		if err := lk.Close(ctxT(t)); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := <-checked; !errors.Is(err, tenure.ErrLeaseLost) && !errors.Is(err, tenure.ErrReleased) {
			t.Fatalf("Err: %v", err)
		}
		waitFree(t, mem, "r")
	}
}

// blockingAcquires is a store whose acquire calls, from the n-th on, wait
// for their context to end (a call in flight when the caller gives up).
type blockingAcquires struct {
	driver.Store
	calls   atomic.Int64
	n       int64
	blocked chan struct{}
}

func (b *blockingAcquires) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if b.calls.Add(1) >= b.n {
		b.blocked <- struct{}{}
		<-ctx.Done()
		return driver.Record{}, ctx.Err()
	}
	return b.Store.Acquire(ctx, resource, owner, ttl)
}

// A waiter that gives up while one of its attempts is in flight still says
// that the resource was held (and that ctx ended): the attempt's outcome
// is unknown, the wait's is not.
func TestAcquireCancelledDuringAttemptSaysHeld(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	holder, err := tenure.New(mem)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.TryAcquire(ctx, "r", ttl); err != nil {
		t.Fatal(err)
	}
	s := &blockingAcquires{Store: mem, n: 3, blocked: make(chan struct{}, 1)}
	waiter, err := tenure.New(s, tenure.WithRetry(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(wctx, "r", ttl)
		done <- err
	}()
	<-s.blocked
	cancel()
	err = <-done
	if !errors.Is(err, context.Canceled) || !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("Acquire cancelled during an attempt: %v; want context.Canceled and ErrHeld", err)
	}
}

// The same for a semaphore's Acquire.
func TestSemaphoreAcquireCancelledDuringAttemptSaysHeld(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	holder, err := tenure.New(mem)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := holder.Semaphore("sem", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hs.TryAcquire(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	s := &blockingAcquires{Store: mem, n: 3, blocked: make(chan struct{}, 1)}
	waiter, err := tenure.New(s, tenure.WithRetry(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ws, err := waiter.Semaphore("sem", 1)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := ws.Acquire(wctx, ttl)
		done <- err
	}()
	<-s.blocked
	cancel()
	err = <-done
	if !errors.Is(err, context.Canceled) || !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("Acquire cancelled during an attempt: %v; want context.Canceled and ErrHeld", err)
	}
}

// unusableAfter answers its first n acquires from the store it wraps, and
// every later one with an error wrapping driver.ErrStoreUnusable.
type unusableAfter struct {
	driver.Store
	calls atomic.Int64
	n     int64
}

func (u *unusableAfter) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if u.calls.Add(1) > u.n {
		return driver.Record{}, fmt.Errorf("test store: %w", driver.ErrStoreUnusable)
	}
	return u.Store.Acquire(ctx, resource, owner, ttl)
}

// A blocking Acquire, of a lease or of a semaphore's slot, returns at once
// when the store becomes unusable during its wait, instead of retrying
// until its context ends.
func TestAcquireWaitEndsWhenStoreUnusable(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	holder, err := tenure.New(mem)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.TryAcquire(ctx, "r", ttl); err != nil {
		t.Fatal(err)
	}
	hs, err := holder.Semaphore("sem", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hs.TryAcquire(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	for _, what := range []string{"lease", "slot"} {
		t.Run(what, func(t *testing.T) {
			s := &unusableAfter{Store: mem, n: 2}
			waiter, err := tenure.New(s, tenure.WithRetry(time.Millisecond, time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if what == "lease" {
				_, err = waiter.Acquire(wctx, "r", ttl)
			} else {
				ws, serr := waiter.Semaphore("sem", 1)
				if serr != nil {
					t.Fatal(serr)
				}
				_, err = ws.Acquire(wctx, ttl)
			}
			if !errors.Is(err, tenure.ErrStoreUnusable) || wctx.Err() != nil {
				t.Fatalf("Acquire of a %s on a store that became unusable: %v (context: %v); want ErrStoreUnusable before the context ends", what, err, wctx.Err())
			}
			if n := s.calls.Load(); n != 3 {
				t.Fatalf("%d acquire attempts; want 3 (two answered held, then unusable)", n)
			}
		})
	}
}

// The "held" message says when the holder is the caller's own earlier
// grant: a Locker is not reentrant, and a grant kept by ReleaseAfter holds
// the resource until its hold ends.
func TestHeldByOwnGrantSaysSo(t *testing.T) {
	ctx := ctxT(t)
	mem := memory.New()
	lk, _ := tenure.New(mem, tenure.WithOwnerID("indexer"))
	l, err := lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	var held *tenure.HeldError
	_, err = lk.TryAcquire(ctx, "r", ttl)
	if !errors.As(err, &held) || !errors.Is(err, tenure.ErrHeld) || !strings.Contains(err.Error(), "this Locker's own earlier grant") {
		t.Fatalf("second TryAcquire: %v; want a *HeldError saying the holder is this Locker's own grant", err)
	}
	if err := l.ReleaseAfter(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err = lk.TryAcquire(ctx, "r", ttl)
	if !errors.As(err, &held) || !strings.Contains(err.Error(), "kept by ReleaseAfter") {
		t.Fatalf("TryAcquire of a kept grant: %v; want it named as this Locker's, kept", err)
	}
	other, _ := tenure.New(mem, tenure.WithOwnerID("indexer"))
	if _, err = other.TryAcquire(ctx, "r", ttl); !errors.As(err, &held) || strings.Contains(err.Error(), "own") {
		t.Fatalf("another Locker with the same id: %v; want a plain *HeldError", err)
	}
}
