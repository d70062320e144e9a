package tenure

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenure-go/tenure/clock"
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
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	lk, err := New(mem, WithClock(fc))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close(context.Background())
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
