package election_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/election"
	"github.com/tenure-go/tenure/store/memory"
)

// The Locker's options given to New decide the leader's lease: it is
// trusted for TTL·(1−ρ) with the options' ρ, renewed at the options'
// interval on the options' clock, and the candidate logs through the
// options' logger.
func TestLockerOptionsGovernTheLease(t *testing.T) {
	const ttl, every, rho = 30 * time.Second, 2 * time.Second, 0.1
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	var logs syncBuffer
	ev := newEvents()
	start := fc.Now()
	c, err := election.New(mem, ev.config(election.Config{Resource: "e", Identity: "a", TTL: ttl}),
		tenure.WithClock(fc), tenure.WithRenewInterval(every), tenure.WithDriftBound(rho),
		tenure.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	go c.Run(ctxT(t))
	recv(t, ev.started, "leading")
	lease := c.Lease()
	// Acquired at start on the fake clock, which has not moved: trusted
	// for TTL·(1−0.1) = 27s, not the default TTL·(1−0.01) = 29.7s.
	if got, want := lease.Deadline().Sub(start), 27*time.Second; got != want {
		t.Fatalf("lease trusted for %v after its acquire was sent, want %v (ρ = %v)", got, want, rho)
	}
	if tm := lease.Timing(); tm.RenewEvery != every || tm.DriftBound != rho {
		t.Fatalf("lease timing %+v, want renewals every %v and ρ %v", tm, every, rho)
	}
	// Renewed every 2s (the default would be TTL/3 = 10s).
	for i := 1; i <= 3; i++ {
		fc.Advance(every)
		want := start.Add(time.Duration(i)*every + 27*time.Second)
		waitFor(t, func() bool { return !lease.Deadline().Before(want) }, "a renewal after the options' interval")
	}
	if !strings.Contains(logs.String(), "started leading") {
		t.Fatalf("the candidate did not log through the options' logger: %q", logs.String())
	}
}

// A tenure.WithOwnerID among the options is the default identity;
// Config.Identity wins over it.
func TestOwnerIDOptionIsTheDefaultIdentity(t *testing.T) {
	c, err := election.New(memory.New(), election.Config{Resource: "e", Value: "v"}, tenure.WithOwnerID("from-options"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Identity() != "from-options" || c.Value() != "v" {
		t.Fatalf("identity %q value %q, want from-options and v", c.Identity(), c.Value())
	}
	c, err = election.New(memory.New(), election.Config{Resource: "e", Identity: "from-config"}, tenure.WithOwnerID("from-options"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Identity() != "from-config" {
		t.Fatalf("identity %q, want from-config", c.Identity())
	}
}
