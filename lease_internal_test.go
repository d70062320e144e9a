package tenure

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/store/memory"
)

// A lease ended by another goroutine (the watchdog, a renewal's answer)
// that has set its cause but not yet cancelled its context: Err and the
// context must already agree, whichever the caller reads.
func TestLeaseErrAndContextAgree(t *testing.T) {
	for _, read := range []string{"Err", "Context().Err", "Done"} {
		t.Run(read, func(t *testing.T) {
			lk, err := New(memory.New())
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Close(context.Background())
			l, err := lk.TryAcquire(context.Background(), "r", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			// What lose does before it cancels the context.
			cause := &LostError{Resource: "r", Token: l.Token(), Reason: ErrLeaseExpired}
			l.mu.Lock()
			l.state = stateLost
			l.cause = cause
			l.mu.Unlock()
			switch read {
			case "Err":
				if err := l.Err(); !errors.Is(err, ErrLeaseLost) {
					t.Fatalf("Err = %v; want ErrLeaseLost", err)
				}
			case "Context().Err":
				_ = l.Context().Err()
			case "Done":
				_ = l.Done()
			}
			if err := l.Context().Err(); err == nil {
				t.Fatal("Err says lost; the lease's context is live")
			}
			if c := context.Cause(l.Context()); !errors.Is(c, ErrLeaseLost) {
				t.Fatalf("context cause %v; want ErrLeaseLost", c)
			}
			select {
			case <-l.Done():
			default:
				t.Fatal("Done not closed")
			}
		})
	}
}

// nextRenewal keeps a lease's phase: the next renewal is due an interval
// after this one was due, whether the batch sent it early or late, unless
// it went out more than half an interval late (then an interval after the
// send) or its due time is unknown.
func TestNextRenewal(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const iv = 10 * time.Second
	for _, c := range []struct {
		name      string
		due, sent time.Time
		want      time.Time
	}{
		{"on time", t0, t0, t0.Add(iv)},
		{"pulled early into a batch", t0.Add(30 * time.Millisecond), t0, t0.Add(iv + 30*time.Millisecond)},
		{"sent late behind a queue", t0, t0.Add(2 * time.Second), t0.Add(iv)},
		{"sent more than half an interval late", t0, t0.Add(6 * time.Second), t0.Add(6*time.Second + iv)},
		{"due unknown", time.Time{}, t0, t0.Add(iv)},
		{"due far after the send", t0.Add(time.Second), t0, t0.Add(iv)},
	} {
		if got := nextRenewal(c.due, c.sent, iv); !got.Equal(c.want) {
			t.Errorf("%s: next renewal at %v after the send; want %v", c.name, got.Sub(c.sent), c.want.Sub(c.sent))
		}
	}
}

// Leases whose renewals one batch sends together keep their own phases: the
// next renewals are due as far apart as the leases were taken (not all at
// the batch's send time, which merges a Locker's leases into ever larger
// bursts of renewals under load).
func TestBatchedRenewalsKeepTheirPhases(t *testing.T) {
	fc := clock.NewFake()
	m, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	mem := &batchCounter{Store: m}
	lk, err := New(mem, WithClock(fc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Close(context.Background()) })
	ctx := context.Background()
	const ttl = 3 * time.Second
	a, err := lk.TryAcquire(ctx, "a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	fc.Advance(30 * time.Millisecond) // within the batch window
	b, err := lk.TryAcquire(ctx, "b", ttl)
	if err != nil {
		t.Fatal(err)
	}
	fc.Advance(ttl/3 - 30*time.Millisecond) // a's renewal is due; b's is pulled into its batch
	next := func(l *Lease) time.Time {
		lk.sched.mu.Lock()
		defer lk.sched.mu.Unlock()
		if l.sched == nil || l.sched.index < 0 {
			return time.Time{}
		}
		return l.sched.at
	}
	deadline := time.Now().Add(10 * time.Second)
	for mem.Batches() < 1 || next(a).IsZero() || next(b).IsZero() || !next(a).After(fc.Now()) || !next(b).After(fc.Now()) {
		if time.Now().After(deadline) {
			t.Fatalf("no batch renewal (%d batches)", mem.Batches())
		}
		time.Sleep(time.Millisecond)
	}
	if d := next(b).Sub(next(a)); d != 30*time.Millisecond {
		t.Fatalf("after one batch the next renewals are %v apart; want 30ms, as the leases were taken", d)
	}
}

// The renewal timer is left where it is when the lease it was armed for is
// released (moving a runtime timer on every acquire and release costs more
// than an early firing): it then fires before any renewal is due, renews
// nothing, and arms itself for the next due renewal, which runs on time.
func TestRenewalTimerFiringEarlyRenewsOnTime(t *testing.T) {
	fc, _, lk := fakeLocker(t)
	ctx := context.Background()
	const ttl = 3 * time.Second
	a, err := lk.TryAcquire(ctx, "a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	fc.Advance(400 * time.Millisecond)
	b, err := lk.TryAcquire(ctx, "b", ttl)
	if err != nil {
		t.Fatal(err)
	}
	armedAt := func() time.Time {
		lk.sched.mu.Lock()
		defer lk.sched.mu.Unlock()
		return lk.sched.armed
	}
	armed := armedAt()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := armedAt(); !got.Equal(armed) {
		t.Fatalf("releasing a moved the renewal timer from %v to %v", armed, got)
	}
	bDeadline := b.Deadline()
	// a's renewal time: the timer fires, finds nothing due, and arms for b's.
	fc.Advance(ttl/3 - 400*time.Millisecond)
	waitFor(t, "the timer was not armed for b's renewal after firing early", func() bool { return armedAt().Equal(fc.Now().Add(400 * time.Millisecond)) })
	if !b.Deadline().Equal(bDeadline) {
		t.Fatal("b was renewed before its renewal was due")
	}
	// b's renewal time: b is renewed.
	fc.Advance(400 * time.Millisecond)
	waitFor(t, "b was not renewed when its renewal was due", func() bool { return b.Deadline().After(bDeadline) })
}

// ctxStore records the context of each Acquire.
type ctxStore struct {
	*memory.Store
	last context.Context
}

func (s *ctxStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (Record, error) {
	s.last = ctx
	return s.Store.Acquire(ctx, resource, owner, ttl)
}

// A store call is bounded by the lease's time, with the caller's context
// as it is when its deadline comes first (no second timer), and with a
// derived one otherwise.
func TestStoreCallBound(t *testing.T) {
	st := &ctxStore{Store: memory.New()}
	lk, err := New(st)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close(context.Background())
	const ttl = 10 * time.Second
	short, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l, err := lk.TryAcquire(short, "short", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if st.last != short {
		t.Fatal("a caller's deadline before the lease's bound: the store got a derived context")
	}
	long, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	before := time.Now()
	l2, err := lk.TryAcquire(long, "long", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(context.Background())
	dl, ok := st.last.Deadline()
	if st.last == long || !ok || dl.After(before.Add(ttl)) {
		t.Fatalf("a caller's deadline after the lease's bound: the store's context ends at %v (ok %v), want by %v", dl, ok, before.Add(ttl))
	}
	l3, err := lk.TryAcquire(context.Background(), "none", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer l3.Release(context.Background())
	if _, ok := st.last.Deadline(); !ok {
		t.Fatal("no caller deadline: the store's context has none")
	}
}

// slowReleaseStore applies a release, then holds its answer until the
// call's context ends and fails as a driver that does not classify its own
// timeouts would (a plain error, not UnknownOutcome), once.
type slowReleaseStore struct {
	*memory.Store
	slow atomic.Bool
}

func (s *slowReleaseStore) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := s.Store.Release(ctx, resource, owner, token); err != nil {
		return err
	}
	if s.slow.Swap(false) {
		<-ctx.Done()
		return errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout")
	}
	return nil
}

// A release attempt cut short by its bound may have been applied, whatever
// the store's error says: on a caller's context that can end, the first
// attempt runs in the caller and the next, in the background, finds the
// grant gone, so Release reports it freed; on one that cannot end, the
// attempt's bound is the lease's whole time in the store and no attempt
// follows, so Release reports the outcome unknown, not a plain failure
// (before, releaseUntil took the cut-short attempt's error as a definite
// failure).
func TestReleaseCutShortByItsBound(t *testing.T) {
	for name, ctx := range map[string]context.Context{
		"cancelable": func() context.Context {
			c, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			return c
		}(),
		"background": context.Background(),
	} {
		t.Run(name, func(t *testing.T) {
			st := &slowReleaseStore{Store: memory.New()}
			lk, err := New(st)
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Close(context.Background())
			l, err := lk.TryAcquire(ctx, "r", 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			st.slow.Store(true)
			err = l.Release(ctx)
			switch {
			case name == "cancelable" && err != nil:
				t.Fatalf("a release applied whose answer was cut short by its bound: %v; want nil (the next attempt finds the grant gone)", err)
			case name == "background" && !errors.Is(err, ErrUnknownOutcome):
				t.Fatalf("a release applied whose answer was cut short by its bound: %v; want ErrUnknownOutcome", err)
			}
		})
	}
}

// A Locker that held no lease while the machine was suspended renews its
// next lease on time: the renewal timer armed for a lease released before
// the suspend fires late by the time suspended (Go's timers stop while the
// machine sleeps), and no suspend watch runs while no lease is held, so the
// timer must not be trusted for a later lease (adversarial review).
func TestRenewalOnTimeAfterASuspendWithNoLeaseHeld(t *testing.T) {
	fc, _, lk := fakeLocker(t)
	ctx := context.Background()
	a, err := lk.TryAcquire(ctx, "a", 30*time.Second) // renewal due in 10 s
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The suspend watch stops at its first tick with no lease held.
	waitFor(t, "the suspend watch did not stop", func() bool {
		lk.mu.Lock()
		defer lk.mu.Unlock()
		return !lk.watching
	})
	fc.Suspend(20 * time.Second) // a's timer now fires 30 s from now
	b, err := lk.TryAcquire(ctx, "b", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d0 := b.Deadline()
	fc.Advance(time.Second) // b's renewal is due
	waitFor(t, "b was not renewed when its renewal was due", func() bool { return !b.Deadline().Equal(d0) || b.Err() != nil })
	if err := b.Err(); err != nil {
		t.Fatalf("healthy lease lost: %v", err)
	}
}

// waitFor polls cond (on the real clock: the Locker's goroutines run
// while a fake clock stands still) and fails the test as what when it has
// not held within 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	limit := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(limit) {
			t.Fatal(what)
		}
		time.Sleep(time.Millisecond)
	}
}

// fakeLocker returns a Locker on a memory store, both on a fake clock; the
// Locker is closed when the test ends.
func fakeLocker(t *testing.T) (*clock.Fake, *memory.Store, *Locker) {
	t.Helper()
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	lk, err := New(mem, WithClock(fc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Close(context.Background()) })
	return fc, mem, lk
}

// ReleaseAfter on the lease's own context keeps the lease for d, as
// Release on it frees it (contract rule 4): ending the lease cancels that
// context, which must not cut the store call short (adversarial review:
// it always failed).
func TestReleaseAfterOnTheLeasesOwnContext(t *testing.T) {
	mem := memory.New()
	lk, err := New(&slowKeepStore{mem})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close(context.Background())
	l, err := lk.TryAcquire(context.Background(), "r", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseAfter(l.Context(), time.Minute); err != nil {
		t.Fatalf("ReleaseAfter(lease.Context()): %v", err)
	}
	rec, err := mem.Get(context.Background(), "r")
	if err != nil || rec.Owner != naming.KeptOwner(l.Owner()) {
		t.Fatalf("the store has %+v (%v); want it kept by %q", rec, err, naming.KeptOwner(l.Owner()))
	}
}

// slowKeepStore's Keep takes a round trip's time, during which its context
// may be cancelled, as a network store's would.
type slowKeepStore struct{ *memory.Store }

func (s *slowKeepStore) Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(50 * time.Millisecond):
	}
	return s.Store.Keep(ctx, resource, owner, token, keeper, ttl)
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
