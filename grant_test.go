package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

// Every acquire call is a grant of its own: the same Locker's next acquire
// of a resource it held is another owner string, so a store never confuses
// the two.
func TestEachAcquireIsAGrantOfItsOwn(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	l1, err := f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if l1.Owner() == l2.Owner() || !f.lk.Owns(l1.Owner()) || !f.lk.Owns(l2.Owner()) {
		t.Fatalf("grants %q and %q of Locker %q", l1.Owner(), l2.Owner(), f.lk.Owner())
	}
	if tenure.OwnerID(l2.Owner()) != "test" {
		t.Fatalf("OwnerID(%q) = %q", l2.Owner(), tenure.OwnerID(l2.Owner()))
	}
	other, _ := tenure.New(f.mem)
	if other.Owns(l2.Owner()) || f.lk.Owns(f.lk.Owner()) || f.lk.Owns(f.lk.Owner()+"x.1") {
		t.Fatal("Owns accepts an owner string that is not a grant of this Locker")
	}
}

// Field case C11: an earlier grant's requests, delivered late, never act on
// a later grant of the same Locker. A holds "r"; its renewals are applied
// but their answers are lost, so it gives the lease up at its deadline; the
// release it then sends is held up in the network. The same Locker acquires
// "r" again at once. Only once the earlier grant has expired in the store
// is a new grant made, with a new token; the late release of the earlier
// grant then changes nothing.
func TestCaseC11LateRequestOfAnEarlierGrant(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	const short = 600 * time.Millisecond
	l1, err := f.lk.TryAcquire(ctx, "r", short)
	if err != nil {
		t.Fatal(err)
	}
	f.faulty.Set(storetest.OpRenew, storetest.DropReply, 0) // applied, answer lost
	f.faulty.Set(storetest.OpRelease, storetest.Late, 0)    // held up in the network
	for l1.Err() == nil {
		f.clock.Advance(50 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(l1.Err(), tenure.ErrLeaseExpired) {
		t.Fatalf("first grant's loss: %v; want ErrLeaseExpired", l1.Err())
	}
	// The Locker frees the lost grant in the background: that release is
	// the request held up in the network.
	waitFor(t, func() bool { return f.faulty.Calls(storetest.OpRelease) > 0 }, "the lost grant's release")
	// The store still keeps the first grant (its last renewal was applied):
	// a new acquire by the same Locker must not adopt it.
	if _, err := f.lk.TryAcquire(ctx, "r", short); err == nil {
		t.Fatal("the Locker adopted its earlier grant, which it had given up")
	} else {
		var held *tenure.HeldError
		if !errors.As(err, &held) || held.Holder.Owner != l1.Owner() {
			t.Fatalf("re-acquire while the earlier grant lives in the store: %v; want HeldError naming %s", err, l1.Owner())
		}
	}
	f.faulty.Heal()
	f.clock.Advance(short) // the earlier grant expires in the store
	l2, err := f.lk.TryAcquire(ctx, "r", short)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l1.Token() || l2.Owner() == l1.Owner() {
		t.Fatalf("second grant %s token %d after %s token %d", l2.Owner(), l2.Token(), l1.Owner(), l1.Token())
	}
	if n := f.faulty.DeliverLate(); n == 0 {
		t.Fatal("no late request was held back: the test did not exercise the fault")
	}
	rec, err := f.mem.Get(ctx, "r")
	if err != nil || rec.Owner != l2.Owner() || rec.Token != l2.Token() {
		t.Fatalf("after the earlier grant's late release the store holds %+v, %v; the Locker trusts %s token %d", rec, err, l2.Owner(), l2.Token())
	}
	if err := l2.Renew(ctx); err != nil {
		t.Fatalf("second grant's renewal after the late request: %v", err)
	}
}

// Field case C12: Do releases the lease when its function panics, then the
// panic goes on; nothing renews the lease afterwards.
func TestCaseC12DoReleasesOnPanic(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v; want the function's panic", r)
			}
		}()
		_ = f.lk.Do(ctx, "r", ttl, func(context.Context) error { panic("boom") })
		t.Fatal("Do returned after its function panicked")
	}()
	other, _ := tenure.New(f.mem, tenure.WithClock(f.clock))
	if _, err := other.TryAcquire(ctx, "r", ttl); err != nil {
		t.Fatalf("another owner after the panic: %v", err)
	}
	renewals := f.faulty.Calls(storetest.OpRenew)
	f.clock.Advance(ttl)
	time.Sleep(20 * time.Millisecond)
	if n := f.faulty.Calls(storetest.OpRenew); n != renewals {
		t.Fatalf("%d renewals after the panic", n-renewals)
	}
}

// Field case C13: Release with the lease's own context, and with a context
// cancelled while a renewal was in flight, still frees the lease.
func TestCaseC13ReleaseWithCancelledContext(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	l, err := f.lk.TryAcquire(ctx, "own", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(l.Context()); err != nil {
		t.Fatalf("Release(lease.Context()): %v", err)
	}
	if _, err := f.mem.Get(ctx, "own"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("after Release(lease.Context()): %v; want free", err)
	}

	l, err = f.lk.TryAcquire(ctx, "mid-renew", ttl)
	if err != nil {
		t.Fatal(err)
	}
	f.faulty.Set(storetest.OpRenew, storetest.Hang, 1)
	rctx, cancel := context.WithCancel(ctx)
	renewed := make(chan error, 1)
	go func() { renewed <- l.Renew(rctx) }()
	for f.faulty.Hung() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-renewed; err == nil {
		t.Fatal("a renewal cancelled in flight reported success")
	}
	if err := l.Release(rctx); err != nil {
		t.Fatalf("Release with the cancelled context: %v", err)
	}
	if _, err := f.mem.Get(ctx, "mid-renew"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("after Release with a cancelled context: %v; want free", err)
	}
}

// A release whose caller gives up goes on in the background until the
// lease would expire, and Close waits for it.
func TestReleaseGoesOnInTheBackground(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	l, err := f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	f.faulty.Set(storetest.OpRelease, storetest.Fail, 3)
	rctx, cancel := context.WithCancel(ctx)
	go func() {
		for f.faulty.Calls(storetest.OpRelease) == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if err := l.Release(rctx); err == nil || !strings.Contains(err.Error(), "background") {
		t.Fatalf("Release whose caller gave up: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- f.lk.Close(ctx) }()
	for {
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
			if _, err := f.mem.Get(ctx, "r"); !errors.Is(err, tenure.ErrNotHeld) {
				t.Fatalf("after Close: %v; want the background release done", err)
			}
			return
		default:
			f.clock.Advance(tenure.DefaultRetryInterval)
			time.Sleep(time.Millisecond)
		}
	}
}

// A release whose caller gives up while the store call hangs returns at
// once, and the release goes on in the background on a context the caller
// cannot end: the lease is freed.
func TestReleaseCutShortGoesOnInTheBackground(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	l, err := f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	f.faulty.Set(storetest.OpRelease, storetest.Hang, 1)
	rctx, cancel := context.WithCancel(ctx)
	go func() {
		for f.faulty.Hung() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if err := l.Release(rctx); err == nil || !strings.Contains(err.Error(), "background") {
		t.Fatalf("Release whose caller gave up during a hung call: %v; want not confirmed, going on in the background", err)
	}
	if err := f.lk.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := f.mem.Get(ctx, "r"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("after Close: %v; want the background release done", err)
	}
	if n := f.faulty.Calls(storetest.OpRelease); n != 2 {
		t.Fatalf("%d release calls; want the hung one and one in the background", n)
	}
}

// Field case C14: the machine sleeps 10 s while holding a lease with a 3 s
// TTL. The store's clock ran on; Go's timers did not. At resume the holder
// sees the loss at its first check, and another owner can be granted it.
func TestCaseC14Suspend(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	const short = 3 * time.Second
	l, err := f.lk.TryAcquire(ctx, "checked", short)
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Suspend(10 * time.Second)
	if !errors.Is(l.Err(), tenure.ErrLeaseExpired) {
		t.Fatalf("first check after resume: %v; want ErrLeaseExpired", l.Err())
	}
	other, _ := tenure.New(f.mem, tenure.WithClock(f.clock))
	if _, err := other.TryAcquire(ctx, "checked", short); err != nil {
		t.Fatalf("another owner after the suspend: %v", err)
	}

}

// The suspend watch alone (no Err, Done or timer) ends a lease whose
// deadline passed during a suspend.
func TestSuspendWatchEndsLeaseWithoutChecks(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	if _, err := f.lk.TryAcquire(ctx, "r", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	f.clock.Suspend(10 * time.Second)
	select {
	case cause := <-f.lost:
		if !errors.Is(cause, tenure.ErrLeaseExpired) {
			t.Fatalf("loss cause %v", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the suspend watch did not end the lease")
	}
}

// Field case C15: 80 leases whose store calls hang and 20 healthy ones on
// one Locker. Renewals of the healthy leases never wait behind the hung
// calls, and none of them is lost.
func TestCaseC15HungCallsNeverStarveRenewals(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	const hung, healthy = 80, 20
	leases := make([]*tenure.Lease, 0, hung+healthy)
	for i := range hung + healthy {
		if i == hung {
			// The healthy leases come due later, queued behind the hung ones.
			f.clock.Advance(time.Second)
		}
		l, err := f.lk.TryAcquire(ctx, fmt.Sprintf("r%03d", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	f.faulty.Only(func(op, resource string) bool { return resource < fmt.Sprintf("r%03d", hung) })
	f.faulty.Set(storetest.OpRenew, storetest.Hang, 0)
	f.clock.Advance(ttl / 3) // the hung leases' renewals come due and hang
	for f.faulty.Hung() < 64 {
		time.Sleep(time.Millisecond)
	}
	var healthyRenewals atomic.Int64
	f.faulty.AfterCall(func(op string) {
		if op == storetest.OpRenew {
			healthyRenewals.Add(1)
		}
	})
	f.clock.Advance(time.Second) // the healthy leases' renewals come due
	renewedBy := f.clock.Now().Add(ttl * 9 / 10)
	deadline := time.Now().Add(10 * time.Second)
	for i := hung; i < hung+healthy; i++ {
		for leases[i].Deadline().Before(renewedBy) { // its renewal confirmed
			if time.Now().After(deadline) {
				t.Fatalf("%d healthy renewals done, %d calls hung: renewals starved", healthyRenewals.Load(), f.faulty.Hung())
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Past the hung leases' deadlines: they are lost, the healthy ones not.
	f.clock.Advance(ttl - ttl/3 - time.Second)
	for i, l := range leases {
		err := l.Err()
		if i < hung && !errors.Is(err, tenure.ErrLeaseLost) {
			t.Fatalf("hung lease %d still trusted past its deadline", i)
		}
		if i >= hung && err != nil {
			t.Fatalf("healthy lease %d lost: %v", i, err)
		}
	}
}

// A background renewal whose next retry would fall after the deadline tries
// sooner instead of letting the lease lapse. With the retry delay drawn up
// to 20 s and 9.7 s left, about half the leases would otherwise be lost.
func TestRenewalRetriesBeforeTheDeadline(t *testing.T) {
	f := newFixture(t, tenure.WithRenewInterval(20*time.Second), tenure.WithRetry(time.Hour, time.Hour))
	ctx := ctxT(t)
	const n = 20
	var leases []*tenure.Lease
	for i := range n {
		l, err := f.lk.TryAcquire(ctx, fmt.Sprintf("r%d", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	f.faulty.Set(storetest.OpRenew, storetest.Fail, n) // each lease's first renewal fails
	for range 310 {                                    // past the first deadline (29.7 s)
		f.clock.Advance(100 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	for i, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("lease %d lost although the store answered again with time left: %v", i, err)
		}
	}
}

// A successful manual Renew after failed background ones resumes the
// background schedule from the new deadline.
func TestManualRenewResumesBackgroundRenewal(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	l, err := f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	f.faulty.Set(storetest.OpRenew, storetest.Fail, 0)
	for range 25 {
		f.clock.Advance(time.Second)
		time.Sleep(time.Millisecond)
	}
	f.faulty.Heal()
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("manual renew: %v", err)
	}
	for range 100 { // three TTLs, one second at a time
		f.clock.Advance(time.Second)
		// Renewals come every TTL/3: more than half the TTL left means the
		// schedule holds; let a renewal in flight land before going on.
		waitFor(t, func() bool { return l.Err() != nil || l.Deadline().Sub(f.clock.Now()) > ttl/2 }, "a renewal")
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost after a successful manual renew: %v", err)
	}
}

// Field case C19: a caller can tell a lease lost to an outage from one lost
// to another owner.
func TestCaseC19WhyALeaseWasLost(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	a, err := f.lk.TryAcquire(ctx, "outage", ttl)
	if err != nil {
		t.Fatal(err)
	}
	f.faulty.Set(storetest.OpRenew, storetest.Fail, 0)
	for a.Err() == nil {
		f.clock.Advance(time.Second)
		time.Sleep(time.Millisecond)
	}
	cause := a.Err()
	var lost *tenure.LostError
	if !errors.Is(cause, tenure.ErrLeaseExpired) || !errors.Is(cause, storetest.ErrInjected) || !errors.As(cause, &lost) ||
		errors.Is(cause, tenure.ErrNotHolder) || errors.Is(cause, tenure.ErrHeld) {
		t.Fatalf("lost to an outage: %v; want ErrLeaseExpired wrapping the store's error", cause)
	}
	if c := context.Cause(a.Context()); c != cause {
		t.Fatalf("context cause %v, Err %v", c, cause)
	}
	f.faulty.Heal()

	b, err := f.lk.TryAcquire(ctx, "taken", ttl)
	if err != nil {
		t.Fatal(err)
	}
	// An operator frees it; another owner is granted it with the next token.
	if err := f.mem.Release(ctx, "taken", b.Owner(), b.Token()); err != nil {
		t.Fatal(err)
	}
	other, _ := tenure.New(f.mem, tenure.WithClock(f.clock))
	ob, err := other.TryAcquire(ctx, "taken", ttl)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Renew(ctx)
	var held *tenure.HeldError
	if !errors.Is(err, tenure.ErrNotHolder) || !errors.As(err, &held) || held.Holder.Owner != ob.Owner() || held.Holder.Token != ob.Token() {
		t.Fatalf("lost to another owner: %v; want ErrNotHolder naming %s token %d", err, ob.Owner(), ob.Token())
	}
	if errors.Is(err, tenure.ErrLeaseExpired) || !strings.Contains(err.Error(), ob.Owner()) {
		t.Fatalf("message %q", err)
	}
}

// A TryAcquire from inside the loss callback makes a new grant: the lost
// lease is not the Locker's any more.
func TestTryAcquireFromLossCallback(t *testing.T) {
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	got := make(chan error, 1)
	var lk *tenure.Locker
	lk, _ = tenure.New(mem, tenure.WithClock(fc), tenure.WithOnLost(func(l *tenure.Lease, _ error) {
		_, err := lk.TryAcquire(context.Background(), l.Resource(), ttl)
		got <- err
	}))
	ctx := ctxT(t)
	l, err := lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := tenure.New(mem, tenure.WithClock(fc))
	if err := mem.Release(ctx, "r", l.Owner(), l.Token()); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquire(ctx, "r", ttl); err != nil {
		t.Fatal(err)
	}
	_ = l.Renew(ctx) // lost: another owner holds it
	err = <-got
	var held *tenure.HeldError
	if !errors.As(err, &held) || !other.Owns(held.Holder.Owner) {
		t.Fatalf("TryAcquire from the loss callback: %v; want HeldError naming the other owner", err)
	}
}

// WithReleaseWatch: a lease freed by someone else is lost as soon as the
// store's release notification arrives, without waiting for a renewal.
func TestReleaseWatchLosesAtOnce(t *testing.T) {
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	lost := make(chan error, 1)
	lk, _ := tenure.New(mem, tenure.WithClock(fc), tenure.WithReleaseWatch(),
		tenure.WithOnLost(func(_ *tenure.Lease, cause error) { lost <- cause }))
	ctx := ctxT(t)
	l, err := lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := mem.Release(ctx, "r", l.Owner(), l.Token()); err != nil { // an operator's forced release
		t.Fatal(err)
	}
	select {
	case cause := <-lost:
		if !errors.Is(cause, tenure.ErrNotHolder) {
			t.Fatalf("cause %v", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lease was not lost after the release notification")
	}
}

// ReleaseAfter ends the lease locally and leaves the resource held in the
// store for the time given; a TTL the store cannot keep is refused before
// anything changes.
func TestReleaseAfterHoldsTheResource(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	l, err := f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseAfter(ctx, -time.Second); err != nil {
		t.Fatalf("ReleaseAfter(-1s), a plain release: %v", err)
	}
	if _, err := f.mem.Get(ctx, "r"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("after ReleaseAfter(-1s): %v; want free", err)
	}
	l, err = f.lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseAfter(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), tenure.ErrReleased) {
		t.Fatalf("lease after ReleaseAfter: %v", l.Err())
	}
	other, _ := tenure.New(f.mem, tenure.WithClock(f.clock))
	f.clock.Advance(59 * time.Second)
	if _, err := other.TryAcquire(ctx, "r", ttl); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("acquire 59 s into a one-minute hold: %v; want held", err)
	}
	f.clock.Advance(2 * time.Second)
	if _, err := other.TryAcquire(ctx, "r", ttl); err != nil {
		t.Fatalf("acquire after the hold: %v", err)
	}
}

// Close waits for an acquire in flight and for clean-ups: nothing touches
// the store after it returns.
func TestCloseWaitsForAcquiresInFlight(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	f.faulty.OnCall(func(op string) {
		if op == storetest.OpAcquire {
			once.Do(func() { close(entered) })
			<-release
		}
	})
	acquired := make(chan error, 1)
	go func() {
		_, err := f.lk.TryAcquire(ctx, "r", ttl)
		acquired <- err
	}()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- f.lk.Close(ctx) }()
	select {
	case <-closed:
		t.Fatal("Close returned while an acquire was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	var calls atomic.Int64
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	f.faulty.OnCall(func(string) { calls.Add(1) })
	if err := <-acquired; !errors.Is(err, tenure.ErrClosed) {
		t.Fatalf("acquire across Close: %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d store calls after Close returned", n)
	}
	if _, err := f.mem.Get(ctx, "r"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("the lease granted across Close is held: %v", err)
	}
}

// A store that renews many leases in one request (driver.BatchRenewer) gets
// the renewals that come due together in one call; each lease gets its own
// answer.
func TestBatchRenewal(t *testing.T) {
	fc := clock.NewFake()
	m, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	mem := &batchCounter{Store: m}
	lost := make(chan *tenure.Lease, 16)
	lk, _ := tenure.New(mem, tenure.WithClock(fc), tenure.WithOnLost(func(l *tenure.Lease, _ error) { lost <- l }))
	ctx := ctxT(t)
	const n = 500
	leases := make([]*tenure.Lease, n)
	for i := range leases {
		l, err := lk.TryAcquire(ctx, fmt.Sprintf("r%d", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	// An operator frees one; another owner takes it.
	taken := leases[7]
	if err := mem.Release(ctx, taken.Resource(), taken.Owner(), taken.Token()); err != nil {
		t.Fatal(err)
	}
	other, _ := tenure.New(mem, tenure.WithClock(fc))
	if _, err := other.TryAcquire(ctx, taken.Resource(), ttl); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 3; round++ {
		fc.Advance(ttl / 3)
		waitFor(t, func() bool { return mem.Batches() >= round }, "a batch renewal")
		waitFor(t, func() bool { // every answer applied, the next renewal scheduled
			for _, l := range leases {
				if l != taken && l.Deadline().Sub(fc.Now()) < ttl*9/10 {
					return false
				}
			}
			return true
		}, "the batch's answers")
	}
	if l := <-lost; l != taken {
		t.Fatalf("lost %s; want %s", l.Resource(), taken.Resource())
	}
	if b := mem.Batches(); b > 3 {
		t.Fatalf("%d batch calls for three rounds of %d renewals", b, n)
	}
	fc.Advance(ttl / 3)
	for i, l := range leases {
		if l != taken && l.Err() != nil {
			t.Fatalf("lease %d lost: %v", i, l.Err())
		}
	}
	if !errors.Is(taken.Err(), tenure.ErrNotHolder) {
		t.Fatalf("taken lease: %v", taken.Err())
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// appliedThenCancelled applies an acquire, then waits for the caller to
// give up and reports the plain context error, as a driver does when the
// caller's context ends after the request was sent (PostgreSQL, a caller
// stopped by SIGTERM).
type appliedThenCancelled struct {
	*memory.Store
	entered chan struct{}
}

func (s appliedThenCancelled) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (tenure.Record, error) {
	if _, err := s.Store.Acquire(context.Background(), resource, owner, ttl); err != nil {
		return tenure.Record{}, err
	}
	close(s.entered)
	<-ctx.Done()
	return tenure.Record{}, ctx.Err()
}

// An acquire whose context ends after the request was sent has an unknown
// outcome, whatever the driver's error says; what it may have taken is
// freed in the background, and Close waits for that, so a stopped process
// never leaves the lease held for a whole TTL.
func TestAcquireInterruptedAfterSendIsUnknown(t *testing.T) {
	mem := memory.New()
	s := appliedThenCancelled{Store: mem, entered: make(chan struct{})}
	lk, _ := tenure.New(s)
	ctx, cancel := context.WithCancel(ctxT(t))
	go func() { <-s.entered; cancel() }()
	_, err := lk.TryAcquire(ctx, "r", ttl)
	if !errors.Is(err, tenure.ErrUnknownOutcome) || !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire interrupted after send: %v; want ErrUnknownOutcome wrapping context.Canceled", err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	if err := lk.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if rec, err := mem.Get(ctxT(t), "r"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("after Close the interrupted acquire's lease is still held: %+v, %v", rec, err)
	}
}

// Do's function sees the loss at its first check after a suspend past the
// deadline, before any timer fires, as the lease's own context does; its
// context still carries the lease (LeaseFromContext). Found by an
// adversarial review: a context derived from the lease's waited for the
// watchdog or the suspend watch while another owner held the resource.
func TestDoContextReadsTheClock(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	inFn, checked := make(chan struct{}), make(chan error, 1)
	resume := make(chan struct{})
	go f.lk.Do(ctx, "r", 3*time.Second, func(fctx context.Context) error {
		if tenure.LeaseFromContext(fctx) == nil {
			t.Error("Do's context carries no lease")
		}
		close(inFn)
		<-resume
		checked <- fctx.Err()
		return nil
	})
	<-inFn
	f.clock.Suspend(10 * time.Second)
	close(resume)
	if err := <-checked; err == nil {
		t.Fatal("Do's context is live after a suspend past the lease's deadline")
	}
}

// ReleaseAfter's hold outlives a renewal of the grant delivered late: the
// store keeps the lease under naming.KeptOwner, so a renewal that was sent before
// the hold, held up in the network, and applied after it finds another
// holder and cannot cut the hold back to the lease's TTL (found by an
// adversarial review, on Redis and PostgreSQL: the hold was one renewal
// with a longer TTL, which the late renewal overwrote).
func TestReleaseAfterOutlivesLateRenewal(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	const short, hold = 3 * time.Second, 20 * time.Second
	l, err := f.lk.TryAcquire(ctx, "cron", short)
	if err != nil {
		t.Fatal(err)
	}
	f.faulty.Set(storetest.OpRenew, storetest.Late, 1) // held up in the network
	if err := l.Renew(ctx); err == nil {
		t.Fatal("a renewal held up in the network reported success")
	}
	if err := l.ReleaseAfter(ctx, hold); err != nil {
		t.Fatalf("ReleaseAfter: %v", err)
	}
	if n := f.faulty.DeliverLate(); n != 1 {
		t.Fatalf("%d late requests delivered; want the renewal", n)
	}
	f.clock.Advance(2 * short) // past the lease's TTL, within the hold
	rec, err := f.mem.Get(ctx, "cron")
	if err != nil || rec.Owner != naming.KeptOwner(l.Owner()) || rec.Token != l.Token() {
		t.Fatalf("%v after ReleaseAfter(%v) and a late renewal: %+v, %v; want held by %s, token %d", 2*short, hold, rec, err, naming.KeptOwner(l.Owner()), l.Token())
	}
	other, _ := tenure.New(f.mem, tenure.WithClock(f.clock))
	if _, err := other.TryAcquire(ctx, "cron", short); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("another owner within the hold: %v; want ErrHeld", err)
	}
	if !f.lk.Owns(rec.Owner) {
		t.Fatalf("Owns(%q) = false for the Locker's kept lease", rec.Owner)
	}
	f.clock.Advance(hold)
	if _, err := other.TryAcquire(ctx, "cron", short); err != nil {
		t.Fatalf("another owner after the hold: %v", err)
	}
}

// batchCounter counts the RenewBatch calls that the memory store was asked
// to answer (those made before their context ended).
type batchCounter struct {
	*memory.Store
	n atomic.Int64
}

func (b *batchCounter) RenewBatch(ctx context.Context, leases []driver.Renewal) []error {
	if ctx.Err() == nil {
		defer b.n.Add(1)
	}
	return b.Store.RenewBatch(ctx, leases)
}

func (b *batchCounter) Batches() int { return int(b.n.Load()) }
