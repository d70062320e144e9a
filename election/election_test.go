package election_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tenure-go/tenure/clock"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/election"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// events records a candidate's callbacks.
type events struct {
	started chan context.Context
	stopped chan struct{}
	leaders chan string
}

func newEvents() *events {
	return &events{started: make(chan context.Context, 16), stopped: make(chan struct{}, 16), leaders: make(chan string, 16)}
}

func (e *events) config(cfg election.Config) election.Config {
	cfg.OnStartedLeading = func(ctx context.Context) { e.started <- ctx }
	cfg.OnStoppedLeading = func() { e.stopped <- struct{}{} }
	cfg.OnNewLeader = func(id string) { e.leaders <- id }
	return cfg
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	panic("unreachable")
}

func none[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("unexpected %s: %v", what, v)
	default:
	}
}

func TestConfigValidation(t *testing.T) {
	s := memory.New()
	for name, cfg := range map[string]election.Config{
		"no resource":    {},
		"bad resource":   {Resource: "a\x00"},
		"negative TTL":   {Resource: "e", TTL: -time.Second},
		"bad identity":   {Resource: "e", Identity: "a#b"},
		"negative retry": {Resource: "e", RetryPeriod: -1},
	} {
		if _, err := election.New(s, cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, opts := range map[string][]tenure.Option{
		"renew not below TTL":    {tenure.WithRenewInterval(time.Second)},
		"negative renew":         {tenure.WithRenewInterval(-time.Second)},
		"drift bound above 0.5":  {tenure.WithDriftBound(0.5)},
		"bad owner id in opts":   {tenure.WithOwnerID("a#b")},
		"retry base above max":   {tenure.WithRetry(time.Second, time.Millisecond)},
		"no concurrent renewals": {tenure.WithMaxConcurrentRenewals(0)},
	} {
		if _, err := election.New(s, election.Config{Resource: "e", TTL: time.Second}, opts...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLeadAndLeave(t *testing.T) {
	mem := memory.New()
	ev := newEvents()
	c, err := election.New(mem, ev.config(election.Config{Resource: "e", Identity: "a", TTL: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	if id := recv(t, ev.leaders, "new leader"); id != "a" {
		t.Fatalf("OnNewLeader(%q), want a", id)
	}
	term := recv(t, ev.started, "started leading")
	if !c.IsLeader() || term.Err() != nil {
		t.Fatal("not leading after OnStartedLeading")
	}
	if l, err := c.Leader(ctx); err != nil || l.Identity != "a" || l.Value != "" || l.Owner == "" || l.Token == 0 {
		t.Fatalf("Leader = %+v, %v", l, err)
	}
	cancel()
	recv(t, ev.stopped, "stopped leading")
	if term.Err() == nil {
		t.Fatal("term context live after the term ended")
	}
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
	if c.IsLeader() {
		t.Fatal("still leader after leaving")
	}
	// Leaving released the lease.
	if _, err := mem.Get(context.Background(), "e"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("lease after leaving: %v", err)
	}
	if _, err := c.Leader(context.Background()); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader with nobody leading: %v", err)
	}
	none(t, ev.stopped, "second OnStoppedLeading")
}

// A leader whose renewals all fail stops leading no later than its
// deadline, once, and campaigns on.
func TestRenewalsFailStopsAtDeadline(t *testing.T) {
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	f := storetest.NewFaulty(mem)
	ev := newEvents()
	c, err := election.New(f, ev.config(election.Config{Resource: "e", TTL: 30 * time.Second}), tenure.WithClock(fc))
	if err != nil {
		t.Fatal(err)
	}
	go c.Run(ctxT(t))
	term := recv(t, ev.started, "started leading")
	deadline := c.Lease().Deadline()
	f.Set(storetest.OpRenew, storetest.Fail, 0)
	f.Set(storetest.OpAcquire, storetest.Fail, 0)
	fc.Advance(deadline.Sub(fc.Now()) - time.Millisecond)
	if !c.IsLeader() {
		t.Fatal("stopped leading before the deadline on transient errors")
	}
	fc.Advance(time.Millisecond)
	if c.IsLeader() {
		t.Fatal("still leader at the deadline")
	}
	if term.Err() == nil {
		t.Fatal("term context live at the deadline")
	}
	recv(t, ev.stopped, "stopped leading")
	fc.Advance(time.Minute)
	none(t, ev.stopped, "second OnStoppedLeading for one term")
}

// Resign ends the term and releases the lease: a follower takes over
// within its retry period, not after the TTL.
func TestResignHandsOver(t *testing.T) {
	mem := memory.New()
	evA, evB := newEvents(), newEvents()
	a, _ := election.New(mem, evA.config(election.Config{Resource: "e", Identity: "a", TTL: time.Minute, RetryPeriod: 50 * time.Millisecond}))
	b, _ := election.New(mem, evB.config(election.Config{Resource: "e", Identity: "b", TTL: time.Minute, RetryPeriod: 50 * time.Millisecond}))
	ctx := ctxT(t)
	go a.Run(ctx)
	recv(t, evA.started, "a leading")
	runB := make(chan error, 1)
	go func() { runB <- b.Run(ctx) }()
	if id := recv(t, evB.leaders, "b observes"); id != "a" {
		t.Fatalf("b observed %q", id)
	}
	start := time.Now()
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	recv(t, evA.stopped, "a stopped")
	recv(t, evB.started, "b leading")
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("takeover after resign took %v (TTL 1m)", took)
	}
	if id := recv(t, evB.leaders, "b observes itself"); id != "b" {
		t.Fatalf("b observed %q", id)
	}
	if a.IsLeader() || !b.IsLeader() {
		t.Fatal("wrong leader after resign")
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatalf("second Resign: %v", err)
	}
}

// The health check reports a candidate stuck in a term past its deadline.
func TestHealthHandler(t *testing.T) {
	fake := clock.NewFake()
	fc := &frozenTimers{fake}
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fake})
	ev := newEvents()
	c, _ := election.New(mem, ev.config(election.Config{Resource: "e", TTL: 30 * time.Second}), tenure.WithClock(fc))
	h := c.HealthHandler(time.Second)
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(); code != 200 || !strings.Contains(body, "follower") {
		t.Fatalf("before running: %d %q", code, body)
	}
	go c.Run(ctxT(t))
	recv(t, ev.started, "leading")
	if code, body := get(); code != 200 || !strings.Contains(body, "leader") {
		t.Fatalf("leading: %d %q", code, body)
	}
	// No timer fires and nothing checks the lease: the term does not end
	// by itself (a stuck process). The health check notices.
	fake.Advance(30*time.Second + 2*time.Second)
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "past its lease deadline") {
		t.Fatalf("stuck past the deadline: %d %q", code, body)
	}
	if c.IsLeader() {
		t.Fatal("IsLeader true past the deadline")
	}
}

// frozenTimers is a clock whose AfterFunc timers never fire.
type frozenTimers struct{ *clock.Fake }

func (c *frozenTimers) AfterFunc(time.Duration, func()) clock.Timer { return neverTimer{} }

type neverTimer struct{}

func (neverTimer) C() <-chan time.Time        { return nil }
func (neverTimer) Reset(d time.Duration) bool { return false }
func (neverTimer) Stop() bool                 { return false }

func TestParticipant(t *testing.T) {
	mem := memory.New()
	opts := election.ParticipantOptions{LeaderLeaseRefreshInterval: 100 * time.Millisecond, FollowerLeaseRefreshInterval: 2 * time.Second}
	a, err := election.NewParticipant(mem, "sampling", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err == nil {
		t.Fatal("second Start accepted")
	}
	waitFor(t, a.IsLeader, "a leads")
	b, _ := election.NewParticipant(mem, "sampling", opts)
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if a.IsLeader() {
		t.Fatal("closed participant still leader")
	}
	// a forfeited the lease: b takes over within its retry period (2 s),
	// well before the 2 s TTL plus a retry period.
	waitFor(t, b.IsLeader, "b takes over")
	b.Close()
	if _, err := election.NewParticipant(mem, "x", election.ParticipantOptions{LeaderLeaseRefreshInterval: time.Minute, FollowerLeaseRefreshInterval: time.Second}); err == nil {
		t.Fatal("leader interval above the TTL accepted")
	}
}

// Jaeger's participant keeps leading while every lock call fails; ours
// stops at the lease's deadline.
func TestParticipantStopsLeadingWhenRenewalsFail(t *testing.T) {
	mem := memory.New()
	f := storetest.NewFaulty(mem)
	p, _ := election.NewParticipant(f, "sampling", election.ParticipantOptions{LeaderLeaseRefreshInterval: 50 * time.Millisecond, FollowerLeaseRefreshInterval: 400 * time.Millisecond})
	p.Start()
	defer p.Close()
	waitFor(t, p.IsLeader, "leads")
	f.Set(storetest.OpRenew, storetest.Fail, 0)
	f.Set(storetest.OpAcquire, storetest.Fail, 0)
	waitFor(t, func() bool { return !p.IsLeader() }, "stops leading")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for limit := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatalf("timed out: %s", what)
		}
	}
}

func TestElectionMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	ev := newEvents()
	c, _ := election.New(memory.New(), ev.config(election.Config{Resource: "e", TTL: time.Minute}), tenure.WithMeterProvider(mp))
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	recv(t, ev.started, "leading")
	gauge := func() int64 {
		var rm metricdata.ResourceMetrics
		reader.Collect(context.Background(), &rm)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "tenure.election.leader" {
					return g.DataPoints[0].Value
				}
			}
		}
		return -1
	}
	if g := gauge(); g != 1 {
		t.Fatalf("leader gauge %d while leading", g)
	}
	cancel()
	<-done
	if g := gauge(); g != 0 {
		t.Fatalf("leader gauge %d after leaving", g)
	}
}

// Three candidates in one process over many terms: terms never overlap.
// (The multi-process version with SIGKILL runs in election/process_test.go.)
func TestOneLeaderAtATime(t *testing.T) {
	mem := memory.New()
	type term struct {
		who        int
		start, end time.Time
	}
	var mu sync.Mutex
	var terms []term
	startedTerms := 0
	ctx := ctxT(t)
	spawn := func(who int) *election.Candidate {
		c, _ := election.New(mem, election.Config{
			Resource: "e", TTL: 300 * time.Millisecond, RetryPeriod: 20 * time.Millisecond,
			OnStartedLeading: func(lctx context.Context) {
				// Work in small steps, each stamped before the term is
				// checked: a stamp followed by a successful check was taken
				// while the term was trusted.
				mu.Lock()
				startedTerms++
				mu.Unlock()
				tm := term{who: who}
				for {
					now := time.Now()
					if lctx.Err() != nil {
						break
					}
					if tm.start.IsZero() {
						tm.start = now
					}
					tm.end = now
					time.Sleep(100 * time.Microsecond)
				}
				mu.Lock()
				terms = append(terms, tm)
				mu.Unlock()
			},
		})
		go c.Run(ctx)
		return c
	}
	var cands []*election.Candidate
	for i := 0; i < 3; i++ {
		cands = append(cands, spawn(i))
	}
	// Leaders resign, and a new candidate joins in their place, many times.
	for k := 0; k < 10; k++ {
		var leader int
		waitFor(t, func() bool {
			for i, c := range cands {
				if c.IsLeader() {
					leader = i
					return true
				}
			}
			return false
		}, "a leader")
		cands[leader].Resign(ctx)
		cands[leader] = spawn(3 + k)
	}
	for _, c := range cands {
		c.Resign(ctx)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(terms) == startedTerms }, "every term's work to end")
	mu.Lock()
	defer mu.Unlock()
	if len(terms) < 10 {
		t.Fatalf("only %d terms", len(terms))
	}
	for i := range terms {
		for j := i + 1; j < len(terms); j++ {
			a, b := terms[i], terms[j]
			if a.start.IsZero() || b.start.IsZero() {
				continue // a term that ended before its work began
			}
			if a.start.Before(b.end) && b.start.Before(a.end) {
				t.Fatalf("terms overlap: %+v and %+v", a, b)
			}
		}
	}
}

// Close after Run frees what a campaign attempt interrupted in flight took:
// the attempt was applied by the store after Run's context ended, and the
// candidate's Locker resolves and frees it before Close returns.
func TestCloseFreesAnInterruptedAttempt(t *testing.T) {
	ctx := ctxT(t)
	mem := memory.New()
	faulty := storetest.NewFaulty(mem)
	entered, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	faulty.Set(storetest.OpAcquire, storetest.DropReply, 1) // applied, its answer lost
	faulty.AfterCall(func(op string) {
		if op == storetest.OpAcquire {
			once.Do(func() {
				close(entered)
				<-proceed // Run's context ends before the outcome is resolved
			})
		}
	})
	faulty.OnCall(func(op string) {
		if op == storetest.OpRelease {
			time.Sleep(100 * time.Millisecond) // a store some way off
		}
	})
	c, err := election.New(faulty, election.Config{Resource: "e", Identity: "a", TTL: time.Minute, RetryPeriod: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	campaign, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(campaign) }()
	<-entered
	stop()
	close(proceed)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if rec, err := mem.Get(ctx, "e"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("after Close the interrupted attempt's lease is held: %+v, %v", rec, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Run(rctx); !errors.Is(err, tenure.ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
}

// unusableStore's acquires fail as a store's that must be opened again (a
// SQLite file replaced under it) does.
type unusableStore struct{ *memory.Store }

func (unusableStore) Acquire(context.Context, string, string, time.Duration) (tenure.Record, error) {
	return tenure.Record{}, fmt.Errorf("test store: %w", tenure.ErrStoreUnusable)
}

// A candidate whose store must be opened again stops campaigning and
// returns the error, instead of retrying every RetryPeriod for ever (found
// by an adversarial review).
func TestRunReturnsWhenStoreUnusable(t *testing.T) {
	c, err := election.New(unusableStore{memory.New()}, election.Config{Resource: "e", TTL: time.Minute, RetryPeriod: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Run(ctx); !errors.Is(err, tenure.ErrStoreUnusable) || ctx.Err() != nil {
		t.Fatalf("Run on an unusable store: %v (context: %v); want ErrStoreUnusable before the context ends", err, ctx.Err())
	}
}
