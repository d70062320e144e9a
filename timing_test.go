package tenure_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/store/memory"
)

// Locker.Timing is the one place that says when a lease is renewed and how
// long it is trusted: what it says is what a lease does.
func TestTimingIsWhatALeaseDoes(t *testing.T) {
	ctx := ctxT(t)
	for _, c := range []struct {
		name string
		opts []tenure.Option
		want tenure.Timing
	}{
		{"defaults", nil, tenure.Timing{TTL: 30 * time.Second, RenewEvery: 10 * time.Second, TrustedFor: 29700 * time.Millisecond,
			RenewWindow: 19700 * time.Millisecond, DriftBound: 0.01, RetryBase: 50 * time.Millisecond, RetryMax: time.Second}},
		{"options", []tenure.Option{tenure.WithRenewInterval(5 * time.Second), tenure.WithDriftBound(0.1), tenure.WithRetry(10*time.Millisecond, 2*time.Second)},
			tenure.Timing{TTL: 30 * time.Second, RenewEvery: 5 * time.Second, TrustedFor: 27 * time.Second,
				RenewWindow: 22 * time.Second, DriftBound: 0.1, RetryBase: 10 * time.Millisecond, RetryMax: 2 * time.Second}},
	} {
		fc := clock.NewFake()
		mem, _ := memory.Open(ctx, memory.Config{Clock: fc})
		lk, err := tenure.New(mem, append([]tenure.Option{tenure.WithClock(fc)}, c.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		got := lk.Timing(30 * time.Second)
		if got != c.want {
			t.Errorf("%s: Timing %+v, want %+v", c.name, got, c.want)
		}
		l, err := lk.TryAcquire(ctx, "r", got.TTL)
		if err != nil {
			t.Fatal(err)
		}
		if d := l.Deadline().Sub(fc.Now()); d != got.TrustedFor {
			t.Errorf("%s: a lease granted now is trusted for %v; Timing says %v", c.name, d, got.TrustedFor)
		}
		rec, _ := mem.Get(ctx, "r")
		fc.Advance(got.RenewEvery)
		waitFor(t, func() bool { return l.Deadline().Sub(fc.Now()) == got.TrustedFor }, c.name+": the renewal Timing announces")
		if r2, _ := mem.Get(ctx, "r"); r2.Token != rec.Token {
			t.Fatalf("%s: the lease changed hands", c.name)
		}
		lk.Close(ctx)
	}
}

// A TTL too short for any renewal to be confirmed in time (2 ms: the
// store's answer alone took 10 ms) is refused before any I/O, with the
// reason and the shortest TTL that works; that TTL is accepted.
func TestTooShortTTLRefusedUpFront(t *testing.T) {
	ctx := ctxT(t)
	mem := memory.New()
	for _, c := range []struct {
		opts     []tenure.Option
		short    time.Duration
		shortest string
	}{
		{nil, 2 * time.Millisecond, "16ms"},
		{nil, 15 * time.Millisecond, "16ms"},
		{[]tenure.Option{tenure.WithRenewInterval(time.Second)}, 1020 * time.Millisecond, "1.021s"},
	} {
		lk, err := tenure.New(mem, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		err = lk.CheckTTL(c.short)
		if !errors.Is(err, tenure.ErrInvalidTTL) || !strings.Contains(err.Error(), "at least "+c.shortest) {
			t.Fatalf("CheckTTL(%v): %v; want ErrInvalidTTL naming %s", c.short, err, c.shortest)
		}
		if _, err := lk.TryAcquire(ctx, "r", c.short); !errors.Is(err, tenure.ErrInvalidTTL) {
			t.Fatalf("TryAcquire with TTL %v: %v; want ErrInvalidTTL", c.short, err)
		}
		shortest, _ := time.ParseDuration(c.shortest)
		if err := lk.CheckTTL(shortest); err != nil {
			t.Fatalf("CheckTTL(%v), the shortest TTL the error names: %v", shortest, err)
		}
		if w := lk.Timing(shortest).RenewWindow; w < tenure.MinRenewWindow {
			t.Fatalf("TTL %v: renew window %v", shortest, w)
		}
	}
	if recs, _ := mem.List(context.Background(), ""); len(recs) != 0 {
		t.Fatalf("refused TTLs wrote %v", recs)
	}
}
