package election_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure/clock"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/election"
	"github.com/tenure-go/tenure/store/cassandra"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

// minTTLStore is a store with a minimum TTL, checked up front as
// driver.TTLChecker (as Cassandra's whole seconds from 1 s).
type minTTLStore struct {
	driver.Store
	min time.Duration
}

func (s minTTLStore) CheckTTL(ttl time.Duration) error {
	if ttl < s.min {
		return fmt.Errorf("%w: %v is below the store's minimum of %v", tenure.ErrInvalidTTL, ttl, s.min)
	}
	return nil
}

// countingStore counts the calls that reach the store.
func countingStore(s driver.Store) (*storetest.Faulty, func() int) {
	f := storetest.NewFaulty(s)
	var mu sync.Mutex
	n := 0
	f.OnCall(func(string) { mu.Lock(); n++; mu.Unlock() })
	return f, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// Every configuration the Locker would refuse at Run's first attempt is
// refused by New, with the reason, before any store call. Before, New
// accepted each of them, and Run returned the error on its first attempt
// (silently, under a Participant).
func TestNewRejectsWhatTheLockerWould(t *testing.T) {
	for _, tc := range []struct {
		name  string
		min   time.Duration // the store's minimum TTL, 0 for none
		cfg   election.Config
		opts  []tenure.Option // the Locker's
		cause string          // in the error
	}{
		{"renew interval above TTL·(1−ρ)", 0, election.Config{TTL: time.Second}, []tenure.Option{tenure.WithRenewInterval(995 * time.Millisecond)}, "TTL·(1−ρ) = 990ms"},
		{"renew interval at TTL·(1−ρ)", 0, election.Config{TTL: time.Second}, []tenure.Option{tenure.WithRenewInterval(990 * time.Millisecond)}, "TTL·(1−ρ)"},
		{"renew interval far above TTL·(1−ρ)", 0, election.Config{TTL: 10 * time.Second}, []tenure.Option{tenure.WithRenewInterval(9950 * time.Millisecond)}, "TTL·(1−ρ) = 9.9s"},
		{"renew interval above TTL·(1−ρ) with the Locker's ρ", 0, election.Config{TTL: time.Second}, []tenure.Option{tenure.WithRenewInterval(850 * time.Millisecond), tenure.WithDriftBound(0.2)}, "TTL·(1−ρ) = 800ms"},
		{"TTL too short for the default renew interval", 0, election.Config{TTL: 2 * time.Nanosecond}, nil, "too short to be renewed"},
		{"TTL below the store's minimum", time.Second, election.Config{TTL: 500 * time.Millisecond}, nil, "below the store's minimum of 1s"},
		{"default TTL below the store's minimum", time.Minute, election.Config{}, nil, "below the store's minimum of 1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s driver.Store = memory.New()
			if tc.min > 0 {
				s = minTTLStore{s, tc.min}
			}
			f, calls := countingStore(s)
			if tc.min > 0 {
				s = minTTLStore{f, tc.min}
			} else {
				s = f
			}
			cfg := tc.cfg
			cfg.Resource = "e"
			c, err := election.New(s, cfg, tc.opts...)
			if err == nil {
				// What the old code did: accepted, then Run failed.
				runErr := c.Run(ctxT(t))
				t.Fatalf("accepted; Run then returned %v", runErr)
			}
			if !errors.Is(err, tenure.ErrInvalidTTL) || !strings.Contains(err.Error(), tc.cause) {
				t.Fatalf("error %q; want ErrInvalidTTL saying %q", err, tc.cause)
			}
			if n := calls(); n != 0 {
				t.Fatalf("%d store calls before the configuration was refused", n)
			}
		})
	}
	// Close to the limit is accepted, and leads.
	ev := newEvents()
	c, err := election.New(memory.New(), ev.config(election.Config{Resource: "e", TTL: 10 * time.Second}), tenure.WithRenewInterval(9800*time.Millisecond))
	if err != nil {
		t.Fatalf("renew interval 9.8s with TTL 10s: %v", err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	go c.Run(ctx)
	recv(t, ev.started, "leading")
}

// The same for a Participant, in Jaeger's terms: a leader interval that is
// not shorter than the follower interval (the TTL) less ρ, or a follower
// interval below the store's minimum TTL. Leader 995 ms with follower 1 s
// was accepted and the participant never led: the Locker refused the TTL at
// the first attempt, Run returned ErrInvalidTTL, and Start's goroutine
// dropped it.
func TestNewParticipantRejectsWhatCouldNeverLead(t *testing.T) {
	for _, tc := range []struct {
		name             string
		min              time.Duration
		leader, follower time.Duration
		cause            string
	}{
		{"leader 995ms, follower 1s", 0, 995 * time.Millisecond, time.Second, "TTL·(1−ρ) = 990ms"},
		{"leader 990ms, follower 1s", 0, 990 * time.Millisecond, time.Second, "TTL·(1−ρ) = 990ms"},
		{"leader 59.5s, follower 60s (Jaeger's default follower)", 0, 59500 * time.Millisecond, 0, "TTL·(1−ρ) = 59.4s"},
		{"leader equal to follower", 0, time.Second, time.Second, "TTL·(1−ρ)"},
		{"leader above follower", 0, time.Minute, time.Second, "TTL·(1−ρ)"},
		{"follower below the store's minimum TTL", time.Second, 100 * time.Millisecond, 500 * time.Millisecond, "below the store's minimum of 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, calls := countingStore(memory.New())
			var s driver.Store = f
			if tc.min > 0 {
				s = minTTLStore{f, tc.min}
			}
			p, err := election.NewParticipant(s, "sampling", election.ParticipantOptions{LeaderLeaseRefreshInterval: tc.leader, FollowerLeaseRefreshInterval: tc.follower})
			if err == nil {
				p.Start()
				time.Sleep(100 * time.Millisecond)
				lead := p.IsLeader()
				p.Close()
				t.Fatalf("accepted (leading 100 ms after Start: %v)", lead)
			}
			if !errors.Is(err, tenure.ErrInvalidTTL) || !strings.Contains(err.Error(), tc.cause) || !strings.Contains(err.Error(), "LeaderLeaseRefreshInterval") {
				t.Fatalf("error %q; want ErrInvalidTTL naming the options and saying %q", err, tc.cause)
			}
			if n := calls(); n != 0 {
				t.Fatalf("%d store calls before the options were refused", n)
			}
		})
	}
	for _, bad := range []string{"", "a\x00"} {
		if _, err := election.NewParticipant(memory.New(), bad, election.ParticipantOptions{}); !errors.Is(err, tenure.ErrInvalidResource) {
			t.Errorf("resource %q: %v; want ErrInvalidResource", bad, err)
		}
	}
	// Jaeger's defaults (5 s, 60 s) are accepted.
	if _, err := election.NewParticipant(memory.New(), "sampling", election.ParticipantOptions{}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// lateRejectStore accepts any TTL up front (it is no driver.TTLChecker) but
// its Acquire refuses TTLs below a second: a configuration error that only
// the first campaign attempt finds.
type lateRejectStore struct{ driver.Store }

func (s lateRejectStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if ttl < time.Second {
		return driver.Record{}, fmt.Errorf("%w: %v is below this store's minimum of 1s", tenure.ErrInvalidTTL, ttl)
	}
	return s.Store.Acquire(ctx, resource, owner, ttl)
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// An error that stops a participant's loop is logged through the options'
// logger at level Error, and returned by Err and Close. Before, Start's
// goroutine dropped it.
func TestParticipantReportsWhatStopsItsLoop(t *testing.T) {
	var logs syncBuffer
	p, err := election.NewParticipant(lateRejectStore{memory.New()}, "sampling", election.ParticipantOptions{
		LeaderLeaseRefreshInterval:   100 * time.Millisecond,
		FollowerLeaseRefreshInterval: 500 * time.Millisecond,
		Logger:                       slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return p.Err() != nil }, "the loop's error")
	if err := p.Err(); !errors.Is(err, tenure.ErrInvalidTTL) || !strings.Contains(err.Error(), "will not lead") {
		t.Fatalf("Err() = %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "below this store's minimum") {
		t.Fatalf("logs: %q", l)
	}
	if p.IsLeader() {
		t.Fatal("leading")
	}
	if err := p.Start(); err == nil {
		t.Fatal("Start after the loop stopped: accepted")
	}
	if err := p.Close(); !errors.Is(err, tenure.ErrInvalidTTL) {
		t.Fatalf("Close() = %v; want the loop's error", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close() = %v", err)
	}
	// Start after Close is refused too.
	q, _ := election.NewParticipant(memory.New(), "sampling", election.ParticipantOptions{})
	q.Close()
	if err := q.Start(); err == nil {
		t.Fatal("Start after Close: accepted")
	}
}

// A participant closed while it runs normally returns nil from Close and
// logs no error.
func TestParticipantCloseIsQuiet(t *testing.T) {
	var logs syncBuffer
	p, _ := election.NewParticipant(memory.New(), "sampling", election.ParticipantOptions{
		LeaderLeaseRefreshInterval: 100 * time.Millisecond, FollowerLeaseRefreshInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	p.Start()
	waitFor(t, p.IsLeader, "leads")
	if p.Lease() == nil || p.Lease().Token() == 0 {
		t.Fatal("no lease with a token while leading")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err != nil {
		t.Fatalf("Err after Close: %v", err)
	}
	if l := logs.String(); strings.Contains(l, "level=ERROR") {
		t.Fatalf("logs: %q", l)
	}
}

// Resign from inside OnNewLeader or OnStoppedLeading, which run in Run's
// goroutine, returns ErrResignInCallback at once, and Run then returns nil
// after ending the term and releasing the lease. Before, Resign waited for
// Run, which waited for the callback: a deadlock, until Resign's context
// ended.
func TestResignFromCallbacks(t *testing.T) {
	resignIn := func(c **election.Candidate, errs chan<- error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		errs <- (*c).Resign(ctx)
	}

	t.Run("OnNewLeader of a new leader", func(t *testing.T) {
		mem := memory.New()
		var c *election.Candidate
		errs := make(chan error, 4)
		stopped := make(chan struct{}, 4)
		c, _ = election.New(mem, election.Config{Resource: "e", Identity: "a", TTL: time.Minute,
			OnNewLeader:      func(string) { resignIn(&c, errs) },
			OnStoppedLeading: func() { stopped <- struct{}{} },
		})
		runErr := make(chan error, 1)
		go func() { runErr <- c.Run(ctxT(t)) }()
		if err := recv(t, errs, "Resign's result"); !errors.Is(err, election.ErrResignInCallback) {
			t.Fatalf("Resign in OnNewLeader: %v; want ErrResignInCallback", err)
		}
		if err := recv(t, runErr, "Run's return"); err != nil {
			t.Fatalf("Run: %v", err)
		}
		recv(t, stopped, "OnStoppedLeading")
		none(t, stopped, "a second OnStoppedLeading")
		if _, err := mem.Get(context.Background(), "e"); !errors.Is(err, tenure.ErrNotHeld) {
			t.Fatalf("lease after Run returned: %v; want released", err)
		}
	})

	t.Run("OnNewLeader of a follower", func(t *testing.T) {
		mem := memory.New()
		evA := newEvents()
		a, _ := election.New(mem, evA.config(election.Config{Resource: "e", Identity: "a", TTL: time.Minute}))
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		go a.Run(ctx)
		recv(t, evA.started, "a leads")
		var b *election.Candidate
		errs := make(chan error, 4)
		b, _ = election.New(mem, election.Config{Resource: "e", Identity: "b", TTL: time.Minute, RetryPeriod: 10 * time.Millisecond,
			OnNewLeader: func(string) { resignIn(&b, errs) },
		})
		runErr := make(chan error, 1)
		go func() { runErr <- b.Run(ctxT(t)) }()
		if err := recv(t, errs, "Resign's result"); !errors.Is(err, election.ErrResignInCallback) {
			t.Fatalf("Resign in OnNewLeader: %v; want ErrResignInCallback", err)
		}
		if err := recv(t, runErr, "Run's return"); err != nil {
			t.Fatalf("Run: %v", err)
		}
	})

	t.Run("OnStoppedLeading after a loss", func(t *testing.T) {
		fc := clock.NewFake()
		mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
		f := storetest.NewFaulty(mem)
		var c *election.Candidate
		errs := make(chan error, 4)
		started := make(chan struct{}, 4)
		c, _ = election.New(f, election.Config{Resource: "e", TTL: 30 * time.Second,
			OnStartedLeading: func(context.Context) { started <- struct{}{} },
			OnStoppedLeading: func() { resignIn(&c, errs) },
		}, tenure.WithClock(fc))
		runErr := make(chan error, 1)
		go func() { runErr <- c.Run(ctxT(t)) }()
		recv(t, started, "leading")
		f.Set(storetest.OpRenew, storetest.Fail, 0)
		fc.Advance(time.Minute) // past the deadline: the term ends by loss
		if err := recv(t, errs, "Resign's result"); !errors.Is(err, election.ErrResignInCallback) {
			t.Fatalf("Resign in OnStoppedLeading: %v; want ErrResignInCallback", err)
		}
		if err := recv(t, runErr, "Run's return"); err != nil {
			t.Fatalf("Run: %v; want nil (resigned) instead of campaigning on", err)
		}
		none(t, started, "a new term after resigning")
	})

	t.Run("OnStartedLeading with the term's context", func(t *testing.T) {
		// Run releases the lease only once OnStartedLeading has returned,
		// so Resign called there with the term's context does not wait for
		// Run; the callback goes on, and the lease is released after it
		// returned.
		mem := memory.New()
		var c *election.Candidate
		errs := make(chan error, 4)
		heldAfterResign := make(chan bool, 1)
		c, _ = election.New(mem, election.Config{Resource: "e", TTL: time.Minute,
			OnStartedLeading: func(term context.Context) {
				errs <- c.Resign(term)
				<-term.Done()
				_, err := mem.Get(context.Background(), "e")
				heldAfterResign <- err == nil
			},
		})
		runErr := make(chan error, 1)
		go func() { runErr <- c.Run(ctxT(t)) }()
		if err := recv(t, errs, "Resign's result"); !errors.Is(err, election.ErrResignInCallback) {
			t.Fatalf("Resign(term) in OnStartedLeading: %v; want ErrResignInCallback", err)
		}
		if !recv(t, heldAfterResign, "the callback's check") {
			t.Fatal("the lease was released while OnStartedLeading still ran")
		}
		if err := recv(t, runErr, "Run's return"); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if _, err := mem.Get(context.Background(), "e"); !errors.Is(err, tenure.ErrNotHeld) {
			t.Fatalf("lease after Run returned: %v; want released", err)
		}
	})
}

// After a term ends by loss, the candidate lets the followers go first: it
// campaigns again one RetryPeriod (±10%) later, not at once (at once, a
// leader freed by an operator's forced release took the lease back before
// any follower looked, in 2 of 3 tries of a new user's), and that attempt
// reaches the store, rather than being refused by the Locker with the lost
// lease as its own (a HeldError naming this candidate).
func TestCampaignsAgainARetryPeriodAfterLoss(t *testing.T) {
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	f := storetest.NewFaulty(mem)
	ev := newEvents()
	c, _ := election.New(f, ev.config(election.Config{Resource: "e", TTL: 30 * time.Second, RetryPeriod: time.Hour}), tenure.WithClock(fc))
	go c.Run(ctxT(t))
	recv(t, ev.started, "leading")
	f.Set(storetest.OpRenew, storetest.Fail, 0)
	f.Set(storetest.OpRelease, storetest.Hang, 0) // the lost lease's release stays in flight
	before := f.Calls(storetest.OpAcquire)
	fc.Advance(time.Minute) // past the deadline: the term ends by loss
	recv(t, ev.stopped, "stopped leading")
	lost := fc.Now()
	// Step the clock until the next attempt reaches the store: it may come
	// no sooner than 0.9 RetryPeriod after the loss.
	for step := 0; f.Calls(storetest.OpAcquire) == before; step++ {
		if step == 400 {
			t.Fatalf("no campaign attempt %v after the loss", fc.Now().Sub(lost))
		}
		fc.Advance(time.Minute)
		time.Sleep(2 * time.Millisecond)
	}
	if after := fc.Now().Sub(lost); after < 54*time.Minute {
		t.Fatalf("the candidate campaigned again %v after the loss; want at least 0.9 RetryPeriod (54m)", after)
	}
}

// On a real Cassandra, whose store takes whole-second TTLs from 1 s on: a
// sub-second TTL or follower interval is refused by New and NewParticipant
// (before, both accepted it and the candidate never led).
func TestCassandraRejectsSubSecondTTL(t *testing.T) {
	url := cassandraURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := cassandra.OpenURL(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := "test/" + t.Name() + "/" + randHex(4)
	if _, err := election.New(s, election.Config{Resource: r, TTL: 500 * time.Millisecond}); !errors.Is(err, tenure.ErrInvalidTTL) || !strings.Contains(err.Error(), "minimum") {
		t.Fatalf("TTL 500ms: %v; want ErrInvalidTTL naming the store's minimum", err)
	}
	if _, err := election.NewParticipant(s, r, election.ParticipantOptions{LeaderLeaseRefreshInterval: 100 * time.Millisecond, FollowerLeaseRefreshInterval: 900 * time.Millisecond}); !errors.Is(err, tenure.ErrInvalidTTL) || !strings.Contains(err.Error(), "minimum") {
		t.Fatalf("follower 900ms: %v; want ErrInvalidTTL naming the store's minimum", err)
	}
	if _, err := election.NewParticipant(s, r, election.ParticipantOptions{LeaderLeaseRefreshInterval: 995 * time.Millisecond, FollowerLeaseRefreshInterval: time.Second}); !errors.Is(err, tenure.ErrInvalidTTL) {
		t.Fatalf("leader 995ms, follower 1s: %v; want ErrInvalidTTL", err)
	}
	// The smallest that can lead does lead.
	p, err := election.NewParticipant(s, r, election.ParticipantOptions{LeaderLeaseRefreshInterval: 300 * time.Millisecond, FollowerLeaseRefreshInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	defer p.Close()
	waitFor(t, p.IsLeader, "leads on Cassandra with follower interval 1s")
}

// jaegerElectionParticipant has the method set of Jaeger's
// ElectionParticipant (jaegertracing/jaeger,
// internal/leaderelection/leader_election.go): io.Closer, IsLeader, Start.
type jaegerElectionParticipant interface {
	io.Closer
	IsLeader() bool
	Start() error
}

// Participant satisfies Jaeger's participant interface, and NewParticipant
// has the shape of Jaeger's NewElectionParticipant(lock, resourceName,
// options) with the option names of ElectionParticipantOptions (Logger a
// *slog.Logger, where Jaeger's is a *zap.Logger); unlike Jaeger's, it also
// returns an error for options that could never lead.
var (
	_ jaegerElectionParticipant = (*election.Participant)(nil)
	_                           = func(store driver.Store, resourceName string, l *slog.Logger) (jaegerElectionParticipant, error) {
		return election.NewParticipant(store, resourceName, election.ParticipantOptions{
			LeaderLeaseRefreshInterval:   5 * time.Second,
			FollowerLeaseRefreshInterval: 60 * time.Second,
			Logger:                       l,
		})
	}
)
