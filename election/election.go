// Package election elects one leader among candidates with a tenure lease:
// the candidate that holds the lease on the election's resource leads, for
// exactly as long as the lease can be trusted.
//
// The guarantees (docs/design.md, docs/election.md):
//   - A candidate leads only while its lease is trusted: IsLeader reads the
//     lease's local deadline itself, and the context given to
//     OnStartedLeading is the lease's context, cancelled the moment the lease
//     is lost (renewals refused, or no renewal confirmed before the deadline:
//     store unreachable, a long pause).
//   - OnStoppedLeading runs exactly once per term, after the term's context
//     was cancelled.
//   - Leaving (Run's context cancelled, or Resign) releases the lease, so
//     another candidate takes over within one retry period instead of
//     waiting out the TTL.
//
// Jaeger elects the host that computes adaptive sampling rates with a lease;
// Participant offers Jaeger's participant method set on top of Candidate,
// without Jaeger's flaw of staying leader while every renewal fails.
package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/tenure-go/tenure/clock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// Defaults, as in client-go's leader election, scaled to tenure's renewal
// every TTL/3.
const (
	DefaultTTL         = 15 * time.Second
	DefaultRetryPeriod = 2 * time.Second
)

// ErrNoLeader is returned by Leader when nobody leads. It wraps
// tenure.ErrNotHeld.
var ErrNoLeader = fmt.Errorf("election: no leader: %w", tenure.ErrNotHeld)

// Config configures a Candidate.
type Config struct {
	// Resource is the name of the election's lease. Required.
	Resource string
	// Identity is the candidate's readable id, shown to other candidates
	// (default tenure.DefaultOwnerID, "HOST:PID"). A random nonce is added,
	// so two candidates with one identity still exclude each other.
	Identity string
	// TTL is the lease's TTL (default 15 s). A leader that cannot renew
	// stops leading at most TTL·(1−ρ) after its last confirmed renewal was
	// sent; a leader that dies is replaced within TTL plus RetryPeriod.
	TTL time.Duration
	// RetryPeriod is how often a follower tries to acquire the lease
	// (default 2 s); attempts are spread with ±10% jitter.
	RetryPeriod time.Duration
	// RenewInterval is how often the leader renews (default TTL/3).
	RenewInterval time.Duration

	// OnStartedLeading is called in its own goroutine when the candidate
	// starts leading, with the lease's context: it is cancelled when the
	// term ends. It should return promptly after that.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading is called once at the end of each term, after the
	// term's context was cancelled, in Run's goroutine. It must not block;
	// it may call Resign, which then returns ErrResignInCallback without
	// waiting.
	OnStoppedLeading func()
	// OnNewLeader is called in Run's goroutine when the candidate observes a
	// different leader (including itself), with the leader's identity. It
	// must not block; it may call Resign, which then returns
	// ErrResignInCallback without waiting.
	OnNewLeader func(identity string)

	// ReleaseWatch makes the leader's lease watch its resource's release
	// notifications (tenure.WithReleaseWatch), on stores that send them: a
	// leadership freed or taken by someone else ends within a round trip of
	// the notification instead of at the next renewal.
	ReleaseWatch bool

	// Clock, Logger, MeterProvider and TracerProvider are passed to the
	// candidate's tenure.Locker; defaults as there.
	Clock          clock.Clock
	Logger         *slog.Logger
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Candidate campaigns for leadership. Its methods are safe for concurrent
// use; Run is called at most once at a time.
type Candidate struct {
	cfg   Config
	lk    *tenure.Locker
	clock clock.Clock
	log   *slog.Logger
	tel   *electionTelemetry

	mu      sync.Mutex
	lease   *tenure.Lease // the current term's lease, nil when following
	running bool
	exited  chan struct{} // closed when the running Run returns
	resign  chan struct{} // closed by Resign
	leader  string        // last observed leader's identity
	// inCallback is set while Run's goroutine runs OnStoppedLeading or
	// OnNewLeader: Resign must not wait for Run then.
	inCallback bool
}

// ErrResignInCallback is returned by Resign when Run's goroutine is running
// OnStoppedLeading or OnNewLeader at the time, as when Resign is called from
// one of them. The resignation took effect, but Resign cannot wait for Run
// to return, since Run waits for the callback: once the callback returns,
// Run ends a term in progress (cancelling its context, releasing its lease,
// calling OnStoppedLeading) and returns nil.
var ErrResignInCallback = errors.New("election: Resign called while Run runs OnStoppedLeading or OnNewLeader: the candidate resigns once the callback returns; Resign does not wait for Run")

// New returns a candidate whose lease lives in store. It validates the
// configuration without any I/O and returns an error wrapping
// tenure.ErrInvalidResource, tenure.ErrInvalidTTL or tenure.ErrInvalidOwner,
// with the reason, for every configuration that the Locker underneath would
// reject once Run starts: among them a TTL the store cannot keep (below 1 s
// on Cassandra, see driver.TTLChecker) and a RenewInterval (default TTL/3)
// that is not shorter than TTL·(1−ρ), ρ = tenure.DefaultDriftBound.
func New(store driver.Store, cfg Config) (*Candidate, error) {
	if err := driver.ValidateResource(cfg.Resource); err != nil {
		return nil, err
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	if err := driver.ValidateTTL(cfg.TTL); err != nil {
		return nil, err
	}
	if cfg.RetryPeriod < 0 || cfg.RenewInterval < 0 {
		return nil, errors.New("election: negative retry period or renew interval")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	opts := []tenure.Option{
		tenure.WithClock(cfg.Clock),
		tenure.WithLogger(cfg.Logger),
		tenure.WithRenewInterval(cfg.RenewInterval),
	}
	if cfg.Identity != "" {
		opts = append(opts, tenure.WithOwnerID(cfg.Identity))
	}
	if cfg.ReleaseWatch {
		opts = append(opts, tenure.WithReleaseWatch())
	}
	if cfg.MeterProvider != nil {
		opts = append(opts, tenure.WithMeterProvider(cfg.MeterProvider))
	}
	if cfg.TracerProvider != nil {
		opts = append(opts, tenure.WithTracerProvider(cfg.TracerProvider))
	}
	lk, err := tenure.New(store, opts...)
	if err != nil {
		return nil, err
	}
	// The Locker makes this check at every TryAcquire; Run would return its
	// error on the first attempt, so a configuration that fails it could
	// never lead. Make it now, before anything runs.
	if err := lk.CheckTTL(cfg.TTL); err != nil {
		return nil, ttlError(cfg, err)
	}
	return &Candidate{
		cfg:    cfg,
		lk:     lk,
		clock:  cfg.Clock,
		log:    cfg.Logger.With("election", cfg.Resource),
		tel:    newElectionTelemetry(cfg.MeterProvider, cfg.Resource),
		resign: make(chan struct{}),
	}, nil
}

// ttlError explains why the Locker refused cfg's TTL.
func ttlError(cfg Config, err error) error {
	renew := cfg.RenewInterval
	if renew == 0 {
		renew = cfg.TTL / 3
	}
	trust := time.Duration(float64(cfg.TTL) * (1 - tenure.DefaultDriftBound))
	switch {
	case renew <= 0:
		return fmt.Errorf("election: TTL %v is too short to be renewed (every TTL/3 = %v); the candidate could never lead: %w", cfg.TTL, renew, err)
	case renew >= trust:
		return fmt.Errorf("election: renew interval %v is not shorter than TTL·(1−ρ) = %v (TTL %v, ρ = %v), the time a lease is trusted after its renewal was sent: "+
			"a leader would lose every lease before renewing it, so the Locker refuses such a TTL and the candidate could never lead: %w",
			renew, trust, cfg.TTL, tenure.DefaultDriftBound, err)
	}
	return fmt.Errorf("election: TTL %v: %w", cfg.TTL, err)
}

// Close ends the candidate for good, for a program that is about to exit:
// it closes the candidate's Locker (tenure.Locker.Close), which releases a
// term's lease that is still held and waits, bounded by ctx, for the
// acquires and clean-ups in flight. Among them is a campaign attempt that
// ctx's end or Resign interrupted after it was sent: its outcome is
// resolved and what it may have taken is freed, so a candidate that exits
// does not hold the lease for a whole TTL. Call it after Run has returned;
// Run returns tenure.ErrClosed afterwards. It is safe to call more than
// once.
func (c *Candidate) Close(ctx context.Context) error { return c.lk.Close(ctx) }

// Identity returns the candidate's readable id.
func (c *Candidate) Identity() string { return tenure.OwnerID(c.lk.Owner()) }

// Owner returns the full owner string the candidate writes to the store.
func (c *Candidate) Owner() string { return c.lk.Owner() }

// Run campaigns until ctx ends or Resign is called: it tries to acquire the
// lease every RetryPeriod while another candidate leads, leads while it
// holds the lease, and campaigns again one RetryPeriod (±10%) after a term
// ends by loss, so that the followers go first. It returns
// nil after Resign, and ctx's cause after ctx ends; in both cases a term in
// progress ends first and its lease is released. Invalid configuration
// errors (such as a TTL the store rejects), a closed Locker and a store that
// must be opened again (tenure.ErrStoreUnusable: the SQLite store's file
// was replaced) are returned at once; other store errors are logged and
// retried every RetryPeriod.
func (c *Candidate) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return errors.New("election: Run is already running")
	}
	c.running = true
	c.exited = make(chan struct{})
	exited, resign := c.exited, c.resign
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
		close(exited)
	}()

	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-resign:
			return nil
		default:
		}
		lease, err := c.lk.TryAcquire(ctx, c.cfg.Resource, c.cfg.TTL)
		var held *tenure.HeldError
		switch {
		case err == nil:
			if done := c.lead(ctx, lease, resign); done {
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				return nil
			}
			// Lost: let the followers go first. A loss says something was
			// wrong with this term (renewals that failed, a forced
			// release by an operator who wants the leadership moved), and
			// followers try every RetryPeriod: campaigning at once would
			// take a freed lease back before any of them looked. The next
			// attempt reaches the store, and names the leader if one took
			// over.
		case errors.As(err, &held):
			if !c.lk.Owns(held.Holder.Owner) { // not our own earlier grant still being freed
				c.observe(tenure.OwnerID(held.Holder.Owner))
			}
		case errors.Is(err, tenure.ErrInvalidTTL), errors.Is(err, tenure.ErrInvalidResource), errors.Is(err, tenure.ErrClosed),
			errors.Is(err, tenure.ErrStoreUnusable):
			return err
		case ctx.Err() != nil:
			return context.Cause(ctx)
		default:
			c.log.Warn("campaign attempt failed", "err", err)
		}
		if !c.sleep(ctx, resign, c.jitter()) {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return nil
		}
	}
}

// jitter spreads follower attempts over RetryPeriod ±10%.
func (c *Candidate) jitter() time.Duration {
	p := c.cfg.RetryPeriod
	return p - p/10 + time.Duration(rand.Int64N(int64(p/5)+1))
}

func (c *Candidate) sleep(ctx context.Context, resign <-chan struct{}, d time.Duration) bool {
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	case <-resign:
		return false
	}
}

// lead runs one term. It reports whether the candidate is leaving (ctx
// ended or Resign), in which case it released the lease.
func (c *Candidate) lead(ctx context.Context, lease *tenure.Lease, resign <-chan struct{}) (leaving bool) {
	c.mu.Lock()
	c.lease = lease
	c.mu.Unlock()
	c.log.Info("started leading", "token", lease.Token())
	c.tel.transition(true)
	c.observe(c.Identity())
	if f := c.cfg.OnStartedLeading; f != nil {
		go f(lease.Context())
	}
	select {
	case <-lease.Done():
		c.log.Warn("stopped leading: lease lost", "cause", context.Cause(lease.Context()))
	case <-ctx.Done():
		leaving = true
	case <-resign:
		leaving = true
	}
	if leaving {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tenure.DefaultReleaseTimeout)
		if err := lease.Release(rctx); err != nil {
			c.log.Warn("leaving: release failed", "err", err)
		} else {
			c.log.Info("stopped leading: released the lease")
		}
		cancel()
	}
	c.mu.Lock()
	c.lease = nil
	c.mu.Unlock()
	c.tel.transition(false)
	if f := c.cfg.OnStoppedLeading; f != nil {
		c.callback(f)
	}
	return leaving
}

func (c *Candidate) observe(identity string) {
	c.mu.Lock()
	changed := identity != c.leader
	c.leader = identity
	c.mu.Unlock()
	if changed {
		c.log.Info("new leader observed", "leader", identity)
		if f := c.cfg.OnNewLeader; f != nil {
			c.callback(func() { f(identity) })
		}
	}
}

// callback runs f, a callback of Run's goroutine, marked so that Resign
// called meanwhile does not wait for Run.
func (c *Candidate) callback(f func()) {
	c.mu.Lock()
	c.inCallback = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inCallback = false
		c.mu.Unlock()
	}()
	f()
}

// IsLeader reports whether the candidate leads now: it holds the lease and
// the lease's deadline has not passed (checked against the clock on every
// call, so it is false at once after a pause past the deadline).
func (c *Candidate) IsLeader() bool {
	c.mu.Lock()
	l := c.lease
	c.mu.Unlock()
	return l != nil && l.Err() == nil
}

// Lease returns the current term's lease, or nil when not leading.
func (c *Candidate) Lease() *tenure.Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lease
}

// Leader returns the identity of the current leader as the store sees it,
// or an error wrapping ErrNoLeader when nobody leads.
func (c *Candidate) Leader(ctx context.Context) (string, error) {
	rec, err := c.lk.Get(ctx, c.cfg.Resource)
	if errors.Is(err, tenure.ErrNotHeld) {
		return "", ErrNoLeader
	}
	if err != nil {
		return "", fmt.Errorf("election: leader of %q: %w", c.cfg.Resource, err)
	}
	return tenure.OwnerID(rec.Owner), nil
}

// Resign leaves the election: the current term, if any, ends (its context is
// cancelled, then the lease is released so another candidate takes over
// within one retry period) and Run returns nil. It waits until Run returned,
// and returns nil then, or ctx's cause if ctx ends first. Resign is
// idempotent and safe for concurrent use; to campaign again, make a new
// Candidate.
//
// Resign may be called from any callback. OnStartedLeading runs in a
// goroutine of its own, so Resign waits there as anywhere else. Called
// while Run's goroutine runs OnStoppedLeading or OnNewLeader (from inside
// them, typically), Resign does not wait, since Run cannot return before the
// callback does: it returns ErrResignInCallback at once, and Run returns
// nil once the callback has returned.
func (c *Candidate) Resign(ctx context.Context) error {
	c.mu.Lock()
	select {
	case <-c.resign:
	default:
		close(c.resign)
	}
	running, exited, inCallback := c.running, c.exited, c.inCallback
	c.mu.Unlock()
	if !running {
		return nil
	}
	if inCallback {
		return ErrResignInCallback
	}
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// HealthHandler returns an http.Handler for liveness probes, like
// client-go's leader-election watchdog: it answers 503 when the candidate
// is still in a term although its lease's deadline passed more than
// tolerance ago without a confirmed renewal (the term should have ended:
// something is stuck), and 200 otherwise, with "leader" or "follower" in
// the body.
func (c *Candidate) HealthHandler(tolerance time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		l := c.lease
		c.mu.Unlock()
		if l == nil {
			fmt.Fprintln(w, "ok: follower")
			return
		}
		if over := clock.Since(c.clock, l.Deadline()); over > tolerance {
			http.Error(w, fmt.Sprintf("unhealthy: leader of %q is %v past its lease deadline without a confirmed renewal", c.cfg.Resource, over.Round(time.Millisecond)), http.StatusServiceUnavailable)
			return
		}
		if l.Err() != nil {
			fmt.Fprintln(w, "ok: stepping down")
			return
		}
		fmt.Fprintln(w, "ok: leader")
	})
}

type electionTelemetry struct {
	leader      metric.Int64Gauge
	transitions metric.Int64Counter
	attrs       metric.MeasurementOption
	resource    string
}

func newElectionTelemetry(mp metric.MeterProvider, resource string) *electionTelemetry {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(tenure.ScopeName)
	t := &electionTelemetry{resource: resource}
	t.leader, _ = m.Int64Gauge("tenure.election.leader",
		metric.WithDescription("1 while this candidate leads the election, 0 otherwise."),
		metric.WithUnit("{leader}"))
	t.transitions, _ = m.Int64Counter("tenure.election.transitions",
		metric.WithDescription("Terms started and ended by this candidate."),
		metric.WithUnit("{transition}"))
	return t
}

// AttrTransition is the attribute of tenure.election.transitions: started or
// stopped.
const AttrTransition = attribute.Key("tenure.election.transition")

func (t *electionTelemetry) transition(started bool) {
	ctx := context.Background()
	res := tenure.AttrResource.String(t.resource)
	v, kind := int64(0), "stopped"
	if started {
		v, kind = 1, "started"
	}
	t.leader.Record(ctx, v, metric.WithAttributes(res))
	t.transitions.Add(ctx, 1, metric.WithAttributes(res, AttrTransition.String(kind)))
}
