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
//     was cancelled and OnStartedLeading returned (or HandOverTimeout
//     passed).
//   - Leaving (Run's context cancelled, Resign, or Close) hands over: the
//     term's context is cancelled, the lease is kept and renewed until
//     OnStartedLeading has returned, and then released, so another
//     candidate takes over within one retry period instead of waiting out
//     the TTL, and never while the callback may still run. A callback that
//     has not returned within Config.HandOverTimeout is given up on: the
//     lease is no longer renewed and expires by its TTL.
//   - A candidate may publish a value with its lease (Config.Value, such
//     as its address), which Leader, an Observer and "tenure status"
//     return; an Observer follows who leads, and every change, without
//     campaigning.
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

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/lockeropts"
	"github.com/tenure-go/tenure/internal/naming"
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

// Config configures a Candidate: the election's own settings. How the
// candidate's lease is renewed and trusted, its clock, and where logs,
// metrics and spans go are the options of its tenure.Locker, given to New.
type Config struct {
	// Resource is the name of the election's lease. Required.
	Resource string
	// Identity is the candidate's readable id, shown to other candidates
	// (default: the id of a tenure.WithOwnerID among New's options, or
	// tenure.DefaultOwnerID, "HOST:PID"). A random nonce is added, so two
	// candidates with one identity still exclude each other.
	Identity string
	// TTL is the lease's TTL (default 15 s). The leader renews it as the
	// Locker's options say (every TTL/3 unless tenure.WithRenewInterval),
	// and stops leading at most TTL·(1−ρ) after its last confirmed renewal
	// was sent (ρ: tenure.WithDriftBound); a leader that dies is replaced
	// within TTL plus RetryPeriod.
	TTL time.Duration
	// RetryPeriod is how often a follower tries to acquire the lease
	// (default 2 s); attempts are spread with ±10% jitter.
	RetryPeriod time.Duration

	// Value is published with the candidate's lease while it leads, such as
	// the address and port where it serves: Leader, an Observer and "tenure
	// status" return it. At most MaxValueLen (128) bytes of valid UTF-8
	// whose characters all print (or the ASCII space); the identity and the
	// value, with '%' and '#' encoded as %25 and %23, together must fit
	// in tenure.MaxOwnerIDLen (200) bytes. Empty means none. It is kept in
	// the owner string of each grant, so it works on every
	// store, and it cannot change while the candidate lives: to publish
	// another value, resign and campaign with a new Candidate.
	Value string

	// OnStartedLeading is called in its own goroutine when the candidate
	// starts leading, with the term's context: it derives from the term's
	// lease's context (tenure.LeaseFromContext returns the lease) and is
	// cancelled when the term ends, by loss, Resign, Run's context or Close.
	// It should return promptly after that: a term that ends by Resign,
	// Run's context or Close keeps its lease, renewed, until it has
	// returned, up to HandOverTimeout (see Run).
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading is called once at the end of each term, after the
	// term's context was cancelled and OnStartedLeading returned (or
	// HandOverTimeout passed), and after a leaving candidate released its
	// lease, in Run's goroutine. It must not block; it may call Resign,
	// which then returns ErrResignInCallback without waiting.
	OnStoppedLeading func()
	// OnNewLeader is called in Run's goroutine when the candidate observes a
	// different leader (including itself), with the leader's identity. It
	// must not block; it may call Resign, which then returns
	// ErrResignInCallback without waiting.
	OnNewLeader func(identity string)

	// HandOverTimeout bounds how long a term that ends by Resign, Run's
	// context or Close keeps its lease, renewed, waiting for
	// OnStartedLeading to return before releasing it (default: TTL, the
	// bound client-go's leader election puts on the same wait, kubernetes
	// PR 139504). A callback that has not returned by then is given up on:
	// the lease is no longer renewed, and it expires by its TTL, so another
	// candidate leads at most HandOverTimeout plus TTL after the term ended;
	// it is never released while the callback may still run. After a loss
	// the candidate waits as long before campaigning again, so that its
	// terms' callbacks never overlap. Negative values are refused.
	HandOverTimeout time.Duration
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
	term    *term         // the current term, nil when following
	running bool
	exited  chan struct{} // closed when the running Run returns
	leave   chan struct{} // closed by Resign or Close
	closing bool          // Close was called: Run returns tenure.ErrClosed
	// abandon is set by a Close whose context ended before Run returned:
	// no term may start a callback any more, and a term's lease whose
	// callback may still run is abandoned rather than released.
	abandon   bool
	abandoned chan struct{} // closed when abandon is set
	leader    string        // last observed leader's identity
	// inCallback is set while Run's goroutine runs OnStoppedLeading or
	// OnNewLeader: Resign must not wait for Run then.
	inCallback bool
}

// ErrResigned is the cause (context.Cause) of a term's context cancelled
// by Resign.
var ErrResigned = errors.New("election: the candidate resigned")

// term is one term of a candidate: its lease, the context its
// OnStartedLeading receives, and whether that has returned.
type term struct {
	c      *Candidate
	lease  *tenure.Lease
	ctx    *termContext
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when OnStartedLeading returned (at once without one)
}

func (t *term) returned() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// termContext is the context of a term: a child of its lease's context,
// cancelled when the term ends. Err, Done and Value read the lease's
// deadline on every call, as the lease's own context does, so that a
// process resumed after a pause past the deadline sees the loss at its
// first check, before any timer fires.
type termContext struct {
	context.Context
	t *term
}

type termKey struct{}

func (c *termContext) Done() <-chan struct{} {
	_ = c.t.lease.Err()
	return c.Context.Done()
}

func (c *termContext) Err() error {
	_ = c.t.lease.Err()
	return c.Context.Err()
}

func (c *termContext) Value(key any) any {
	if key == (termKey{}) {
		return c.t
	}
	_ = c.t.lease.Err()
	return c.Context.Value(key)
}

func (c *termContext) String() string {
	return fmt.Sprintf("election term (%q, token %d)", c.t.lease.Resource(), c.t.lease.Token())
}

// callingTerm returns the term of c whose OnStartedLeading is running and
// whose context ctx is or derives from, or nil.
func (c *Candidate) callingTerm(ctx context.Context) *term {
	t, _ := ctx.Value(termKey{}).(*term)
	if t == nil || t.c != c || t.returned() {
		return nil
	}
	return t
}

// ErrResignInCallback is returned by Resign when Run's goroutine is running
// OnStoppedLeading or OnNewLeader at the time, as when Resign is called from
// one of them. The resignation took effect, but Resign cannot wait for Run
// to return, since Run waits for the callback: once the callback returns,
// Run ends a term in progress (cancelling its context, releasing its lease,
// calling OnStoppedLeading) and returns nil.
//
// It is also returned by Resign called with the context of a term whose
// OnStartedLeading has not returned (or one derived from it), as from
// OnStartedLeading itself: Run releases the term's lease only once
// OnStartedLeading has returned, so Resign cannot wait for Run there.
var ErrResignInCallback = errors.New("election: Resign called from a callback that Run waits for: the candidate resigns once the callback returns; Resign does not wait for Run")

// New returns a candidate whose lease lives in store. opts configure the
// candidate's tenure.Locker as they configure tenure.New, and so decide how
// its leases behave: when they are renewed and retried
// (tenure.WithRenewInterval, tenure.WithRetry), how long they are trusted
// (tenure.WithDriftBound), whether they watch release notifications
// (tenure.WithReleaseWatch), and the clock and the logger, meter and
// tracer providers (tenure.WithClock, tenure.WithLogger,
// tenure.WithMeterProvider, tenure.WithTracerProvider). The candidate times
// its retries and hand-overs on the same clock, logs through the same
// logger and records its election metrics with the same meter provider. A
// tenure.WithOwnerID among opts gives the default Config.Identity; the
// Locker's owner id is made of Config.Identity and Config.Value.
//
// New validates the configuration and the options without any I/O and
// returns an error for every configuration that the Locker underneath
// would reject once Run starts: bad Locker options (as tenure.New), and
// errors wrapping tenure.ErrInvalidResource, tenure.ErrInvalidTTL or
// tenure.ErrInvalidOwner, with the reason, among them a TTL the store
// cannot keep (below 1 s on Cassandra, see driver.TTLChecker), a renew
// interval (default TTL/3) that does not end tenure.MinRenewWindow before
// TTL·(1−ρ) (tenure.Locker.CheckTTL), and an identity or published value
// that cannot be kept in an owner string (an identity that contains "|",
// which separates it from the value, a value too long or with characters
// that do not print).
func New(store driver.Store, cfg Config, opts ...tenure.Option) (*Candidate, error) {
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
	if cfg.RetryPeriod < 0 || cfg.HandOverTimeout < 0 {
		return nil, errors.New("election: negative retry period or hand-over timeout")
	}
	if cfg.HandOverTimeout == 0 {
		cfg.HandOverTimeout = cfg.TTL
	}
	set := lockeropts.Read(opts)
	if cfg.Identity == "" {
		cfg.Identity = set.OwnerID
	}
	id, err := lockerID(cfg.Identity, cfg.Value)
	if err != nil {
		return nil, fmt.Errorf("election: %w", err)
	}
	// The candidate's owner id comes last, so that it wins over a
	// WithOwnerID among opts.
	lk, err := tenure.New(store, append(opts[:len(opts):len(opts)], tenure.WithOwnerID(id))...)
	if err != nil {
		return nil, err
	}
	// The Locker makes this check at every TryAcquire; Run would return its
	// error on the first attempt, so a configuration that fails it could
	// never lead. Make it now, before anything runs.
	if err := lk.CheckTTL(cfg.TTL); err != nil {
		return nil, ttlError(lk.Timing(cfg.TTL), err)
	}
	return &Candidate{
		cfg:       cfg,
		lk:        lk,
		clock:     set.Clock,
		log:       set.Logger.With("election", cfg.Resource),
		tel:       newElectionTelemetry(set.MeterProvider, cfg.Resource),
		leave:     make(chan struct{}),
		abandoned: make(chan struct{}),
	}, nil
}

// ttlError explains why the Locker refused a TTL, with the Locker's own
// renewal timing (tenure.Locker.Timing): the renew interval and the time a
// lease is trusted are the Locker's, never recomputed here.
func ttlError(t tenure.Timing, err error) error {
	switch {
	case t.RenewEvery <= 0:
		return fmt.Errorf("election: TTL %v is too short to be renewed (every %v); the candidate could never lead: %w", t.TTL, t.RenewEvery, err)
	case t.RenewEvery >= t.TrustedFor:
		return fmt.Errorf("election: renew interval %v is not shorter than TTL·(1−ρ) = %v (TTL %v, ρ = %v), the time a lease is trusted after its renewal was sent: "+
			"a leader would lose every lease before renewing it, so the Locker refuses such a TTL and the candidate could never lead: %w",
			t.RenewEvery, t.TrustedFor, t.TTL, t.DriftBound, err)
	}
	return fmt.Errorf("election: TTL %v: %w", t.TTL, err)
}

// Close ends the candidate for good, for a program that is about to exit.
// When Run is running, Close makes it leave as Resign does (a term in
// progress ends and hands over: see Run) and waits for it to return; Run
// then returns tenure.ErrClosed. It then closes the candidate's Locker
// (tenure.Locker.Close), which releases what is still held and waits for
// the acquires and clean-ups in flight. Among them is a campaign attempt
// that ctx's end or Resign interrupted after it was sent: its outcome is
// resolved and what it may have taken is freed, so a candidate that exits
// does not hold the lease for a whole TTL. Everything is bounded by ctx:
// when ctx ends while a term's OnStartedLeading has not returned, that
// term's lease is abandoned (no longer renewed; it expires by its TTL),
// never released. Call it from outside the callbacks, typically after Run
// has returned; Run returns tenure.ErrClosed afterwards. It is safe to call
// more than once and from several goroutines.
func (c *Candidate) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closing = true
	c.closeLeaveLocked()
	running, exited := c.running, c.exited
	c.mu.Unlock()
	if running {
		select {
		case <-exited:
		case <-ctx.Done():
			// Run is still handing over, or campaigning: whatever it does
			// next, a term whose callback may still run must not have its
			// lease released by the Locker's Close below.
			c.mu.Lock()
			if !c.abandon {
				c.abandon = true
				close(c.abandoned)
			}
			t := c.term
			c.mu.Unlock()
			if t != nil && !t.returned() {
				if err := t.lease.Abandon(); err == nil {
					c.log.Warn("closing: OnStartedLeading has not returned; the lease is abandoned and expires by its TTL", "token", t.lease.Token())
				}
			}
		}
	}
	return c.lk.Close(ctx)
}

// closeLeaveLocked closes c.leave once; c.mu is held.
func (c *Candidate) closeLeaveLocked() {
	select {
	case <-c.leave:
	default:
		close(c.leave)
	}
}

// Identity returns the candidate's readable id (Config.Identity, or its
// default: see Config).
func (c *Candidate) Identity() string {
	id, _ := naming.ParseCandidate(c.lk.Owner())
	return id
}

// Value returns the value the candidate publishes (Config.Value).
func (c *Candidate) Value() string { return c.cfg.Value }

// Owner returns the Locker owner string of the candidate: its identity,
// its encoded published value, "#" and a nonce. Each grant's owner string,
// as the store keeps it, adds "." and the grant's number.
func (c *Candidate) Owner() string { return c.lk.Owner() }

// Run campaigns until ctx ends, Resign or Close: it tries to acquire the
// lease every RetryPeriod while another candidate leads, leads while it
// holds the lease, and campaigns again one RetryPeriod (±10%) after a term
// ends by loss, so that the followers go first. It returns nil after
// Resign, tenure.ErrClosed after Close, and ctx's cause after ctx ends.
// Invalid configuration errors (such as a TTL the store rejects), a closed
// Locker and a store that must be opened again (tenure.ErrStoreUnusable:
// the SQLite store's file was replaced) are returned at once; other store
// errors are logged and retried every RetryPeriod.
//
// Hand-over: when the candidate leaves while it leads (ctx ends, Resign,
// Close), the term's context is cancelled first (cause: ctx's cause,
// ErrResigned or tenure.ErrClosed), and the lease is kept, and renewed,
// until OnStartedLeading has returned; then it is released, so another
// candidate leads within one RetryPeriod, and Run returns. The work of the
// term therefore never overlaps the next leader's, as long as it stops
// when OnStartedLeading returns (and the lease is not lost meanwhile: a
// lease that cannot be renewed ends at its deadline, whatever the
// callback does). If OnStartedLeading has not returned within
// HandOverTimeout (default TTL), the lease is no longer renewed and is
// left to expire by its TTL, never released while the callback may still
// run, and Run returns without waiting longer: another candidate may then
// lead while the callback still runs, after the TTL. This is the
// guarantee that client-go's ReleaseOnCancel leaves to its users ("you
// must ensure all code guarded by this lease has successfully completed
// prior to cancelling the context"). A term that ends by loss waits for
// OnStartedLeading in the same way, without the lease, before the
// candidate campaigns again or returns.
func (c *Candidate) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return errors.New("election: Run is already running")
	}
	c.running = true
	c.exited = make(chan struct{})
	exited, leave := c.exited, c.leave
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
		case <-leave:
			return c.leftErr()
		default:
		}
		lease, err := c.lk.TryAcquire(ctx, c.cfg.Resource, c.cfg.TTL)
		var held *tenure.HeldError
		switch {
		case err == nil:
			if done := c.lead(ctx, lease, leave); done {
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				return c.leftErr()
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
				id, _ := naming.ParseCandidate(held.Holder.Owner)
				c.observe(id)
			}
		case errors.Is(err, tenure.ErrInvalidTTL), errors.Is(err, tenure.ErrInvalidResource), errors.Is(err, tenure.ErrClosed),
			errors.Is(err, tenure.ErrStoreUnusable):
			return err
		case ctx.Err() != nil:
			return context.Cause(ctx)
		default:
			c.log.Warn("campaign attempt failed", "err", err)
		}
		if !c.sleep(ctx, leave, c.jitter()) {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return c.leftErr()
		}
	}
}

// leftErr is what Run returns after Resign (nil) or Close (ErrClosed).
func (c *Candidate) leftErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return tenure.ErrClosed
	}
	return nil
}

// jitter spreads follower attempts over RetryPeriod ±10%.
func (c *Candidate) jitter() time.Duration {
	p := c.cfg.RetryPeriod
	return p - p/10 + time.Duration(rand.Int64N(int64(p/5)+1))
}

func (c *Candidate) sleep(ctx context.Context, leave <-chan struct{}, d time.Duration) bool {
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	case <-leave:
		return false
	}
}

// lead runs one term. It reports whether the candidate is leaving (ctx
// ended, Resign or Close), in which case it handed the lease over (see
// Run).
func (c *Candidate) lead(ctx context.Context, lease *tenure.Lease, leave <-chan struct{}) (leaving bool) {
	t := &term{c: c, lease: lease, done: make(chan struct{})}
	inner, cancel := context.WithCancelCause(lease.Context())
	t.ctx, t.cancel = &termContext{Context: inner, t: t}, cancel
	c.mu.Lock()
	if c.abandon {
		// Close gave up waiting for Run: start nothing, and leave the lease
		// to the Locker's Close.
		c.mu.Unlock()
		cancel(tenure.ErrClosed)
		return true
	}
	c.lease, c.term = lease, t
	c.mu.Unlock()
	c.log.Info("started leading", "token", lease.Token())
	c.tel.transition(true)
	c.observe(c.Identity())
	c.mu.Lock()
	if f := c.cfg.OnStartedLeading; f != nil && !c.abandon {
		go func() {
			defer close(t.done)
			f(t.ctx)
		}()
	} else {
		close(t.done)
	}
	c.mu.Unlock()

	var cause error
	select {
	case <-lease.Done():
		cause = context.Cause(lease.Context())
		c.log.Warn("stopped leading: lease lost", "cause", cause)
	case <-ctx.Done():
		leaving, cause = true, context.Cause(ctx)
	case <-leave:
		leaving, cause = true, ErrResigned
		if c.leftErr() != nil {
			cause = tenure.ErrClosed
		}
	}
	t.cancel(cause)
	returned := c.awaitCallback(t, leaving)
	if leaving {
		c.mu.Lock()
		abandoned := c.abandon && !returned
		c.mu.Unlock()
		switch {
		case abandoned:
			// Close abandoned the lease.
		case !returned:
			if err := lease.Abandon(); err == nil {
				c.log.Warn("leaving: OnStartedLeading has not returned within the hand-over timeout; the lease is no longer renewed and expires by its TTL",
					"token", lease.Token(), "hand_over_timeout", c.cfg.HandOverTimeout, "ttl", c.cfg.TTL)
			}
		default:
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tenure.DefaultReleaseTimeout)
			if err := lease.Release(rctx); err != nil {
				c.log.Warn("leaving: release failed", "err", err)
			} else {
				c.log.Info("stopped leading: released the lease")
			}
			cancel()
		}
	}
	c.mu.Lock()
	c.lease, c.term = nil, nil
	c.mu.Unlock()
	c.tel.transition(false)
	if f := c.cfg.OnStoppedLeading; f != nil {
		c.callback(f)
	}
	return leaving
}

// awaitCallback waits until the term's OnStartedLeading has returned, at
// most HandOverTimeout, and reports whether it has. The term's lease, if
// it is still held, is renewed meanwhile by the Locker.
func (c *Candidate) awaitCallback(t *term, leaving bool) bool {
	if t.returned() {
		return true
	}
	if leaving {
		c.log.Info("leaving: waiting for OnStartedLeading to return before releasing the lease, which is renewed meanwhile",
			"token", t.lease.Token(), "hand_over_timeout", c.cfg.HandOverTimeout)
	}
	timer := c.clock.NewTimer(c.cfg.HandOverTimeout)
	defer timer.Stop()
	select {
	case <-t.done:
		return true
	case <-c.abandoned:
		return false // Close gave up waiting, and abandoned the lease
	case <-timer.C():
		if !leaving {
			c.log.Warn("OnStartedLeading has not returned within the hand-over timeout after the term was lost; campaigning again",
				"token", t.lease.Token(), "hand_over_timeout", c.cfg.HandOverTimeout)
		}
		return false
	}
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

// IsLeader reports whether the candidate leads now: it is in a term that
// has not ended (by loss, or by leaving: false during the hand-over) and
// whose lease's deadline has not passed (checked against the clock on
// every call, so it is false at once after a pause past the deadline).
func (c *Candidate) IsLeader() bool {
	c.mu.Lock()
	t := c.term
	c.mu.Unlock()
	return t != nil && t.ctx.Err() == nil
}

// Lease returns the current term's lease, from the start of the term until
// its hand-over ends, or nil when not leading.
func (c *Candidate) Lease() *tenure.Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lease
}

// Leader returns the current leader as the store sees it (its identity,
// published value and fencing token), or an error wrapping ErrNoLeader
// when nobody leads. Its strings come from another process.
func (c *Candidate) Leader(ctx context.Context) (Leader, error) {
	rec, err := c.lk.Get(ctx, c.cfg.Resource)
	if errors.Is(err, tenure.ErrNotHeld) {
		return Leader{}, ErrNoLeader
	}
	if err != nil {
		return Leader{}, fmt.Errorf("election: leader of %q: %w", c.cfg.Resource, err)
	}
	return leaderOf(rec), nil
}

// Resign leaves the election: the current term, if any, ends and hands
// over (its context is cancelled with cause ErrResigned, and the lease is
// released once OnStartedLeading has returned, so that another candidate
// takes over within one retry period: see Run), and Run returns nil. It
// waits until Run returned, and returns nil then, or ctx's cause if ctx
// ends first. Resign is idempotent and safe for concurrent use; to
// campaign again, make a new Candidate.
//
// Resign may be called from any callback, where it cannot wait for Run,
// since Run waits for the callback: it returns ErrResignInCallback at
// once, and Run returns nil once the callback has returned, after handing
// the term over. So it does when it is called while Run's goroutine runs
// OnStoppedLeading or OnNewLeader, and when ctx is (or derives from) the
// context of a term whose OnStartedLeading has not returned: call it as
// c.Resign(term) from OnStartedLeading. Called from OnStartedLeading with
// another context, Resign waits until ctx ends or HandOverTimeout passes,
// and the lease is then left to expire by its TTL.
func (c *Candidate) Resign(ctx context.Context) error {
	c.mu.Lock()
	c.closeLeaveLocked()
	running, exited, inCallback := c.running, c.exited, c.inCallback
	c.mu.Unlock()
	if !running {
		return nil
	}
	if inCallback || c.callingTerm(ctx) != nil {
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
		l, t := c.lease, c.term
		c.mu.Unlock()
		if l == nil {
			fmt.Fprintln(w, "ok: follower")
			return
		}
		if over := clock.Since(c.clock, l.Deadline()); over > tolerance {
			http.Error(w, fmt.Sprintf("unhealthy: leader of %q is %v past its lease deadline without a confirmed renewal", c.cfg.Resource, over.Round(time.Millisecond)), http.StatusServiceUnavailable)
			return
		}
		if l.Err() != nil || t != nil && t.ctx.Err() != nil {
			// The term ended: lost, or handing over.
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
