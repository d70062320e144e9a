// Package tenure provides distributed leases: a lock on a named resource that
// a store keeps for a TTL unless its holder renews it, with fencing tokens,
// automatic renewal, and a context that is cancelled the moment the lease can
// no longer be trusted.
//
// A Locker is made from a store (store/sqlite for one host, store/cassandra,
// store/postgres, store/etcd or store/redis across hosts, store/memory in
// tests) and acquires leases:
//
//	lk, err := tenure.New(store, tenure.WithOwnerID("indexer-1"))
//	lease, err := lk.Acquire(ctx, "index-cleaner", 30*time.Second)
//	if err != nil { ... }
//	defer lease.Release(context.WithoutCancel(ctx))
//	work(lease.Context(), lease.Token())
//
// The client-side rules (docs/design.md) live here, once, for every store:
// the local deadline is taken from a clock that counts suspended time before
// the request is sent (tSend + TTL·(1−ρ)), renewals run every TTL/3 and each
// is bounded by the time left, a lease is lost exactly once and no later
// than its deadline, every acquire call is a grant of its own that no later
// call adopts, and an operation whose outcome is unknown is resolved, never
// guessed. The store contract is package driver.
package tenure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

// Locker acquires leases from a store on behalf of one owner. It is safe for
// concurrent use. A Locker is not reentrant: while it holds (or is
// acquiring) a resource, TryAcquire of the same resource returns a
// *HeldError naming this Locker's own grant, and Acquire waits.
type Locker struct {
	store driver.Store
	owner string
	grant atomic.Uint64 // number of the last grant made
	clock clock.Clock
	cfg   config
	log   *slog.Logger
	renew *pool // background renewals
	clean *pool // background clean-ups and releases
	sched *scheduler
	tel   *telemetry

	mu       sync.Mutex
	held     map[string]*Lease // nil value: an acquire is in flight
	live     int               // leases in held
	closed   bool
	closeCh  chan struct{}         // closed by Close: wakes waiting Acquires
	watching bool                  // the suspend watch runs
	gates    map[string]*localGate // RWLock shared requests queued for a gate, by resource
	probe    atomic.Bool           // an acquire ended with its outcome unknown: read before writing

	// Store work in flight, which Close waits for: every call or job that
	// may call the store (acquires, renewals, releases, clean-ups, reads)
	// counts in ops from before it looks at what to do until it is done
	// (see begin). A counter and a channel rather than a sync.WaitGroup: a
	// lease can be lost, and start a clean-up, while Close is already
	// waiting, and WaitGroup forbids an Add from zero concurrent with Wait.
	// Guarded by mu.
	ops     int
	opsIdle chan struct{} // closed when ops drops to 0; nil until Close asks
	// abandoned is set when Close gave up waiting: background work still
	// running makes no further attempts.
	abandoned atomic.Bool
}

// New returns a Locker that keeps its leases in store. It returns an error
// wrapping ErrInvalidOwner for a bad owner id, and a plain error for other
// bad options.
func New(store driver.Store, opts ...Option) (*Locker, error) {
	if store == nil {
		return nil, errors.New("tenure: nil store")
	}
	c := newConfig(opts)
	owner, err := naming.NewOwner(c.ownerID)
	if err != nil {
		return nil, err
	}
	switch {
	case c.rho < 0 || c.rho >= 0.5 || c.rho != c.rho:
		return nil, errorf("tenure: drift bound %v is outside [0, 0.5)", c.rho)
	case c.renewInterval < 0:
		return nil, errorf("tenure: renew interval %v is negative", c.renewInterval)
	case c.retry.Base <= 0 || c.retry.Cap < c.retry.Base:
		return nil, errorf("tenure: retry base %v and max %v: need 0 < base <= max", c.retry.Base, c.retry.Cap)
	case c.maxRenewals <= 0:
		return nil, errorf("tenure: max concurrent renewals %d is not positive", c.maxRenewals)
	}
	lk := &Locker{
		store:   store,
		owner:   owner,
		clock:   c.clock,
		cfg:     c,
		log:     c.logger.With("owner", owner),
		renew:   newPool(c.maxRenewals, StuckCallAfter),
		clean:   newPool(c.maxRenewals, StuckCallAfter),
		held:    make(map[string]*Lease),
		closeCh: make(chan struct{}),
	}
	lk.sched = &scheduler{clock: c.clock, submit: lk.submitRenewals}
	if _, ok := store.(driver.BatchRenewer); ok {
		lk.sched.early = batchWindow
	}
	lk.tel = newTelemetry(c.telemetry)
	return lk, nil
}

// Owner returns this Locker's owner: its readable id, "#", and a random
// nonce. Each grant it makes is kept in the store as Owner(), ".", and the
// grant's number (Lease.Owner); Owns tells whether an owner string read from
// the store is one of them.
func (lk *Locker) Owner() string { return lk.owner }

// Owns reports whether owner (as a store reports it, in a Record or a
// *HeldError) names a grant of this Locker.
func (lk *Locker) Owns(owner string) bool {
	return len(owner) > len(lk.owner) && owner[len(lk.owner)] == '.' && strings.HasPrefix(owner, lk.owner)
}

// newGrant returns the owner string of a new grant.
func (lk *Locker) newGrant() string {
	return lk.owner + "." + strconv.FormatUint(lk.grant.Add(1), 10)
}

// Get returns the live lease on resource as the store sees it, or an error
// wrapping ErrNotHeld. After Close it returns ErrClosed.
func (lk *Locker) Get(ctx context.Context, resource string) (Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return Record{}, err
	}
	if !lk.begin() {
		return Record{}, ErrClosed
	}
	defer lk.done()
	return lk.store.Get(ctx, resource)
}

// List returns the live leases whose resource starts with prefix. After
// Close it returns ErrClosed.
func (lk *Locker) List(ctx context.Context, prefix string) ([]Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if !lk.begin() {
		return nil, ErrClosed
	}
	defer lk.done()
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

// MinRenewWindow is the least time a renewal may have to be confirmed: a
// lease's TTL·(1−ρ) less its renew interval (Timing.RenewWindow). Below
// it, delays that no store call avoids (a disk sync, a round trip between
// hosts, the scheduling delay of a loaded machine, a garbage-collection
// pause) outlast the window, so the lease would be lost at its first
// renewal, or its acquire answered past its deadline, however healthy the
// store: CheckTTL refuses such a TTL. With the default renew interval
// (TTL/3) and ρ (0.01), it means a TTL of at least 15.2 ms.
const MinRenewWindow = 10 * time.Millisecond

// Timing says when a Locker renews a lease of one TTL and how long it
// trusts it: the numbers by which the Locker itself renews, trusts and
// retries, for code that schedules work around a lease (the CLI's
// supervisor, election). Locker.Timing returns it.
type Timing struct {
	// TTL is the lease's TTL.
	TTL time.Duration
	// RenewEvery is the interval between background renewals: TTL/3, or
	// the interval set with WithRenewInterval. The next renewal is due
	// RenewEvery after the last confirmed one was sent.
	RenewEvery time.Duration
	// TrustedFor is TTL·(1−ρ): a lease is trusted until TrustedFor after
	// its last confirmed acquire or renewal was sent (Lease.Deadline).
	TrustedFor time.Duration
	// RenewWindow is TrustedFor − RenewEvery: how long each renewal has to
	// be confirmed, its retries included, before the lease is lost; it is
	// also the least time left on a lease renewed on schedule, just before
	// a renewal. CheckTTL refuses a TTL whose RenewWindow is below
	// MinRenewWindow.
	RenewWindow time.Duration
	// DriftBound is ρ (WithDriftBound).
	DriftBound float64
	// RetryBase and RetryMax are the backoff of retries (WithRetry): a
	// failed renewal is retried after a delay drawn from
	// [0, min(RetryBase·2^n, RetryMax, RenewEvery)], never later than half
	// the time left on the lease; a blocking Acquire waits between attempts
	// up to RetryMax.
	RetryBase, RetryMax time.Duration
}

// Timing returns when this Locker renews a lease of ttl and how long it
// trusts it. It makes no I/O and does not check ttl (CheckTTL does).
func (lk *Locker) Timing(ttl time.Duration) Timing {
	every, trust := lk.interval(ttl), lk.trust(ttl)
	return Timing{
		TTL:         ttl,
		RenewEvery:  every,
		TrustedFor:  trust,
		RenewWindow: trust - every,
		DriftBound:  lk.cfg.rho,
		RetryBase:   lk.cfg.retry.Base,
		RetryMax:    lk.cfg.retry.Cap,
	}
}

// minTTL returns the shortest TTL whose RenewWindow is MinRenewWindow, in
// whole milliseconds, rounded up.
func (lk *Locker) minTTL() time.Duration {
	var d float64
	if iv := lk.cfg.renewInterval; iv > 0 {
		d = float64(MinRenewWindow+iv) / (1 - lk.cfg.rho)
	} else {
		d = float64(MinRenewWindow) / (2.0/3 - lk.cfg.rho)
	}
	return (time.Duration(d) + time.Millisecond) / time.Millisecond * time.Millisecond
}

// CheckTTL reports whether ttl can be used for a lease of this Locker,
// without any I/O: it must be positive, within the store's limits
// (driver.TTLChecker: for example whole seconds from 1 s on Cassandra), and
// leave each renewal at least MinRenewWindow to be confirmed (Timing: the
// renew interval, TTL/3 by default, must end MinRenewWindow before
// TTL·(1−ρ)); the error then names the shortest TTL that does. The error
// wraps ErrInvalidTTL. TryAcquire and Acquire make the same check;
// election.New uses it to reject a configuration before anything runs.
func (lk *Locker) CheckTTL(ttl time.Duration) error {
	if err := driver.ValidateTTL(ttl); err != nil {
		return err
	}
	if c, ok := lk.store.(driver.TTLChecker); ok {
		if err := c.CheckTTL(ttl); err != nil {
			return err
		}
	}
	t := lk.Timing(ttl)
	switch {
	case t.RenewEvery <= 0 || t.RenewEvery >= t.TrustedFor:
		return fmt.Errorf("%w: %v: renewals every %v would come after the lease's deadline, TTL·(1−ρ) = %v after the last one was sent", ErrInvalidTTL, ttl, t.RenewEvery, t.TrustedFor)
	case t.RenewWindow < MinRenewWindow:
		return fmt.Errorf("%w: %v is too short: each renewal would have %v to be confirmed (TTL·(1−ρ) = %v less the renew interval %v), less than the %v a disk sync, a network round trip or a pause of a loaded machine can take; use a TTL of at least %v",
			ErrInvalidTTL, ttl, t.RenewWindow, t.TrustedFor, t.RenewEvery, MinRenewWindow, lk.minTTL())
	}
	return nil
}

// TryAcquire makes one attempt to acquire resource for ttl: a new grant,
// with an identity of its own that no later acquire adopts. On success the
// lease is renewed in the background until it is released or lost. When
// another owner (or an earlier grant of this Locker that the store still
// keeps) holds the resource, the error is a *HeldError (errors.Is ErrHeld)
// naming the holder. Bad input returns ErrInvalidResource or ErrInvalidTTL
// before any I/O. When the store's answer is lost, TryAcquire resolves the
// outcome by retrying as the same grant (the store renews a lease its grant
// already holds) until the lease's would-be deadline; if it stays unknown,
// the error wraps ErrUnknownOutcome and whatever it may have taken is freed
// in the background. After Close it returns ErrClosed. Other store errors
// are wrapped with %w.
//
// The lease's context derives from ctx's values but not from its
// cancellation: cancelling ctx after TryAcquire returns does not end the
// lease.
func (lk *Locker) TryAcquire(ctx context.Context, resource string, ttl time.Duration) (*Lease, error) {
	return lk.tryAcquireWith(ctx, resource, ttl, grantOpts{})
}

// grantOpts are what a shared/exclusive lock (RWLock) asks of a grant
// beyond a plain lease's; the zero value is a plain lease.
type grantOpts struct {
	// mark ends the grant's owner string (see naming.IsSharedRequest).
	mark string
	// fence, when not zero, is the fencing token the lease reports
	// (Lease.Token) instead of the store's token of its own name.
	fence uint64
}

func (lk *Locker) tryAcquireWith(ctx context.Context, resource string, ttl time.Duration, g grantOpts) (*Lease, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return nil, err
	}
	if err := lk.CheckTTL(ttl); err != nil {
		return nil, err
	}
	if !lk.begin() {
		return nil, ErrClosed
	}
	defer lk.done()
	sctx, span := lk.tel.start(ctx, "tenure.acquire", resource)
	lease, err := lk.tryAcquire(ctx, sctx, resource, ttl, g)
	lk.tel.acquired(sctx, span, resource, lease, err)
	if err != nil {
		err = lk.ownHolder(err)
	}
	return lease, err
}

// ownHolder adds to a *HeldError that names this Locker's own grant (or
// its acquire of the resource still in flight) that it does: a Locker is
// not reentrant, and "held by" an owner string that looks like any other
// does not say that the caller itself holds the resource.
func (lk *Locker) ownHolder(err error) error {
	var held *HeldError
	if !errors.As(err, &held) {
		return err
	}
	owner := held.Holder.Owner
	switch {
	case owner == lk.owner:
		return fmt.Errorf("%w; the holder is this Locker's own acquire of it, still in flight (a Locker is not reentrant)", err)
	case !lk.Owns(owner):
		return err
	case strings.HasSuffix(owner, naming.KeptOwner("")):
		return fmt.Errorf("%w; the holder is this Locker's own earlier grant, kept by ReleaseAfter until it expires", err)
	}
	return fmt.Errorf("%w; the holder is this Locker's own earlier grant (a Locker is not reentrant: release that lease first)", err)
}

// tryAcquire makes the store calls with ctx (which carries tenure's span)
// and derives the lease's context from parent (the caller's).
func (lk *Locker) tryAcquire(parent, ctx context.Context, resource string, ttl time.Duration, g grantOpts) (*Lease, error) {
	if err := lk.reserve(resource); err != nil {
		return nil, err
	}
	owner := lk.newGrant() + g.mark
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
			return nil, errorf("tenure: acquire %q: not writing until the store answers (earlier answers were lost): %w", resource, err)
		case err == nil:
			lk.probe.Store(false)
			lk.unreserve(resource)
			return nil, &HeldError{Holder: cur}
		}
		lk.probe.Store(false)
	}
	if ctx.Err() != nil {
		lk.unreserve(resource)
		return nil, errorf("tenure: acquire %q: %w", resource, context.Cause(ctx))
	}
	tSend := lk.clock.Now()
	cctx, cancel := lk.bounded(ctx, trust)
	rec, err := lk.storeAcquire(cctx, resource, owner, ttl)
	interrupted := cctx.Err() != nil
	cancel()
	if err == nil {
		return lk.grantLease(parent, resource, owner, ttl, rec, tSend, g.fence)
	}
	if interrupted && !definite(err) {
		// The call ended with its context (the caller gave up, or the
		// bound ran out) after the request may have been sent: whatever
		// the driver says, the store may have applied it.
		err = driver.UnknownOutcome(err)
	}
	if !errors.Is(err, ErrUnknownOutcome) {
		lk.unreserve(resource)
		var held *HeldError
		if errors.As(err, &held) {
			return nil, err
		}
		return nil, errorf("tenure: acquire %q: %w", resource, err)
	}
	return lk.resolveAcquire(parent, ctx, resource, owner, ttl, tSend, err, g.fence)
}

// resolveAcquire settles an acquire whose answer was lost (design rule 6):
// retrying as the same grant is safe because the store treats an acquire by
// the owner string that holds the lease as a renewal of the same lease. If
// the first attempt was applied, its lease lives at least until tSend+TTL,
// so any answer before tSend+TTL·(1−ρ) that names another holder proves it
// was not.
func (lk *Locker) resolveAcquire(parent, ctx context.Context, resource, owner string, ttl time.Duration, tSend time.Time, cause error, fence uint64) (*Lease, error) {
	until := tSend.Add(lk.trust(ttl))
	lk.log.Warn("acquire outcome unknown; resolving", "resource", resource, "err", cause)
	lk.tel.unknownOutcome(ctx, resource, "acquire")
	lastErr := cause
	for attempt := 0; ; attempt++ {
		if lk.abandoned.Load() || !lk.sleep(ctx, lk.cfg.retry.Delay(attempt), until) {
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
		if err == nil && cur.Owner != owner {
			lk.log.Info("acquire outcome resolved: not granted", "resource", resource, "holder", cur.Owner)
			lk.unreserve(resource)
			return nil, &HeldError{Holder: cur}
		}
		now = lk.clock.Now()
		if !now.Before(until) {
			break
		}
		cctx, cancel = lk.bounded(ctx, until.Sub(now))
		rec, err := lk.storeAcquire(cctx, resource, owner, ttl)
		cancel()
		if err == nil {
			lk.log.Info("acquire outcome resolved: granted", "resource", resource, "token", rec.Token)
			return lk.grantLease(parent, resource, owner, ttl, rec, now, fence)
		}
		if errors.As(err, &held) {
			lk.log.Info("acquire outcome resolved: not granted", "resource", resource, "holder", held.Holder.Owner)
			lk.unreserve(resource)
			return nil, err
		}
		if errors.Is(err, ErrInvalidTTL) || errors.Is(err, ErrInvalidResource) || errors.Is(err, ErrInvalidOwner) {
			lk.unreserve(resource)
			return nil, errorf("tenure: acquire %q: %w", resource, err)
		}
		lastErr = err
	}
	// Still unknown: free whatever the lost attempt may have taken, so that no
	// orphan blocks others for a whole TTL, then report the outcome as unknown.
	// Until a read succeeds again, later acquires probe before they write.
	lk.probe.Store(true)
	lk.unreserve(resource)
	lk.cleanup(resource, owner, ttl)
	return nil, errorf("tenure: acquire %q: %w", resource, driver.UnknownOutcome(lastErr))
}

// cleanup frees, in the background, the lease that this grant (owner) may
// hold on resource: an acquire whose outcome stayed unknown, or one whose
// answer came too late. The store applied it no later than now, so it
// expires within ttl from now: cleanup tries until then.
func (lk *Locker) cleanup(resource, owner string, ttl time.Duration) {
	until := lk.clock.Now().Add(ttl)
	lk.background(until, func() {
		for attempt := 0; ; attempt++ {
			now := lk.clock.Now()
			if !now.Before(until) {
				return
			}
			ctx, cancel := lk.bounded(context.Background(), until.Sub(now))
			rec, err := lk.store.Get(ctx, resource)
			if err == nil && rec.Owner == owner {
				err = lk.store.Release(ctx, resource, owner, rec.Token)
				if err == nil {
					lk.log.Info("freed a lease whose acquire outcome was unknown", "resource", resource, "token", rec.Token)
				}
			}
			cancel()
			if err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLeaseLost) || !transient(err) {
				return
			}
			if lk.abandoned.Load() || !lk.sleep(context.Background(), lk.cfg.retry.Delay(attempt), until) {
				return
			}
		}
	})
}

// grantLease turns a store's confirmation into a Lease trusted until
// tSend+TTL·(1−ρ). fence, when not zero, is the token the lease reports.
func (lk *Locker) grantLease(ctx context.Context, resource, owner string, ttl time.Duration, rec Record, tSend time.Time, fence uint64) (*Lease, error) {
	if rec.Owner != owner || rec.Resource != resource {
		lk.unreserve(resource)
		return nil, errorf("tenure: acquire %q: the store answered with a lease of %q on %q", resource, rec.Owner, rec.Resource)
	}
	deadline := tSend.Add(lk.trust(ttl))
	now := lk.clock.Now()
	if !now.Before(deadline) {
		// The answer came after the lease's deadline (a pause, a slow store):
		// it may already belong to someone else. Free it and say so.
		lk.unreserve(resource)
		lk.cleanup(resource, owner, ttl)
		return nil, errorf("tenure: acquire %q: %w: the store's answer arrived %v after the request, past the lease's deadline", resource, ErrLeaseLost, now.Sub(tSend))
	}
	l := newLease(lk, ctx, resource, owner, ttl, rec.Token, tSend, deadline)
	if fence != 0 {
		l.fence = fence
	}
	lk.mu.Lock()
	closed := lk.closed
	lk.held[resource] = l
	lk.live++
	if !lk.watching {
		lk.startWatchLocked()
	}
	lk.mu.Unlock()
	l.start(now)
	if lk.cfg.watchRelease && !naming.IsSharedRequest(owner) {
		// A shared request holds an RWLock's gate for two store calls:
		// not worth a watch.
		lk.watchRelease(l)
	}
	if closed {
		// Close ran while this acquire was in flight: give the lease back.
		_ = l.Release(context.WithoutCancel(ctx))
		return nil, ErrClosed
	}
	lk.log.Debug("lease granted", "resource", resource, "token", rec.Token, "ttl", ttl)
	return l, nil
}

// watchRelease renews l at once whenever the store notifies that its
// resource may have been released (WithReleaseWatch), so a lease freed by
// someone else is lost within a round trip.
func (lk *Locker) watchRelease(l *Lease) {
	n, ok := lk.store.(driver.Notifier)
	if !ok {
		return
	}
	subscribe := n.Subscribe
	if w, ok := lk.store.(driver.Watcher); ok {
		subscribe = w.Watch
	}
	ch, stop, err := subscribe(l.opCtx, l.resource)
	if err != nil {
		lk.log.Warn("release notifications unavailable; the lease learns of a loss at its next renewal", "resource", l.resource, "err", err)
		return
	}
	lk.mu.Lock()
	lk.ops++ // under way: part of the acquire that granted l
	lk.mu.Unlock()
	go func() {
		defer lk.done()
		defer stop()
		for {
			select {
			case <-l.opCtx.Done():
				return
			case <-ch:
				_ = l.renew(l.opCtx)
			}
		}
	}()
}

// AcquireOption configures one blocking Acquire.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	onWait       func(holder *HeldError, waited time.Duration)
	onSlotsWait  func(held *SlotsHeldError, waited time.Duration)
	onSharedWait func(held *SharedHeldError, waited time.Duration)
	grant        grantOpts // set by RWLock for its gate
}

// OnWait sets a function that Acquire calls after each attempt that found
// the resource held, with the holder and the time waited so far. The CLI
// uses it to show who holds a lease.
func OnWait(f func(holder *HeldError, waited time.Duration)) AcquireOption {
	return func(c *acquireConfig) { c.onWait = f }
}

// Acquire blocks until resource is granted for ttl or ctx ends. Between
// attempts it waits with capped exponential backoff and full jitter (see
// WithRetry), or less when the store notifies a release (driver.Notifier).
// When ctx ends first, the error wraps ctx's error and the last attempt's
// error (a *HeldError when the resource was held). Bad input returns at
// once, and so does a store error on the first attempt (an unreachable store
// fails fast); store errors on later attempts are logged and retried,
// except ErrStoreUnusable (a store that must be opened again), which is
// returned at once. Close ends the wait with ErrClosed.
func (lk *Locker) Acquire(ctx context.Context, resource string, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	var ac acquireConfig
	for _, o := range opts {
		if o != nil { // a nil option chooses nothing
			o(&ac)
		}
	}
	if err := driver.ValidateResource(resource); err != nil {
		return nil, err
	}
	if err := lk.CheckTTL(ttl); err != nil {
		return nil, err
	}
	// Counted as a whole, so that Close waits until its subscription ended.
	if !lk.begin() {
		return nil, ErrClosed
	}
	defer lk.done()
	// Subscribe to release notifications only once the resource was found
	// held (an uncontended acquire costs no subscription), then try again at
	// once, so that a release between the attempt and the subscription is
	// not missed.
	var w waker
	defer w.end()
	start := lk.clock.Now()
	var held *HeldError
	var lastErr error
	attemptCtx := ctx // marked once the resource was found held (reserve.go)
	defer lk.stopWaiting(&attemptCtx, resource)
	for attempt := 0; ; attempt++ {
		lease, err := lk.tryAcquireWith(attemptCtx, resource, ttl, ac.grant)
		if err == nil {
			w.settled()
			return lease, nil
		}
		if _, ok := lk.store.(driver.Reserver); ok && !w.subscribed && errors.As(err, &held) {
			// On a store that keeps reservations, the first held answer
			// is followed at once by an attempt as the waiter, which
			// reserves the resource before the holder can release it and
			// take it again; waiting for the next attempt (a backoff, or
			// the subscription's first poll on MySQL) would leave the
			// holder those rounds.
			attemptCtx = waiting(ctx)
			if lease, err = lk.tryAcquireWith(attemptCtx, resource, ttl, ac.grant); err == nil {
				w.settled()
				return lease, nil
			}
		}
		if !w.subscribed && errors.As(err, &held) && w.subscribe(ctx, lk, resource) {
			if lease, err = lk.tryAcquireWith(attemptCtx, resource, ttl, ac.grant); err == nil {
				w.settled()
				return lease, nil
			}
		}
		var remaining time.Duration // the holder's, when the store said
		switch {
		case errors.As(err, &held):
			attemptCtx = waiting(ctx)
			w.settled()
			lastErr = err
			remaining = held.Holder.Remaining
			if ac.onWait != nil {
				ac.onWait(held, lk.clock.Now().Sub(start))
			}
		case ctx.Err() != nil && lastErr != nil:
			// ctx ended during an attempt of a wait: the error says what
			// the wait met (the holder) as well as the attempt's.
			return nil, fmt.Errorf("%w (gave up waiting after %v: %w)", lastErr, lk.clock.Now().Sub(start).Round(time.Millisecond), err)
		case attempt == 0 || !transient(err) || ctx.Err() != nil:
			// The first attempt fails fast (an unreachable or misconfigured
			// store); bad input, a closed Locker and an unusable store never
			// get better.
			return nil, err
		default:
			// A store error during a long wait: ride it out.
			lastErr = err
			lk.log.Warn("acquire attempt failed; retrying", "resource", resource, "err", err)
		}
		if err := w.wait(ctx, lk, lk.waitDelay(attempt, w.notify != nil, remaining)); err != nil {
			if errors.Is(err, ErrClosed) {
				return nil, err
			}
			return nil, fmt.Errorf("%w (gave up waiting after %v: %w)", lastErr, lk.clock.Now().Sub(start).Round(time.Millisecond), err)
		}
	}
}

// waker is a blocking Acquire's subscription to release notifications. A
// wake-up it took is owed to the other waiters until an attempt settles it
// (the resource was granted, or found held); a waiter that ends its
// subscription still owing one passes it on (see driver.Notifier).
type waker struct {
	subscribed bool
	notify     <-chan struct{}
	stop       func()
	giveUp     context.CancelFunc // ends the subscription's context: passes the wake-up on
	owed       bool
}

// subscribe subscribes to resource's release notifications, where the store
// sends them, and reports whether it did. It is tried once.
func (w *waker) subscribe(ctx context.Context, lk *Locker, resource string) bool {
	w.subscribed = true
	n, ok := lk.store.(driver.Notifier)
	if !ok {
		return false
	}
	sctx, giveUp := context.WithCancel(ctx)
	ch, stop, err := n.Subscribe(sctx, resource)
	if err != nil {
		giveUp()
		lk.log.Warn("release notifications unavailable; polling", "resource", resource, "err", err)
		return false
	}
	w.notify, w.stop, w.giveUp = ch, stop, giveUp
	return true
}

// wait waits as Locker.wait does; a wake-up it takes is owed until settled.
func (w *waker) wait(ctx context.Context, lk *Locker, d time.Duration) error {
	woken, err := lk.wait(ctx, d, w.notify)
	if woken {
		w.owed = true
	}
	return err
}

// settled records that an attempt acted on the wake-ups taken so far.
func (w *waker) settled() { w.owed = false }

// end ends the subscription, passing on a wake-up still owed.
func (w *waker) end() {
	if w.stop == nil {
		return
	}
	if w.owed {
		w.giveUp()
	}
	w.stop()
	w.giveUp()
}

// notifiedPollEvery bounds, in retry intervals, how long a waiter that gets
// release notifications sleeps without asking the store: a safety net for
// a notification that never came.
const notifiedPollEvery = 10

// waitDelay returns how long a blocking acquire waits before its next
// attempt. Without release notifications it polls with backoff (full
// jitter, capped at the retry interval). With them, a release wakes it, so
// it needs to look only when the holder's lease would expire (remaining, as
// the store last reported it, plus a little jitter so that waiters do not
// come in step), and at least every notifiedPollEvery retry intervals: a
// hand-over then costs a few store calls whatever the number of waiters,
// while a holder that dies is still replaced within its TTL and a retry
// interval.
func (lk *Locker) waitDelay(attempt int, notified bool, remaining time.Duration) time.Duration {
	backoff := lk.cfg.retry.Delay(attempt)
	if !notified || remaining <= 0 {
		return backoff
	}
	jitter := time.Duration(rand.Int64N(int64(lk.cfg.retry.Base) + 1))
	return min(remaining+jitter, notifiedPollEvery*lk.cfg.retry.Cap)
}

// definite reports whether a store error says for sure what happened: the
// resource is held by another owner, or the input was refused before any
// I/O.
func definite(err error) bool {
	return errors.Is(err, ErrHeld) || errors.Is(err, ErrLeaseLost) || !transient(err)
}

// transient reports whether an acquire error may go away by itself.
func transient(err error) bool {
	return !errors.Is(err, ErrInvalidResource) && !errors.Is(err, ErrInvalidTTL) &&
		!errors.Is(err, ErrInvalidOwner) && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrStoreUnusable)
}

// wait sleeps for d on the Locker's clock, or until notify fires (then
// woken is true), or until ctx ends (then it returns ctx's cause), or until
// Close (ErrClosed).
func (lk *Locker) wait(ctx context.Context, d time.Duration, notify <-chan struct{}) (woken bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, context.Cause(ctx)
	}
	t := lk.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return false, nil
	case <-notify:
		return true, nil
	case <-ctx.Done():
		return false, context.Cause(ctx)
	case <-lk.closeCh:
		return false, ErrClosed
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
	t := lk.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return lk.clock.Now().Before(until)
	case <-ctx.Done():
		return false
	}
}

// Do acquires resource (blocking, like Acquire), runs fn with the lease's
// context, and releases the lease on every exit of fn, a panic included
// (the panic then goes on up the stack: field case C12). fn's context is
// cancelled when the lease is lost or when ctx ends; like Lease.Context, it
// reads the clock on every Err, Done and Value call, so after a pause or a
// suspend past the deadline fn sees the loss at its first check. Do returns fn's error;
// if the lease was lost while fn ran, the result also wraps the loss cause
// (errors.Is ErrLeaseLost), and a failed release is joined to it. fn must
// stop when its context is cancelled.
func (lk *Locker) Do(ctx context.Context, resource string, ttl time.Duration, fn func(ctx context.Context) error) (err error) {
	lease, err := lk.Acquire(ctx, resource, ttl)
	if err != nil {
		return err
	}
	inner, cancel := context.WithCancel(lease.Context())
	// fn's context reads the clock on every Err, Done and Value, as the
	// lease's own does: a context merely derived from it waits for the
	// watchdog timer, which fires late after a pause or a suspend.
	fctx := &leaseContext{Context: inner, l: lease}
	stop := context.AfterFunc(ctx, cancel)
	returned := false
	defer func() {
		stop()
		cancel()
		if returned {
			return
		}
		// fn panicked: free the lease before the panic goes on.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
		defer rcancel()
		_ = lease.Release(rctx)
	}()
	fnErr := fn(fctx)
	returned = true
	lostErr := lease.Err()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
	defer rcancel()
	relErr := lease.Release(rctx)
	if lostErr != nil && !errors.Is(lostErr, ErrReleased) {
		return errors.Join(fnErr, lostErr)
	}
	if relErr != nil && !errors.Is(relErr, ErrLeaseLost) && !errors.Is(relErr, ErrReleased) {
		return errors.Join(fnErr, relErr)
	}
	// A loss between fn's return and the release does not matter: fn
	// finished while the lease was trusted.
	return fnErr
}

// Close makes later and waiting acquires (and reads through the Locker)
// return ErrClosed, releases every lease this Locker holds (their contexts
// are cancelled before the store is asked to free them), and waits for
// every store call the Locker started: acquires, renewals, releases (those
// of leases released by their holders too) and clean-ups (freeing leases
// that were lost or whose acquire outcome was unknown), so that once it
// returns nil no store call of this Locker is in flight and none starts;
// the store may then be closed. ctx bounds the wait: when it ends first,
// the calls still in flight are reported in the error and make no further
// attempts. It does not close the store. It is safe to call more than once
// and concurrently with the Locker's other methods.
func (lk *Locker) Close(ctx context.Context) error {
	lk.mu.Lock()
	if !lk.closed {
		lk.closed = true
		close(lk.closeCh)
	}
	var leases []*Lease
	for _, l := range lk.held {
		if l != nil {
			leases = append(leases, l)
		}
	}
	lk.mu.Unlock()
	errs := make([]error, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Release(ctx); err != nil && !errors.Is(err, ErrLeaseLost) && !errors.Is(err, ErrReleased) {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	idle := lk.idle()
	select {
	case <-idle:
	case <-ctx.Done():
		// Both may be ready (a ctx that had ended before Close was
		// called): nothing in flight is nothing to report.
		select {
		case <-idle:
		default:
			lk.abandoned.Store(true)
			errs = append(errs, errorf("tenure: close: store calls still in flight (acquires, releases or clean-ups), which make no further attempts: %w", context.Cause(ctx)))
		}
	}
	return errors.Join(errs...)
}

// begin counts store work that is about to start (see Locker.ops); it
// reports false after Close, and then the work must not start. Every begin
// that returned true is matched by a done.
func (lk *Locker) begin() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.closed {
		return false
	}
	lk.ops++
	return true
}

// done ends store work counted by begin (or by end, lose and background).
func (lk *Locker) done() {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	lk.ops--
	if lk.ops == 0 && lk.opsIdle != nil {
		close(lk.opsIdle)
		lk.opsIdle = nil
	}
}

// idle returns a channel closed once no store work is in flight.
func (lk *Locker) idle() <-chan struct{} {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.ops == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if lk.opsIdle == nil {
		lk.opsIdle = make(chan struct{})
	}
	return lk.opsIdle
}

// background runs f (a clean-up or a release) on the clean-up pool, due by
// until; Close waits for it. It is called by work already counted, so it
// runs after Close too: that work started before Close returned.
func (lk *Locker) background(until time.Time, f func()) {
	lk.mu.Lock()
	lk.ops++
	lk.mu.Unlock()
	lk.clean.submit(until, func() {
		defer lk.done()
		f()
	})
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
			rec.Owner = l.owner
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
	if lk.held[resource] == nil {
		delete(lk.held, resource)
	}
	lk.mu.Unlock()
}

// forgetLocked removes l from the held leases, unless another lease
// replaced it. lk.mu is held.
func (lk *Locker) forgetLocked(l *Lease) {
	if lk.held[l.resource] == l {
		delete(lk.held, l.resource)
		lk.live--
	}
}

// Renewals in batches, for stores that renew many leases in one request.
const (
	// batchWindow: renewals due within this much of each other are sent
	// together (a renewal sent this much early costs nothing).
	batchWindow = 50 * time.Millisecond
	// maxBatch bounds the leases of one batch.
	maxBatch = 1000
)

// submitRenewals queues the renewals that came due: one job per lease, or
// one per batch of up to maxBatch leases when the store is a
// driver.BatchRenewer.
func (lk *Locker) submitRenewals(due []*Lease) {
	b, ok := lk.store.(driver.BatchRenewer)
	if !ok || len(due) == 1 {
		for _, l := range due {
			lk.renew.submit(l.Deadline(), l.backgroundRenew)
		}
		return
	}
	// A semaphore's marker renews with an acquire (Lease.renewMarker),
	// which no batch carries.
	batch := due[:0:0]
	for _, l := range due {
		if l.isMarker {
			lk.renew.submit(l.Deadline(), l.backgroundRenew)
		} else {
			batch = append(batch, l)
		}
	}
	due = batch
	for len(due) > 0 {
		n := min(len(due), maxBatch)
		chunk := due[:n:n]
		due = due[n:]
		first := chunk[0].Deadline()
		for _, l := range chunk[1:] {
			if d := l.Deadline(); d.Before(first) {
				first = d
			}
		}
		lk.renew.submit(first, func() { lk.renewBatch(b, chunk) })
	}
}

// renewBatch renews leases in one store call and applies each answer as a
// background renewal would.
func (lk *Locker) renewBatch(b driver.BatchRenewer, leases []*Lease) {
	if !lk.begin() {
		return // Close releases the leases
	}
	defer lk.done()
	now := lk.clock.Now()
	reqs := make([]driver.Renewal, 0, len(leases))
	live := make([]*Lease, 0, len(leases))
	dues := make([]time.Time, 0, len(leases))
	var bound time.Duration
	for _, l := range leases {
		l.mu.Lock()
		held, left := l.state == stateHeld, l.deadline.Sub(now)
		l.mu.Unlock()
		switch {
		case !held:
		case left <= 0:
			l.check()
		default:
			reqs = append(reqs, driver.Renewal{Resource: l.resource, Owner: l.owner, Token: l.token, TTL: l.ttl})
			live = append(live, l)
			dues = append(dues, lk.sched.due(l))
			bound = max(bound, left)
		}
	}
	if len(live) == 0 {
		return
	}
	// Bounded by the longest time left: an answer that comes after a
	// lease's own deadline does not revive it (Lease.confirm).
	ctx, cancel := lk.bounded(context.Background(), bound)
	tSend := lk.clock.Now()
	errs := b.RenewBatch(ctx, reqs)
	cancel()
	took := lk.clock.Now().Sub(tSend)
	for i, l := range live {
		err := errMissingAnswer
		if i < len(errs) {
			err = errs[i]
		}
		lk.tel.renewed(context.Background(), nil, l.resource, took, err)
		l.afterBackground(l.settle(tSend, err), dues[i])
	}
}

var errMissingAnswer = errors.New("tenure: the store's batch renewal returned no answer for this lease")

// suspendCheckEvery is how often a Locker that holds leases asks its clock
// whether the machine was suspended (clock.Suspender).
const suspendCheckEvery = 250 * time.Millisecond

// startWatchLocked starts the suspend watch: Go's timers run on the
// monotonic clock, which stops during a suspend, so after a resume the
// watchdogs would fire late by the time suspended. The watch checks every
// lease's deadline, and runs due renewals, as soon as the clock reports a
// suspend. It runs while the Locker holds leases, and stops at the first
// tick that finds none.
func (lk *Locker) startWatchLocked() {
	s, ok := lk.clock.(clock.Suspender)
	if !ok {
		return
	}
	lk.watching = true
	last := s.Suspended()
	go func() {
		t := time.NewTicker(suspendCheckEvery)
		defer t.Stop()
		for range t.C {
			lk.mu.Lock()
			if lk.live == 0 {
				lk.watching = false
				lk.mu.Unlock()
				return
			}
			lk.mu.Unlock()
			if cur := s.Suspended(); cur != last {
				last = cur
				lk.log.Info("the machine was suspended; checking leases", "suspended", cur)
				lk.checkAll()
			}
		}
	}()
}

// checkAll ends every lease whose deadline has passed and runs the
// renewals that are due.
func (lk *Locker) checkAll() {
	lk.mu.Lock()
	leases := make([]*Lease, 0, lk.live)
	for _, l := range lk.held {
		if l != nil {
			leases = append(leases, l)
		}
	}
	lk.mu.Unlock()
	for _, l := range leases {
		l.check()
	}
	lk.sched.kick()
}

// bounded returns ctx limited to d. The limit is in real time even when the
// Locker runs on a fake clock: a store call is I/O, and drivers read
// ctx.Deadline() to bound it. A ctx whose deadline comes first is returned
// as it is: a derived context (a runtime timer, and an entry in ctx's list
// of children) would change nothing.
func (lk *Locker) bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, noCancel
	}
	return context.WithTimeoutCause(ctx, d, errCallBound)
}

func noCancel() {}

var errCallBound = errorf("tenure: store call ran out of lease time: %w", context.DeadlineExceeded)
