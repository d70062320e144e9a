// Package tenure provides distributed leases: a lock on a named resource that
// a store keeps for a TTL unless its holder renews it, with fencing tokens,
// automatic renewal, and a context that is cancelled the moment the lease can
// no longer be trusted.
//
// A Locker is made from a store (store/sqlite for one host, store/cassandra
// across hosts, store/memory in tests) and acquires leases:
//
//	lk, err := tenure.New(store, tenure.WithOwnerID("indexer-1"))
//	lease, err := lk.Acquire(ctx, "index-cleaner", 30*time.Second)
//	if err != nil { ... }
//	defer lease.Release(context.WithoutCancel(ctx))
//	work(lease.Context(), lease.Token())
//
// The client-side rules (docs/design.md) live here, once, for every store:
// the local deadline is taken from the monotonic clock before the request is
// sent (tSend + TTL·(1−ρ)), renewals run every TTL/3 and each is bounded by
// the time left, a lease is lost exactly once and no later than its
// deadline, and an operation whose outcome is unknown is resolved, never
// guessed.
package tenure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/backoff"
)

// Defaults.
const (
	// DefaultDriftBound is ρ, the bound on how much faster the store's
	// clock may run than the client's: a lease is trusted for TTL·(1−ρ)
	// after the request that confirmed it was sent.
	DefaultDriftBound = 0.01
	// DefaultRetryBase is the upper bound of the first retry delay.
	DefaultRetryBase = 50 * time.Millisecond
	// DefaultRetryInterval is the largest delay between two attempts of a
	// blocking Acquire (and between renewal retries): the "retry interval"
	// of the liveness promise.
	DefaultRetryInterval = time.Second
	// DefaultMaxConcurrentRenewals bounds the store calls that background
	// renewal makes at once for one Locker.
	DefaultMaxConcurrentRenewals = 64
	// DefaultReleaseTimeout bounds the release that Do and Close make.
	DefaultReleaseTimeout = 10 * time.Second
)

// Option configures a Locker.
type Option func(*config)

type config struct {
	ownerID       string
	clock         clockwork.Clock
	renewInterval time.Duration
	retry         backoff.Policy
	rho           float64
	logger        *slog.Logger
	onLost        func(*Lease, error)
	maxRenewals   int
	telemetry     telemetryConfig
}

// WithOwnerID sets the readable part of the owner (default DefaultOwnerID,
// "HOST:PID"). A random nonce is always appended, so two Lockers given the
// same id still exclude each other.
func WithOwnerID(id string) Option { return func(c *config) { c.ownerID = id } }

// WithClock sets the clock used for deadlines, renewal and backoff (default
// the real clock, whose readings carry Go's monotonic clock). Tests pass a
// clockwork.FakeClock.
func WithClock(clock clockwork.Clock) Option { return func(c *config) { c.clock = clock } }

// WithRenewInterval sets a fixed interval between renewals. Zero (the
// default) renews every TTL/3. The interval must be shorter than
// TTL·(1−ρ), or TryAcquire returns ErrInvalidTTL.
func WithRenewInterval(d time.Duration) Option { return func(c *config) { c.renewInterval = d } }

// WithRetry sets the backoff of a blocking Acquire and of renewal retries:
// delays drawn uniformly from [0, min(max, base·2^attempt)] (full jitter).
// max is the retry interval (default 1 s); base defaults to 50 ms.
func WithRetry(base, max time.Duration) Option {
	return func(c *config) { c.retry = backoff.Policy{Base: base, Cap: max} }
}

// WithDriftBound sets ρ (default 0.01), the bound on how much faster the
// store's clock may run than this process's: a lease is trusted for
// TTL·(1−ρ) after the confirming request was sent. It must be in [0, 0.5).
func WithDriftBound(rho float64) Option { return func(c *config) { c.rho = rho } }

// WithLogger sets the structured logger. The default discards everything.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithOnLost sets a function called once, in its own goroutine, for every
// lease of this Locker that is lost (not for leases released by their
// holder), with the cause (which wraps ErrLeaseLost).
func WithOnLost(f func(lease *Lease, cause error)) Option {
	return func(c *config) { c.onLost = f }
}

// WithMaxConcurrentRenewals bounds the store calls that background renewal
// makes at once (default 64). The Locker runs at most this many renewal
// goroutines, whatever the number of leases it holds.
func WithMaxConcurrentRenewals(n int) Option { return func(c *config) { c.maxRenewals = n } }

// Locker acquires leases from a store on behalf of one owner. It is safe for
// concurrent use. A Locker is not reentrant: while it holds (or is
// acquiring) a resource, TryAcquire of the same resource returns a
// *HeldError naming this Locker's own owner, and Acquire waits.
type Locker struct {
	store  driver.Store
	owner  string
	clock  clockwork.Clock
	cfg    config
	log    *slog.Logger
	runner *runner
	sched  *scheduler
	tel    *telemetry

	mu     sync.Mutex
	held   map[string]*Lease // nil value: an acquire or a clean-up is in flight
	closed bool
	probe  atomic.Bool // an acquire ended with its outcome unknown: read before writing

	// Clean-ups in flight (see background). A counter and a channel rather
	// than a sync.WaitGroup: a lease can be lost, and start a clean-up,
	// while Close is already waiting, and WaitGroup forbids an Add from
	// zero concurrent with Wait.
	bgMu   sync.Mutex
	bgN    int
	bgIdle chan struct{} // closed when bgN drops to 0; nil until Close asks
}

// background runs a clean-up (freeing a lost lease, or what an acquire with
// an unknown outcome may have taken) on the runner; Close waits for them.
func (lk *Locker) background(f func()) {
	lk.bgMu.Lock()
	lk.bgN++
	lk.bgMu.Unlock()
	lk.runner.submit(func() {
		defer lk.backgroundDone()
		f()
	})
}

func (lk *Locker) backgroundDone() {
	lk.bgMu.Lock()
	defer lk.bgMu.Unlock()
	lk.bgN--
	if lk.bgN == 0 && lk.bgIdle != nil {
		close(lk.bgIdle)
		lk.bgIdle = nil
	}
}

// backgroundIdle returns a channel closed once no clean-up is in flight.
func (lk *Locker) backgroundIdle() <-chan struct{} {
	lk.bgMu.Lock()
	defer lk.bgMu.Unlock()
	if lk.bgIdle == nil {
		lk.bgIdle = make(chan struct{})
		if lk.bgN == 0 {
			close(lk.bgIdle)
			ch := lk.bgIdle
			lk.bgIdle = nil
			return ch
		}
	}
	return lk.bgIdle
}

// New returns a Locker that keeps its leases in store. It returns an error
// wrapping ErrInvalidOwner for a bad owner id, and a plain error for other
// bad options.
func New(store driver.Store, opts ...Option) (*Locker, error) {
	if store == nil {
		return nil, errors.New("tenure: nil store")
	}
	c := config{
		rho:         DefaultDriftBound,
		retry:       backoff.Policy{Base: DefaultRetryBase, Cap: DefaultRetryInterval},
		maxRenewals: DefaultMaxConcurrentRenewals,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.ownerID == "" {
		c.ownerID = DefaultOwnerID()
	}
	owner, err := NewOwner(c.ownerID)
	if err != nil {
		return nil, err
	}
	switch {
	case c.rho < 0 || c.rho >= 0.5 || c.rho != c.rho:
		return nil, fmt.Errorf("tenure: drift bound %v is outside [0, 0.5)", c.rho)
	case c.renewInterval < 0:
		return nil, fmt.Errorf("tenure: renew interval %v is negative", c.renewInterval)
	case c.retry.Base <= 0 || c.retry.Cap < c.retry.Base:
		return nil, fmt.Errorf("tenure: retry base %v and max %v: need 0 < base <= max", c.retry.Base, c.retry.Cap)
	case c.maxRenewals <= 0:
		return nil, fmt.Errorf("tenure: max concurrent renewals %d is not positive", c.maxRenewals)
	}
	if c.clock == nil {
		c.clock = clockwork.NewRealClock()
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	lk := &Locker{
		store:  store,
		owner:  owner,
		clock:  c.clock,
		cfg:    c,
		log:    c.logger.With("owner", owner),
		runner: &runner{max: c.maxRenewals},
		held:   make(map[string]*Lease),
	}
	lk.sched = &scheduler{clock: c.clock, submit: lk.runner.submit}
	lk.tel = newTelemetry(c.telemetry)
	return lk, nil
}

// Owner returns the full owner string (readable id, "#", nonce) that this
// Locker writes to the store.
func (lk *Locker) Owner() string { return lk.owner }

// Get returns the live lease on resource as the store sees it, or an error
// wrapping ErrNotHeld.
func (lk *Locker) Get(ctx context.Context, resource string) (Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return Record{}, err
	}
	return lk.store.Get(ctx, resource)
}

// List returns the live leases whose resource starts with prefix.
func (lk *Locker) List(ctx context.Context, prefix string) ([]Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	return lk.store.List(ctx, prefix)
}

// trust returns how long a confirmed lease may be trusted: TTL·(1−ρ).
func (lk *Locker) trust(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl) * (1 - lk.cfg.rho))
}

func (lk *Locker) interval(ttl time.Duration) time.Duration {
	if lk.cfg.renewInterval > 0 {
		return lk.cfg.renewInterval
	}
	return ttl / 3
}

// CheckTTL reports whether ttl can be used for a lease of this Locker,
// without any I/O: it must be positive, within the store's limits
// (driver.TTLChecker: for example whole seconds from 1 s on Cassandra), and
// leave time to renew (the renew interval, TTL/3 by default, must be shorter
// than TTL·(1−ρ)). The error wraps ErrInvalidTTL. TryAcquire and Acquire make
// the same check; election.New uses it to reject a configuration before
// anything runs.
func (lk *Locker) CheckTTL(ttl time.Duration) error { return lk.checkTTL(ttl) }

func (lk *Locker) checkTTL(ttl time.Duration) error {
	if err := driver.ValidateTTL(ttl); err != nil {
		return err
	}
	if c, ok := lk.store.(driver.TTLChecker); ok {
		if err := c.CheckTTL(ttl); err != nil {
			return err
		}
	}
	if iv := lk.interval(ttl); iv <= 0 || iv >= lk.trust(ttl) {
		return fmt.Errorf("%w: %v leaves no time to renew every %v", ErrInvalidTTL, ttl, iv)
	}
	return nil
}

// TryAcquire makes one attempt to acquire resource for ttl. On success the
// lease is renewed in the background until it is released or lost. When
// another owner holds the resource, the error is a *HeldError (errors.Is
// ErrHeld) naming the holder. Bad input returns ErrInvalidResource or
// ErrInvalidTTL before any I/O. When the store's answer is lost, TryAcquire
// resolves the outcome by retrying (the store renews a lease its owner
// already holds) until the lease's would-be deadline; if it stays unknown,
// the error wraps ErrUnknownOutcome and whatever it may have taken is freed
// in the background. Other store errors are wrapped with %w.
//
// The lease's context derives from ctx's values but not from its
// cancellation: cancelling ctx after TryAcquire returns does not end the
// lease.
func (lk *Locker) TryAcquire(ctx context.Context, resource string, ttl time.Duration) (*Lease, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return nil, err
	}
	if err := lk.checkTTL(ttl); err != nil {
		return nil, err
	}
	sctx, span := lk.tel.start(ctx, "tenure.acquire", resource)
	lease, err := lk.tryAcquire(ctx, sctx, resource, ttl)
	lk.tel.acquired(sctx, span, resource, lease, err)
	return lease, err
}

// tryAcquire makes the store calls with ctx (which carries tenure's span)
// and derives the lease's context from parent (the caller's).
func (lk *Locker) tryAcquire(parent, ctx context.Context, resource string, ttl time.Duration) (*Lease, error) {
	if err := lk.reserve(resource); err != nil {
		return nil, err
	}
	trust := lk.trust(ttl)
	if lk.probe.Load() {
		// An earlier acquire's answers were lost and never resolved: write
		// again only once the store answers a read.
		cctx, cancel := lk.bounded(ctx, trust)
		cur, err := lk.store.Get(cctx, resource)
		cancel()
		switch {
		case err != nil && !errors.Is(err, ErrNotHeld):
			lk.unreserve(resource)
			return nil, fmt.Errorf("tenure: acquire %q: not writing until the store answers (earlier answers were lost): %w", resource, err)
		case err == nil && cur.Owner != lk.owner:
			lk.probe.Store(false)
			lk.unreserve(resource)
			return nil, &HeldError{Holder: cur}
		}
		lk.probe.Store(false)
	}
	tSend := lk.clock.Now()
	cctx, cancel := lk.bounded(ctx, trust)
	rec, err := lk.store.Acquire(cctx, resource, lk.owner, ttl)
	cancel()
	if err == nil {
		return lk.grant(parent, resource, ttl, rec, tSend)
	}
	if !errors.Is(err, ErrUnknownOutcome) {
		lk.unreserve(resource)
		var held *HeldError
		if errors.As(err, &held) {
			return nil, err
		}
		return nil, fmt.Errorf("tenure: acquire %q: %w", resource, err)
	}
	return lk.resolveAcquire(parent, ctx, resource, ttl, tSend, err)
}

// resolveAcquire settles an acquire whose answer was lost (design rule 6):
// retrying is safe because the store treats an acquire by the current owner
// as a renewal of the same lease. If the first attempt was applied, its
// lease lives at least until tSend+TTL, so any answer before tSend+TTL·(1−ρ)
// that names another holder proves it was not.
func (lk *Locker) resolveAcquire(parent, ctx context.Context, resource string, ttl time.Duration, tSend time.Time, cause error) (*Lease, error) {
	until := tSend.Add(lk.trust(ttl))
	lk.log.Warn("acquire outcome unknown; resolving", "resource", resource, "err", cause)
	lk.tel.unknownOutcome(ctx, resource, "acquire")
	lastErr := cause
	for attempt := 0; ; attempt++ {
		if !lk.sleep(ctx, lk.cfg.retry.Delay(attempt), until) {
			break
		}
		now := lk.clock.Now()
		if !now.Before(until) {
			break
		}
		// Read first: while answers are lost, a read fails and nothing is
		// written, so a client whose requests arrive but whose answers do
		// not stops re-taking the lease, and others can have it once it
		// expires.
		cctx, cancel := lk.bounded(ctx, until.Sub(now))
		cur, err := lk.store.Get(cctx, resource)
		cancel()
		if err != nil && !errors.Is(err, ErrNotHeld) {
			lastErr = err
			continue
		}
		var held *HeldError
		if err == nil && cur.Owner != lk.owner {
			lk.log.Info("acquire outcome resolved: not granted", "resource", resource, "holder", cur.Owner)
			lk.unreserve(resource)
			return nil, &HeldError{Holder: cur}
		}
		now = lk.clock.Now()
		if !now.Before(until) {
			break
		}
		cctx, cancel = lk.bounded(ctx, until.Sub(now))
		rec, err := lk.store.Acquire(cctx, resource, lk.owner, ttl)
		cancel()
		if err == nil {
			lk.log.Info("acquire outcome resolved: granted", "resource", resource, "token", rec.Token)
			return lk.grant(parent, resource, ttl, rec, now)
		}
		if errors.As(err, &held) {
			lk.log.Info("acquire outcome resolved: not granted", "resource", resource, "holder", held.Holder.Owner)
			lk.unreserve(resource)
			return nil, err
		}
		if errors.Is(err, ErrInvalidTTL) || errors.Is(err, ErrInvalidResource) || errors.Is(err, ErrInvalidOwner) {
			lk.unreserve(resource)
			return nil, fmt.Errorf("tenure: acquire %q: %w", resource, err)
		}
		lastErr = err
	}
	// Still unknown: free whatever the lost attempt may have taken, so that no
	// orphan blocks others for a whole TTL, then report the outcome as unknown.
	// Until a read succeeds again, later acquires probe before they write.
	lk.probe.Store(true)
	lk.background(func() { lk.cleanup(resource, ttl) })
	return nil, fmt.Errorf("tenure: acquire %q: %w", resource, driver.UnknownOutcome(lastErr))
}

// cleanup frees resource in the store if it is held by this Locker's owner,
// then forgets the reservation. A lease that a lost or late request created
// was applied no later than now, so the store expires it within ttl from
// now: cleanup tries until then.
func (lk *Locker) cleanup(resource string, ttl time.Duration) {
	defer lk.unreserve(resource)
	until := lk.clock.Now().Add(ttl)
	for attempt := 0; ; attempt++ {
		now := lk.clock.Now()
		if !now.Before(until) {
			return
		}
		ctx, cancel := lk.bounded(context.Background(), until.Sub(now))
		rec, err := lk.store.Get(ctx, resource)
		if err == nil && rec.Owner == lk.owner {
			err = lk.store.Release(ctx, resource, lk.owner, rec.Token)
			if err == nil {
				lk.log.Info("freed a lease whose acquire outcome was unknown", "resource", resource, "token", rec.Token)
			}
		}
		cancel()
		if err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLeaseLost) {
			return
		}
		if !lk.sleep(context.Background(), lk.cfg.retry.Delay(attempt), until) {
			return
		}
	}
}

// grant turns a store's confirmation into a Lease trusted until
// tSend+TTL·(1−ρ).
func (lk *Locker) grant(ctx context.Context, resource string, ttl time.Duration, rec Record, tSend time.Time) (*Lease, error) {
	if rec.Owner != lk.owner || rec.Resource != resource {
		lk.unreserve(resource)
		return nil, fmt.Errorf("tenure: acquire %q: the store answered with a lease of %q on %q", resource, rec.Owner, rec.Resource)
	}
	deadline := tSend.Add(lk.trust(ttl))
	now := lk.clock.Now()
	if !now.Before(deadline) {
		// The answer came after the lease's deadline (a pause, a slow store):
		// it may already belong to someone else. Free it and say so.
		lk.background(func() { lk.cleanup(resource, ttl) })
		return nil, fmt.Errorf("tenure: acquire %q: %w: the store's answer arrived %v after the request, past the lease's deadline", resource, ErrLeaseLost, now.Sub(tSend))
	}
	l := newLease(lk, ctx, resource, ttl, rec.Token, tSend, deadline)
	lk.mu.Lock()
	closed := lk.closed
	lk.held[resource] = l
	lk.mu.Unlock()
	l.start(now)
	if closed {
		// Close ran while this acquire was in flight: give the lease back.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
		defer cancel()
		_ = l.Release(rctx)
		return nil, ErrClosed
	}
	lk.log.Debug("lease granted", "resource", resource, "token", rec.Token, "ttl", ttl)
	return l, nil
}

// AcquireOption configures one blocking Acquire.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	onWait func(holder *HeldError, waited time.Duration)
}

// OnWait sets a function that Acquire calls after each attempt that found
// the resource held, with the holder and the time waited so far. The CLI
// uses it to show who holds a lease.
func OnWait(f func(holder *HeldError, waited time.Duration)) AcquireOption {
	return func(c *acquireConfig) { c.onWait = f }
}

// Acquire blocks until resource is granted for ttl or ctx ends. Between
// attempts it waits with capped exponential backoff and full jitter (see
// WithRetry), or less when the store notifies a release (Notifier). When ctx
// ends first, the error wraps ctx's error and the last attempt's error
// (a *HeldError when the resource was held). Bad input returns at once, and
// so does a store error on the first attempt (an unreachable store fails
// fast); store errors on later attempts are logged and retried.
func (lk *Locker) Acquire(ctx context.Context, resource string, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	var ac acquireConfig
	for _, o := range opts {
		o(&ac)
	}
	if err := driver.ValidateResource(resource); err != nil {
		return nil, err
	}
	if err := lk.checkTTL(ttl); err != nil {
		return nil, err
	}
	var notify <-chan struct{}
	if n, ok := lk.store.(driver.Notifier); ok {
		ch, stop, err := n.Subscribe(ctx, resource)
		if err != nil {
			lk.log.Warn("release notifications unavailable; polling", "resource", resource, "err", err)
		} else {
			notify = ch
			defer stop()
		}
	}
	start := lk.clock.Now()
	var held *HeldError
	var lastErr error
	for attempt := 0; ; attempt++ {
		lease, err := lk.TryAcquire(ctx, resource, ttl)
		if err == nil {
			return lease, nil
		}
		switch {
		case errors.As(err, &held):
			lastErr = err
			if ac.onWait != nil {
				ac.onWait(held, lk.clock.Since(start))
			}
		case attempt == 0 || !transient(err) || ctx.Err() != nil:
			// The first attempt fails fast (an unreachable or misconfigured
			// store); bad input and a closed Locker never get better.
			return nil, err
		default:
			// A store error during a long wait: ride it out.
			lastErr = err
			lk.log.Warn("acquire attempt failed; retrying", "resource", resource, "err", err)
		}
		if err := lk.wait(ctx, lk.cfg.retry.Delay(attempt), notify); err != nil {
			return nil, fmt.Errorf("%w (gave up waiting after %v: %w)", lastErr, lk.clock.Since(start).Round(time.Millisecond), err)
		}
	}
}

// transient reports whether an acquire error may go away by itself.
func transient(err error) bool {
	return !errors.Is(err, ErrInvalidResource) && !errors.Is(err, ErrInvalidTTL) &&
		!errors.Is(err, ErrInvalidOwner) && !errors.Is(err, ErrClosed)
}

// wait sleeps for d on the Locker's clock, or until notify fires, or until
// ctx ends (then it returns ctx's cause).
func (lk *Locker) wait(ctx context.Context, d time.Duration, notify <-chan struct{}) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	t := lk.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-notify:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// sleep waits for d, but not past until; it reports false when ctx ended or
// until was reached.
func (lk *Locker) sleep(ctx context.Context, d time.Duration, until time.Time) bool {
	if left := until.Sub(lk.clock.Now()); d > left {
		d = left
	}
	if d <= 0 {
		return lk.clock.Now().Before(until) && ctx.Err() == nil
	}
	return lk.wait(ctx, d, nil) == nil && lk.clock.Now().Before(until)
}

// Do acquires resource (blocking, like Acquire), runs fn with the lease's
// context, and releases the lease. fn's context is cancelled when the lease
// is lost or when ctx ends. Do returns fn's error; if the lease was
// lost while fn ran, the result also wraps the loss cause (errors.Is
// ErrLeaseLost), and a failed release is joined to it. fn must stop when its
// context is cancelled.
func (lk *Locker) Do(ctx context.Context, resource string, ttl time.Duration, fn func(ctx context.Context) error) error {
	lease, err := lk.Acquire(ctx, resource, ttl)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancel(lease.Context())
	stop := context.AfterFunc(ctx, cancel)
	fnErr := fn(fctx)
	stop()
	cancel()
	lostErr := lease.Err()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
	defer rcancel()
	relErr := lease.Release(rctx)
	if lostErr != nil {
		return errors.Join(fnErr, lostErr)
	}
	if relErr != nil && !errors.Is(relErr, ErrLeaseLost) {
		return errors.Join(fnErr, relErr)
	}
	// A loss between fn's return and the release does not matter: fn
	// finished while the lease was trusted.
	return fnErr
}

// Close releases every lease this Locker holds, waits for clean-ups in
// flight (freeing leases that were lost or whose acquire outcome was
// unknown), and makes later acquires return ErrClosed. ctx bounds the wait.
// It does not close the store. The leases' contexts are cancelled before the
// store is asked to free them.
func (lk *Locker) Close(ctx context.Context) error {
	lk.mu.Lock()
	lk.closed = true
	var leases []*Lease
	for _, l := range lk.held {
		if l != nil {
			leases = append(leases, l)
		}
	}
	lk.mu.Unlock()
	var errs []error
	for _, l := range leases {
		if err := l.Release(ctx); err != nil && !errors.Is(err, ErrLeaseLost) {
			errs = append(errs, err)
		}
	}
	select {
	case <-lk.backgroundIdle():
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("tenure: close: clean-ups still running: %w", context.Cause(ctx)))
	}
	return errors.Join(errs...)
}

// reserve marks resource as being acquired by this Locker.
func (lk *Locker) reserve(resource string) error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.closed {
		return ErrClosed
	}
	if l, ok := lk.held[resource]; ok {
		rec := Record{Resource: resource, Owner: lk.owner}
		if l != nil {
			rec.Token = l.token
			rec.TTL = l.ttl
			rec.Remaining = max(0, l.Deadline().Sub(lk.clock.Now()))
		}
		return &HeldError{Holder: rec}
	}
	lk.held[resource] = nil
	return nil
}

func (lk *Locker) unreserve(resource string) {
	lk.mu.Lock()
	delete(lk.held, resource)
	lk.mu.Unlock()
}

// forget removes l from the held leases, unless another lease replaced it.
func (lk *Locker) forget(l *Lease) {
	lk.mu.Lock()
	if lk.held[l.resource] == l {
		delete(lk.held, l.resource)
	}
	lk.mu.Unlock()
}

// bounded returns ctx limited to d. The limit is in real time even when the
// Locker runs on a fake clock: a store call is I/O, and drivers read
// ctx.Deadline() to bound it.
func (lk *Locker) bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, errCallBound)
}

var errCallBound = fmt.Errorf("tenure: store call ran out of lease time: %w", context.DeadlineExceeded)

// runner runs functions on at most max goroutines, started on demand and
// gone when there is no work: background renewals of any number of leases
// use at most max goroutines.
type runner struct {
	mu      sync.Mutex
	queue   []func()
	running int
	max     int
}

func (r *runner) submit(f func()) {
	r.mu.Lock()
	r.queue = append(r.queue, f)
	if r.running < r.max {
		r.running++
		go r.work()
	}
	r.mu.Unlock()
}

func (r *runner) work() {
	for {
		r.mu.Lock()
		if len(r.queue) == 0 {
			r.running--
			r.mu.Unlock()
			return
		}
		f := r.queue[0]
		r.queue[0] = nil
		r.queue = r.queue[1:]
		r.mu.Unlock()
		f()
	}
}
