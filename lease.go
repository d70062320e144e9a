package tenure

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tenure-go/tenure/driver"
)

type leaseState int

const (
	stateHeld leaseState = iota
	stateLost
	stateReleased
)

// Lease is a granted lease. It is renewed in the background every TTL/3 (or
// WithRenewInterval) until it is released or lost. All methods are safe for
// concurrent use.
//
// The lease may be trusted until Deadline, which is computed from the
// monotonic clock reading taken before the confirming request was sent:
// tSend + TTL·(1−ρ). Err, Context().Err() and Context().Done() compare the
// clock with the deadline on every call, so a check made right after the
// process resumes from a pause longer than the TTL already reports the loss,
// before any timer fires.
type Lease struct {
	lk       *Locker
	resource string
	token    uint64
	ttl      time.Duration
	trust    time.Duration
	interval time.Duration

	ctx      *leaseContext
	cancel   context.CancelCauseFunc
	opCtx    context.Context // cancelled when the lease ends: aborts store calls in flight
	opCancel context.CancelFunc

	mu       sync.Mutex
	state    leaseState
	cause    error
	deadline time.Time
	lastSend time.Time // tSend of the last confirmed acquire or renew
	watchdog clockwork.Timer
	failures int // consecutive failed background renewals

	sched *schedEntry // guarded by the Locker's scheduler
}

func newLease(lk *Locker, parent context.Context, resource string, ttl time.Duration, token uint64, tSend, deadline time.Time) *Lease {
	l := &Lease{
		lk:       lk,
		resource: resource,
		token:    token,
		ttl:      ttl,
		trust:    lk.trust(ttl),
		interval: lk.interval(ttl),
		deadline: deadline,
		lastSend: tSend,
	}
	inner, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	l.ctx = &leaseContext{Context: inner, l: l}
	l.cancel = cancel
	l.opCtx, l.opCancel = context.WithCancel(context.Background())
	return l
}

// start arms the watchdog at the deadline and the first renewal.
func (l *Lease) start(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watchdog = l.lk.clock.AfterFunc(l.deadline.Sub(now), l.check)
	l.scheduleLocked(l.lastSend.Add(l.interval).Sub(now))
	l.lk.tel.leaseStarted(l.resource)
}

// Resource returns the name of the leased resource.
func (l *Lease) Resource() string { return l.resource }

// Owner returns the owner string the store keeps for this lease.
func (l *Lease) Owner() string { return l.lk.owner }

// Token returns the fencing token: it strictly increases with every new grant
// of the resource. Pass it to what the lease protects so it can reject
// writes of an older holder. Zero means that the store mode keeps no token
// (Cassandra's Jaeger-compatible mode).
func (l *Lease) Token() uint64 { return l.token }

// TTL returns the TTL requested for the lease.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Deadline returns the local time until which the lease may be trusted, on
// the Locker's clock (monotonic for the real clock). It moves forward with
// every confirmed renewal.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Err returns nil while the lease may be trusted, and otherwise the cause of
// its end, which wraps ErrLeaseLost (ErrReleased after Release). It reads the
// clock itself.
func (l *Lease) Err() error {
	l.check()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// Context returns a context that is cancelled the moment the lease can no
// longer be trusted, with a cause (context.Cause) that wraps ErrLeaseLost.
// Its Err, Done and Value methods read the clock on every call; contexts
// derived from it are cancelled by the watchdog timer at the deadline,
// which may run a little later after a pause, so check the lease's own
// context (or Err) right before an action that needs the lease, and pass
// the fencing token along.
func (l *Lease) Context() context.Context { return l.ctx }

// Done returns a channel that is closed when the lease is lost or released.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// check ends the lease if its deadline has passed.
func (l *Lease) check() {
	l.mu.Lock()
	now := l.lk.clock.Now()
	expired := l.state == stateHeld && !now.Before(l.deadline)
	since := now.Sub(l.lastSend)
	l.mu.Unlock()
	if expired {
		l.lose(fmt.Errorf("%w: no renewal of %q was confirmed in time (the last confirmed one was sent %v ago; TTL %v)",
			ErrLeaseLost, l.resource, since.Round(time.Millisecond), l.ttl), reasonDeadline, false)
	}
}

// Loss reasons, for logs and metrics.
const (
	reasonDeadline = "deadline"
	reasonNotOwner = "not_owner"
)

// lose ends a held lease exactly once: cancel the context with cause, abort
// store calls in flight, run the loss callback. Unless the store said the
// lease is gone (definite), it also tries once to free it in the store, so
// that a holder that lost it locally does not block others for a whole TTL.
func (l *Lease) lose(cause error, reason string, definite bool) {
	l.mu.Lock()
	if l.state != stateHeld {
		l.mu.Unlock()
		return
	}
	l.state = stateLost
	l.cause = cause
	l.stopTimersLocked()
	l.mu.Unlock()

	l.cancel(cause)
	l.opCancel()
	l.lk.log.Warn("lease lost", "resource", l.resource, "token", l.token, "reason", reason, "cause", cause)
	l.lk.tel.leaseLost(l.resource, reason)
	if f := l.lk.cfg.onLost; f != nil {
		go f(l, cause)
	}
	if definite {
		l.lk.forget(l)
		return
	}
	// One conditional release, bounded by the TTL: a renewal sent before the
	// loss may still have been applied, so the store may keep the lease up
	// to a TTL from now.
	l.lk.background(func() {
		defer l.lk.forget(l)
		ctx, cancel := l.lk.bounded(context.Background(), l.ttl)
		defer cancel()
		if err := l.lk.store.Release(ctx, l.resource, l.lk.owner, l.token); err == nil {
			l.lk.log.Info("freed a lost lease in the store", "resource", l.resource, "token", l.token)
		}
	})
}

func (l *Lease) stopTimersLocked() {
	if l.watchdog != nil {
		l.watchdog.Stop()
	}
	l.lk.sched.cancel(l)
}

func (l *Lease) scheduleLocked(d time.Duration) {
	l.lk.sched.schedule(l, l.lk.clock.Now().Add(max(d, 0)))
}

// backgroundRenew renews once and schedules the next renewal: at the
// interval after the confirmed request was sent, or after a backoff delay
// when it failed with a transient error. The watchdog ends the lease at the
// deadline whatever happens here.
func (l *Lease) backgroundRenew() {
	err := l.renew(l.opCtx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		return
	}
	now := l.lk.clock.Now()
	if err == nil {
		l.failures = 0
		l.scheduleLocked(l.lastSend.Add(l.interval).Sub(now))
		return
	}
	l.lk.log.Warn("renewal failed; retrying until the deadline", "resource", l.resource, "token", l.token, "err", err, "left", l.deadline.Sub(now))
	p := l.lk.cfg.retry
	p.Cap = min(p.Cap, l.interval)
	d := p.Delay(l.failures)
	l.failures++
	if now.Add(d).Before(l.deadline) {
		l.scheduleLocked(d)
	}
}

// Renew renews the lease now, outside the background schedule. It returns
// nil when the store confirmed the renewal (the deadline then moves to the
// request's send time + TTL·(1−ρ)); an error wrapping ErrLeaseLost when the
// lease is lost (the store no longer has this owner and token, or the
// deadline passed); or the store's error wrapped, when the renewal failed
// but the lease remains trusted until its deadline. The call is bounded by
// the time left on the lease.
func (l *Lease) Renew(ctx context.Context) error {
	return l.renew(ctx)
}

func (l *Lease) renew(ctx context.Context) error {
	l.mu.Lock()
	if l.state != stateHeld {
		err := l.cause
		l.mu.Unlock()
		return err
	}
	now := l.lk.clock.Now()
	left := l.deadline.Sub(now)
	l.mu.Unlock()
	if left <= 0 {
		l.check()
		return l.Err()
	}
	ctx, span := l.lk.tel.start(ctx, "tenure.renew", l.resource)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(l.opCtx, cancel)
	defer stop()
	cctx, cancelBound := l.lk.bounded(ctx, left)
	defer cancelBound()

	tSend := l.lk.clock.Now()
	err := l.lk.store.Renew(cctx, l.resource, l.lk.owner, l.token, l.ttl)
	l.lk.tel.renewed(ctx, span, l.resource, l.lk.clock.Since(tSend), err)
	switch {
	case err == nil:
		return l.confirm(tSend)
	case errors.Is(err, ErrLeaseLost):
		cause := fmt.Errorf("tenure: renew %q (token %d): %w", l.resource, l.token, err)
		l.lose(cause, reasonNotOwner, true)
		return cause
	default:
		if e := l.Err(); e != nil {
			return e
		}
		return fmt.Errorf("tenure: renew %q (token %d): %w", l.resource, l.token, err)
	}
}

// confirm moves the deadline after a renewal sent at tSend was confirmed. A
// confirmation that arrives after the current deadline does not revive the
// lease: it was lost at the deadline.
func (l *Lease) confirm(tSend time.Time) error {
	l.mu.Lock()
	if l.state != stateHeld {
		err := l.cause
		l.mu.Unlock()
		return err
	}
	now := l.lk.clock.Now()
	if !now.Before(l.deadline) {
		l.mu.Unlock()
		l.check()
		return l.Err()
	}
	if nd := tSend.Add(l.trust); nd.After(l.deadline) {
		l.deadline = nd
		l.lastSend = tSend
		l.watchdog.Reset(nd.Sub(now))
	}
	l.mu.Unlock()
	return nil
}

// Release ends the lease: it cancels the lease's context first (work stops),
// then frees the resource in the store, conditioned on this owner and
// token. Store calls are bounded by ctx and by the time until the store
// would expire the lease anyway; an attempt whose answer was lost is
// retried. It returns nil when the store confirmed that this owner no longer
// holds the lease; an error wrapping ErrLeaseLost when the lease had
// already been lost or released; and otherwise an error saying that the
// store could not be reached and the lease will expire by its TTL.
func (l *Lease) Release(ctx context.Context) error {
	l.check()
	l.mu.Lock()
	switch l.state {
	case stateLost:
		err := l.cause
		l.mu.Unlock()
		return fmt.Errorf("tenure: release %q: %w", l.resource, err)
	case stateReleased:
		l.mu.Unlock()
		return fmt.Errorf("tenure: release %q: already released: %w", l.resource, ErrLeaseLost)
	}
	l.state = stateReleased
	l.cause = ErrReleased
	l.stopTimersLocked()
	until := l.lastSend.Add(l.ttl)
	l.mu.Unlock()

	l.cancel(ErrReleased)
	l.opCancel()
	defer l.lk.forget(l)
	defer l.lk.tel.leaseEnded(l.resource)

	ctx, span := l.lk.tel.start(ctx, "tenure.release", l.resource)
	err := l.releaseInStore(ctx, until)
	l.lk.tel.released(ctx, span, l.resource, err)
	return err
}

func (l *Lease) releaseInStore(ctx context.Context, until time.Time) error {
	lk := l.lk
	unknown := false
	var lastErr error
	for attempt := 0; ; attempt++ {
		now := lk.clock.Now()
		if !now.Before(until) {
			break
		}
		cctx, cancel := lk.bounded(ctx, until.Sub(now))
		err := lk.store.Release(cctx, l.resource, lk.owner, l.token)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrLeaseLost):
			if unknown {
				// An earlier attempt whose answer was lost freed it: the store
				// now confirms that this owner does not hold it.
				return nil
			}
			return fmt.Errorf("tenure: release %q (token %d): %w", l.resource, l.token, err)
		case errors.Is(err, ErrUnknownOutcome):
			unknown = true
		}
		lastErr = err
		if ctx.Err() != nil || !lk.sleep(ctx, lk.cfg.retry.Delay(attempt), until) {
			break
		}
	}
	if lastErr == nil {
		return fmt.Errorf("tenure: release %q (token %d): %w: the store expired it before it could be released", l.resource, l.token, ErrLeaseLost)
	}
	if unknown {
		lastErr = driver.UnknownOutcome(lastErr)
	}
	return fmt.Errorf("tenure: release %q (token %d): not confirmed by the store; the lease will expire by its TTL (%v) at the latest: %w", l.resource, l.token, l.ttl, lastErr)
}

// leaseContext is the lease's context. Err, Done and Value check the
// deadline on every call, so that a caller that was paused past the
// deadline sees the loss at once instead of waiting for the watchdog timer.
type leaseContext struct {
	context.Context
	l *Lease
}

func (c *leaseContext) Done() <-chan struct{} {
	c.l.check()
	return c.Context.Done()
}

func (c *leaseContext) Err() error {
	c.l.check()
	return c.Context.Err()
}

// Value also serves context.Cause, which looks up the cancel state by key.
func (c *leaseContext) Value(key any) any {
	if key == (leaseKey{}) {
		return c.l
	}
	c.l.check()
	return c.Context.Value(key)
}

type leaseKey struct{}

// LeaseFromContext returns the lease whose context ctx is or derives from,
// or nil. Code that receives only a context (election's OnStartedLeading,
// Do's function) uses it to read the fencing token.
func LeaseFromContext(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey{}).(*Lease)
	return l
}

func (c *leaseContext) String() string {
	return fmt.Sprintf("tenure.Lease(%q, token %d).Context", c.l.resource, c.l.token)
}
