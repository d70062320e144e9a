package election_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/election"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

// leaveWays are the three ways a leading candidate leaves: Resign, Run's
// context, Close. Each starts the leaving in the background and returns a
// channel with what Run returned and what the leaving call returned.
var leaveWays = map[string]func(c *election.Candidate, cancelRun context.CancelFunc) <-chan error{
	"Resign": func(c *election.Candidate, _ context.CancelFunc) <-chan error {
		ch := make(chan error, 1)
		go func() { ch <- c.Resign(context.Background()) }()
		return ch
	},
	"context": func(_ *election.Candidate, cancel context.CancelFunc) <-chan error {
		ch := make(chan error, 1)
		cancel()
		ch <- nil
		return ch
	},
	"Close": func(c *election.Candidate, _ context.CancelFunc) <-chan error {
		ch := make(chan error, 1)
		go func() { ch <- c.Close(context.Background()) }()
		return ch
	},
}

// wantRunErr is what Run returns after each way of leaving.
func wantRunErr(way string, err error) bool {
	switch way {
	case "Resign":
		return err == nil
	case "context":
		return errors.Is(err, context.Canceled)
	}
	return errors.Is(err, tenure.ErrClosed)
}

// renewedThrough advances fc by rounds renew intervals of a lease of ttl
// held by owner on resource, and checks after each that the store renewed
// it (the time left is back above two thirds of the TTL) and still has it
// with token.
func renewedThrough(t *testing.T, fc *clock.Fake, mem *memory.Store, resource, owner string, token uint64, ttl time.Duration, rounds int) {
	t.Helper()
	for range rounds {
		fc.Advance(ttl / 3)
		waitFor(t, func() bool {
			rec, err := mem.Get(context.Background(), resource)
			if err != nil {
				t.Fatalf("the lease is gone during the hand-over: %v", err)
			}
			if rec.Owner != owner || rec.Token != token {
				t.Fatalf("the lease changed hands during the hand-over: %+v", rec)
			}
			if rec.Remaining > ttl*2/3 {
				return true
			}
			// The Locker may have armed the renewal's timer only after the
			// advance (it does once the previous renewal's answer is in):
			// a timer due now fires at the next advance.
			fc.Advance(time.Millisecond)
			return false
		}, "a renewal during the hand-over")
	}
}

// A term that ends by Resign, Run's context or Close keeps its lease, and
// renews it, until OnStartedLeading has returned; only then is it
// released, and the other candidate leads. On the code before the
// hand-over, the lease was released as soon as the term's context was
// cancelled, and b led while a's callback still ran.
func TestHandOverWaitsForOnStartedLeading(t *testing.T) {
	for way, leave := range leaveWays {
		t.Run(way, func(t *testing.T) {
			fc := clock.NewFake()
			mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
			const ttl, retry = 3 * time.Second, 100 * time.Millisecond
			termEnded, proceed := make(chan struct{}), make(chan struct{})
			var aReturned, bStartedEarly atomic.Bool
			a, err := election.New(mem, election.Config{Resource: "e", Identity: "a", TTL: ttl, RetryPeriod: retry,
				HandOverTimeout: time.Hour,
				OnStartedLeading: func(term context.Context) {
					<-term.Done()
					close(termEnded)
					<-proceed // winding down
					aReturned.Store(true)
				},
			}, tenure.WithClock(fc))
			if err != nil {
				t.Fatal(err)
			}
			bStarted := make(chan struct{}, 1)
			b, _ := election.New(mem, election.Config{Resource: "e", Identity: "b", TTL: ttl, RetryPeriod: retry,
				OnStartedLeading: func(context.Context) {
					if !aReturned.Load() {
						bStartedEarly.Store(true)
					}
					bStarted <- struct{}{}
				},
			}, tenure.WithClock(fc))
			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			runA := make(chan error, 1)
			go func() { runA <- a.Run(ctx) }()
			waitFor(t, a.IsLeader, "a leads")
			go b.Run(ctxT(t))
			defer b.Resign(context.Background())
			lease := a.Lease()

			left := leave(a, cancel)
			<-termEnded
			if a.IsLeader() {
				t.Fatal("IsLeader true once the term's context was cancelled")
			}
			if a.Lease() != lease {
				t.Fatal("Lease() is not the term's lease during the hand-over")
			}
			rec := httptest.NewRecorder()
			a.HealthHandler(time.Second).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			if rec.Code != http.StatusOK || rec.Body.String() != "ok: stepping down\n" {
				t.Fatalf("health during the hand-over: %d %q", rec.Code, rec.Body.String())
			}
			// Several TTLs pass while the callback winds down: the lease is
			// renewed, and b, which tries every retry period, never leads.
			renewedThrough(t, fc, mem, "e", lease.Owner(), lease.Token(), ttl, 9)
			select {
			case <-bStarted:
				t.Fatal("b leads while a's OnStartedLeading still runs")
			case err := <-runA:
				t.Fatalf("a's Run returned (%v) while its OnStartedLeading still runs", err)
			default:
			}

			close(proceed)
			if err := recv(t, runA, "a's Run"); !wantRunErr(way, err) {
				t.Fatalf("a's Run returned %v after %s", err, way)
			}
			if err := recv(t, left, way); err != nil {
				t.Fatalf("%s: %v", way, err)
			}
			if _, err := mem.Get(context.Background(), "e"); !errors.Is(err, tenure.ErrNotHeld) {
				t.Fatalf("a's lease after a's Run returned: %v; want released", err)
			}
			for {
				fc.Advance(retry)
				select {
				case <-bStarted:
				case <-time.After(5 * time.Millisecond):
					continue
				}
				break
			}
			if bStartedEarly.Load() {
				t.Fatal("b started before a's OnStartedLeading returned")
			}
		})
	}
}

// An OnStartedLeading that has not returned within HandOverTimeout: the
// lease is no longer renewed and expires by its TTL; it is never released
// (no Release reaches the store), and Run returns.
func TestHandOverTimeoutLeavesTheLeaseToExpire(t *testing.T) {
	for way, leave := range leaveWays {
		t.Run(way, func(t *testing.T) {
			fc := clock.NewFake()
			mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
			f := storetest.NewFaulty(mem)
			// The bound is not a multiple of the renew interval (1 s), so
			// that no renewal is due when it passes.
			const ttl, bound = 3 * time.Second, 5500 * time.Millisecond
			stuck := make(chan struct{})
			defer close(stuck)
			a, _ := election.New(f, election.Config{Resource: "e", Identity: "a", TTL: ttl, HandOverTimeout: bound,
				OnStartedLeading: func(context.Context) { <-stuck },
			}, tenure.WithClock(fc))
			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			runA := make(chan error, 1)
			go func() { runA <- a.Run(ctx) }()
			waitFor(t, a.IsLeader, "a leads")
			lease := a.Lease()
			from := fc.Now()
			left := leave(a, cancel)
			waitFor(t, func() bool { return !a.IsLeader() }, "the term ends")
			renewedThrough(t, fc, mem, "e", lease.Owner(), lease.Token(), ttl, 4)
			// Past the bound, Run returns.
			var runErr error
			for done := false; !done; {
				select {
				case runErr = <-runA:
					done = true
				case <-time.After(5 * time.Millisecond):
					if fc.Now().Sub(from) > 2*bound {
						t.Fatalf("a's Run has not returned %v after the term ended", fc.Now().Sub(from))
					}
					fc.Advance(100 * time.Millisecond)
				}
			}
			if took := fc.Now().Sub(from); took < bound {
				t.Fatalf("a's Run returned %v after the term ended, before the bound %v", took, bound)
			}
			if !wantRunErr(way, runErr) {
				t.Fatalf("a's Run returned %v after %s", runErr, way)
			}
			if err := recv(t, left, way); err != nil {
				t.Fatalf("%s: %v", way, err)
			}
			if n := f.Calls(storetest.OpRelease); n != 0 {
				t.Fatalf("%d releases while OnStartedLeading still ran", n)
			}
			if rec, err := mem.Get(context.Background(), "e"); err != nil || rec.Token != lease.Token() {
				t.Fatalf("the lease after the bound: %+v, %v; want still held, to expire by its TTL", rec, err)
			}
			if lease.Err() == nil {
				t.Fatal("the lease is still live locally after the bound")
			}
			time.Sleep(10 * time.Millisecond) // a renewal sent before the bound passed lands
			renews := f.Calls(storetest.OpRenew)
			fc.Advance(ttl)
			time.Sleep(10 * time.Millisecond) // let a renewal, if one were scheduled, run
			if n := f.Calls(storetest.OpRenew); n != renews {
				t.Fatalf("%d renewals after the bound", n-renews)
			}
			if _, err := mem.Get(context.Background(), "e"); !errors.Is(err, tenure.ErrNotHeld) {
				t.Fatalf("the lease a TTL after the bound: %v; want expired", err)
			}
		})
	}
}

// Close whose context ends while OnStartedLeading still runs abandons the
// term's lease instead of releasing it, and returns.
func TestCloseBoundedAbandonsTheLease(t *testing.T) {
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	f := storetest.NewFaulty(mem)
	stuck := make(chan struct{})
	defer close(stuck)
	a, _ := election.New(f, election.Config{Resource: "e", TTL: time.Minute,
		OnStartedLeading: func(context.Context) { <-stuck },
	}, tenure.WithClock(fc))
	runA := make(chan error, 1)
	go func() { runA <- a.Run(ctxT(t)) }()
	waitFor(t, a.IsLeader, "a leads")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// The Locker's Close, given the ended context, may say so although
	// nothing is left running (it picks at random between its two ready
	// cases).
	if err := a.Close(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v", err)
	}
	if err := recv(t, runA, "Run"); !errors.Is(err, tenure.ErrClosed) {
		t.Fatalf("Run: %v; want ErrClosed", err)
	}
	if n := f.Calls(storetest.OpRelease); n != 0 {
		t.Fatalf("%d releases while OnStartedLeading still ran", n)
	}
	if _, err := mem.Get(context.Background(), "e"); err != nil {
		t.Fatalf("the lease after Close: %v; want held until its TTL", err)
	}
}

// A term lost while OnStartedLeading runs: the candidate calls
// OnStoppedLeading and campaigns again only once the callback returned.
func TestLossWaitsForOnStartedLeading(t *testing.T) {
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	f := storetest.NewFaulty(mem)
	proceed := make(chan struct{})
	stopped := make(chan struct{}, 4)
	var returned atomic.Bool
	c, _ := election.New(f, election.Config{Resource: "e", TTL: 3 * time.Second, RetryPeriod: 100 * time.Millisecond,
		HandOverTimeout: time.Hour,
		OnStartedLeading: func(term context.Context) {
			<-term.Done()
			<-proceed
			returned.Store(true)
		},
		OnStoppedLeading: func() {
			if !returned.Load() {
				t.Error("OnStoppedLeading before OnStartedLeading returned")
			}
			stopped <- struct{}{}
		},
	}, tenure.WithClock(fc))
	go c.Run(ctxT(t))
	defer c.Resign(context.Background())
	waitFor(t, c.IsLeader, "leads")
	f.Set(storetest.OpRenew, storetest.Fail, 0)
	fc.Advance(time.Minute) // past the deadline: lost
	waitFor(t, func() bool { return !c.IsLeader() }, "the term is lost")
	acquires := f.Calls(storetest.OpAcquire)
	for range 10 {
		fc.Advance(time.Second)
		time.Sleep(time.Millisecond)
	}
	none(t, stopped, "OnStoppedLeading while OnStartedLeading runs")
	if n := f.Calls(storetest.OpAcquire); n != acquires {
		t.Fatalf("%d campaign attempts while the lost term's OnStartedLeading still ran", n-acquires)
	}
	close(proceed)
	recv(t, stopped, "OnStoppedLeading")
	f.Heal()
	for limit := time.Now().Add(20 * time.Second); !c.IsLeader(); time.Sleep(time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatal("the candidate does not lead again after the callback returned")
		}
		fc.Advance(100 * time.Millisecond)
	}
}
