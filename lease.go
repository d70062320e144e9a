package tenure

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
)

type leaseState int

const (
	stateHeld leaseState = iota
	stateLost
	stateReleased
)

// Lease is a granted lease: one grant of a resource. It is renewed in the
// background every TTL/3 (or WithRenewInterval) until it is released or
// lost. All methods are safe for concurrent use.
//
// The lease may be trusted until Deadline, which is computed from the
// Locker's clock reading taken before the confirming request was sent:
// tSend + TTL·(1−ρ). Err, Context().Err(), Context().Done() and
// Context().Value() compare the clock with the deadline on every call, so a
// check made right after the process resumes from a pause or a suspend
// longer than the TTL already reports the loss, before any timer fires.
type Lease struct {
	lk       *Locker
	resource string
	owner    string // this grant's owner string
	token    uint64
	ttl      time.Duration
	trust    time.Duration
	interval time.Duration

	ctx    *leaseContext
	cancel context.CancelCauseFunc
	opCtx  context.Context // cancelled when the lease ends: aborts store calls in flight

	// isMarker says that this is a semaphore's marker lease, kept for a
	// slot (see Semaphore): its owner string is shared by every holder of
	// the slot count, so it is never released, and its end is no loss of
	// the caller's.
	isMarker bool

	mu       sync.Mutex
	state    leaseState
	cause    error
	deadline time.Time
	marker   *Lease    // a slot's marker lease, renewed while the slot is held
	lastSend time.Time // tSend of the last confirmed acquire or renew
	lastErr  error     // the last failed renewal's error, for the loss cause
	watchdog clock.Timer
	failures int // consecutive failed background renewals

	sched *schedEntry // guarded by the Locker's scheduler
}

func newLease(lk *Locker, parent context.Context, resource, owner string, ttl time.Duration, token uint64, tSend, deadline time.Time) *Lease {
	l := &Lease{
		lk:       lk,
		resource: resource,
		owner:    owner,
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
	// Store calls of the background renewal run on the lease's inner
	// context: they carry the caller's values and are abandoned when the
	// lease ends.
	l.opCtx = inner
	return l
}

// start arms the watchdog at the deadline and the first renewal.
func (l *Lease) start(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watchdog = l.lk.clock.AfterFunc(l.deadline.Sub(now), l.check)
	l.scheduleLocked(l.lastSend.Add(l.interval).Sub(now))
	if !l.isMarker {
		l.lk.tel.leaseStarted(l.resource)
	}
}

// Resource returns the name of the leased resource.
func (l *Lease) Resource() string { return l.resource }

// Owner returns the owner string the store keeps for this grant: the
// Locker's owner (Locker.Owner), ".", and the number of the grant.
func (l *Lease) Owner() string { return l.owner }

// Token returns the fencing token: it strictly increases with every new grant
// of the resource. Pass it to what the lease protects so it can reject
// writes of an older holder. Zero means that the store mode keeps no token
// (Cassandra's Jaeger-compatible mode).
func (l *Lease) Token() uint64 { return l.token }

// TTL returns the TTL requested for the lease.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Timing returns when the lease is renewed and how long it is trusted
// (Locker.Timing of its TTL).
func (l *Lease) Timing() Timing { return l.lk.Timing(l.ttl) }

// Deadline returns the local time until which the lease may be trusted, on
// the Locker's clock. It moves forward with every confirmed renewal. The
// real clock counts time spent suspended, so after a suspend it runs ahead
// of time.Now() by that time; use Remaining for the time left.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Remaining returns the time left until Deadline on the Locker's clock,
// zero once the lease is lost or released.
func (l *Lease) Remaining() time.Duration {
	if l.Err() != nil {
		return 0
	}
	return max(0, l.Deadline().Sub(l.lk.clock.Now()))
}

// Err returns nil while the lease may be trusted, and otherwise the cause of
// its end: a *LostError (errors.Is ErrLeaseLost) after a loss, ErrReleased
// (which does not match ErrLeaseLost) after Release or ReleaseAfter. It
// reads the clock itself.
func (l *Lease) Err() error {
	l.check()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// Context returns a context that is cancelled the moment the lease can no
// longer be trusted, with the cause (context.Cause) that Err returns: a
// *LostError wrapping ErrLeaseLost when it was lost, ErrReleased when its
// holder released it.
// Its Err, Done and Value methods read the clock on every call; contexts
// derived from it are cancelled by the watchdog timer at the deadline,
// which may run a little later after a pause, so check the lease's own
// context (or Err) right before an action that needs the lease, and pass
// the fencing token along.
func (l *Lease) Context() context.Context { return l.ctx }

// Done returns a channel that is closed when the lease is lost or released.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// check ends the lease if its deadline has passed. A lease that another
// goroutine ended (lose, release) may not have its context cancelled yet:
// check cancels it with the same cause, so that Err and the context agree
// whichever the caller reads first.
func (l *Lease) check() {
	l.mu.Lock()
	if l.state != stateHeld {
		cause := l.cause
		l.mu.Unlock()
		l.cancel(cause)
		return
	}
	now := l.lk.clock.Now()
	expired := !now.Before(l.deadline)
	since, lastErr := now.Sub(l.lastSend), l.lastErr
	l.mu.Unlock()
	if expired {
		l.lose(&LostError{Resource: l.resource, Token: l.token, Reason: ErrLeaseExpired, Err: lastErr,
			SinceConfirmed: since, TTL: l.ttl}, reasonDeadline, false)
	}
}

// Loss reasons, for logs and metrics.
const (
	reasonDeadline = "deadline"
	reasonNotOwner = "not_owner"
)

// lose ends a held lease exactly once: cancel the context with cause, abort
// store calls in flight, forget the lease (so that a TryAcquire, even from
// the loss callback, makes a new grant), run the loss callback. Unless the
// store said the lease is gone (definite), it also frees it in the store in
// the background, so that a holder that lost it locally does not block
// others for a whole TTL.
func (l *Lease) lose(cause *LostError, reason string, definite bool) {
	if l.isMarker {
		l.loseMarker(cause)
		return
	}
	lk := l.lk
	lk.mu.Lock()
	l.mu.Lock()
	if l.state != stateHeld {
		l.mu.Unlock()
		lk.mu.Unlock()
		return
	}
	l.state = stateLost
	l.cause = cause
	l.stopTimersLocked()
	until := l.lastSend.Add(l.ttl) // the latest the store may still keep it
	marker := l.marker
	l.mu.Unlock()
	lk.forgetLocked(l)
	if !definite {
		lk.ops++ // the release below, counted before Close can see the lease gone
	}
	lk.mu.Unlock()

	l.cancel(cause)
	marker.endMarker()
	lk.log.Warn("lease lost", "resource", l.resource, "token", l.token, "reason", reason, "cause", cause)
	lk.tel.leaseLost(l.resource, reason)
	if f := lk.cfg.onLost; f != nil {
		go f(l, cause)
	}
	if definite {
		return
	}
	// A renewal sent before the loss may still have been applied, so the
	// store may keep the lease up to a TTL after it was sent.
	lk.background(until, func() {
		if err := l.releaseUntil(context.Background(), until, nil, false); err == nil {
			lk.log.Info("freed a lost lease in the store", "resource", l.resource, "token", l.token)
		}
	})
	lk.done()
}

// loseMarker ends a marker lease whose renewal was refused or not
// confirmed in time: the marker expired, or was taken again (by holders of
// this number of slots, or of another). Nothing else changes: the slot's
// own lease is trusted by its own renewals, and the holders' number of
// slots is kept by the slot leases themselves (see Semaphore). The marker
// is never released: its owner string is every holder's.
func (l *Lease) loseMarker(cause *LostError) {
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
	l.lk.log.Info("semaphore marker no longer renewed by this holder", "marker", l.resource, "cause", cause)
}

// renewMarker renews a marker lease as every holder of its number of
// slots does, with an acquire by the owner string they share: every store
// renews a live lease for the owner string that holds it, whichever holder
// (and, on etcd, whichever Store) wrote it last, and re-creates it if it
// expired, while a Renew names one holder's write. A marker held by
// another owner string ends this holder's marker lease, as a lease lost.
func (l *Lease) renewMarker(ctx context.Context) error {
	_, err := l.lk.store.Acquire(ctx, l.resource, l.owner, l.ttl)
	var held *HeldError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &held):
		return fmt.Errorf("tenure: semaphore marker %q: %w", l.resource, driver.NotHolder(&held.Holder))
	}
	return err
}

// endMarker stops renewing a slot's marker lease when the slot ends,
// without a store call. m may be nil.
func (m *Lease) endMarker() {
	if m == nil {
		return
	}
	m.mu.Lock()
	if m.state != stateHeld {
		m.mu.Unlock()
		return
	}
	m.state = stateReleased
	m.cause = ErrReleased
	m.stopTimersLocked()
	m.mu.Unlock()
	m.cancel(ErrReleased)
}

// setMarker starts m, a slot's marker lease, and makes it the marker
// renewed while l, the slot's lease, is held: it ends with l (and at once
// when l already ended).
func (l *Lease) setMarker(m *Lease, now time.Time) {
	m.start(now)
	l.mu.Lock()
	held := l.state == stateHeld
	if held {
		l.marker = m
	}
	l.mu.Unlock()
	if !held {
		m.endMarker()
	}
}

// nextRenewal is when a lease's next background renewal is due, after the
// renewal that was due at due was sent at sent and confirmed: an interval
// after due, keeping the lease's phase, or an interval after sent when due
// is unknown or more than half an interval before sent. Renewals are never
// sent more than the batch window before they are due, so the result is at
// most an interval and the window after sent: far ahead of the deadline,
// sent + TTL·(1−ρ).
func nextRenewal(due, sent time.Time, interval time.Duration) time.Time {
	if due.IsZero() || due.Add(interval/2).Before(sent) || due.After(sent.Add(batchWindow)) {
		return sent.Add(interval)
	}
	return due.Add(interval)
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

// backgroundRenew renews once and schedules the next renewal.
func (l *Lease) backgroundRenew() {
	due := l.lk.sched.due(l)
	l.afterBackground(l.renew(l.opCtx), due)
}

// afterBackground schedules the next background renewal after one that was
// due at due (zero: unknown) and ended with err. After a confirmed renewal
// the next one is due an interval after it was sent; on a store that renews
// in batches, an interval after this one was due (nextRenewal), so that each
// lease keeps its own phase: renewals that a batch sends together (up to
// the batch window early) would otherwise fall due together again, and a
// Locker's renewals would merge into ever fewer, larger bursts. Renewals
// sent one per lease keep the interval from their send, which slows them
// down to what a store at its capacity serves (measured on one Cassandra
// node with 10,000 leases: 120 late renewals of 117,642 against 2,461 when
// they kept their phase). After a transient failure the next attempt comes
// after a backoff delay. The watchdog ends the lease at the deadline
// whatever happens here.
func (l *Lease) afterBackground(err error, due time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		return
	}
	now := l.lk.clock.Now()
	if err == nil {
		l.failures = 0
		next := l.lastSend.Add(l.interval)
		if l.lk.sched.early > 0 {
			next = nextRenewal(due, l.lastSend, l.interval)
		}
		l.scheduleLocked(next.Sub(now))
		return
	}
	left := l.deadline.Sub(now)
	if !transient(err) {
		// A closed or unusable store never gets better: the lease is lost
		// at its deadline, without retries.
		l.lk.log.Warn("renewal failed; the store cannot be used, so the lease will be lost at its deadline", "resource", l.resource, "token", l.token, "err", err, "left", left)
		return
	}
	l.lk.log.Warn("renewal failed; retrying until the deadline", "resource", l.resource, "token", l.token, "err", err, "left", left)
	p := l.lk.cfg.retry
	p.Cap = min(p.Cap, l.interval)
	d := p.Delay(l.failures)
	l.failures++
	// Never wait past half the time left: a delay that would overshoot the
	// deadline (or come close to it) retries sooner, while an answer can
	// still save the lease.
	d = min(d, left/2)
	if d > 0 {
		l.scheduleLocked(d)
	}
}

// Renew renews the lease now, outside the background schedule. It returns
// nil when the store confirmed the renewal (the deadline then moves to the
// request's send time + TTL·(1−ρ), and background renewal resumes from
// there); a *LostError (errors.Is ErrLeaseLost) when the lease is lost (the
// store no longer has this grant, or the deadline passed); ErrReleased
// after the lease was released; or the store's error wrapped, when the
// renewal failed but the lease remains trusted until its deadline. The call
// is bounded by ctx and by the time left on the lease.
func (l *Lease) Renew(ctx context.Context) error {
	return l.renew(ctx)
}

func (l *Lease) renew(ctx context.Context) error {
	if !l.lk.begin() {
		// Close is releasing the lease, or has.
		if err := l.Err(); err != nil {
			return err
		}
		return fmt.Errorf("tenure: renew %q (token %d): %w", l.resource, l.token, ErrClosed)
	}
	defer l.lk.done()
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
	// The call is bounded by the time left: a renewal that answers later
	// cannot save the lease. (A manual renewal in flight when the lease is
	// released runs on to that bound; its answer is then ignored.)
	ctx, span := l.lk.tel.start(ctx, "tenure.renew", l.resource)
	cctx, cancelBound := l.lk.bounded(ctx, left)
	defer cancelBound()

	tSend := l.lk.clock.Now()
	var err error
	if l.isMarker {
		err = l.renewMarker(cctx)
	} else {
		err = l.lk.store.Renew(cctx, l.resource, l.owner, l.token, l.ttl)
	}
	l.lk.tel.renewed(ctx, span, l.resource, l.lk.clock.Now().Sub(tSend), err)
	return l.settle(tSend, err)
}

// settle applies the store's answer to a renewal sent at tSend.
func (l *Lease) settle(tSend time.Time, err error) error {
	switch {
	case err == nil:
		return l.confirm(tSend)
	case errors.Is(err, ErrLeaseLost):
		l.mu.Lock()
		since := l.lk.clock.Now().Sub(l.lastSend)
		l.mu.Unlock()
		cause := &LostError{Resource: l.resource, Token: l.token, Reason: ErrNotHolder, Err: err, SinceConfirmed: since, TTL: l.ttl}
		l.lose(cause, reasonNotOwner, true)
		return l.Err()
	default:
		if e := l.Err(); e != nil {
			return e
		}
		l.mu.Lock()
		l.lastErr = err
		l.mu.Unlock()
		return fmt.Errorf("tenure: renew %q (token %d): %w", l.resource, l.token, err)
	}
}

// confirm moves the deadline after a renewal sent at tSend was confirmed,
// and schedules the next renewal from it. A confirmation that arrives after
// the current deadline does not revive the lease: it was lost at the
// deadline.
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
		l.lastErr = nil
		l.failures = 0
		l.watchdog.Reset(l.deadline.Sub(now))
		l.scheduleLocked(tSend.Add(l.interval).Sub(now))
	}
	l.mu.Unlock()
	return nil
}

// end moves a held lease to released: it stops renewal, cancels the
// lease's context with ErrReleased and aborts store calls in flight. It
// returns the time until which the store may keep the lease, or an error
// (wrapping the loss's *LostError, or ErrReleased) when the lease had
// already ended.
//
// A lease that end moved to released counts as store work in flight (see
// Locker.begin), atomically with its leaving the Locker's held leases, so
// that a Close that no longer finds the lease waits for its release: the
// caller calls lk.done once the store has answered.
func (l *Lease) end(op string) (time.Time, error) {
	l.check()
	lk := l.lk
	lk.mu.Lock()
	l.mu.Lock()
	switch l.state {
	case stateLost:
		err := l.cause
		l.mu.Unlock()
		lk.mu.Unlock()
		return time.Time{}, fmt.Errorf("tenure: %s %q: %w", op, l.resource, err)
	case stateReleased:
		l.mu.Unlock()
		lk.mu.Unlock()
		return time.Time{}, fmt.Errorf("tenure: %s %q: %w", op, l.resource, ErrReleased)
	}
	l.state = stateReleased
	l.cause = ErrReleased
	l.stopTimersLocked()
	until := l.lastSend.Add(l.ttl)
	marker := l.marker
	l.mu.Unlock()
	lk.forgetLocked(l)
	lk.ops++
	lk.mu.Unlock()

	l.cancel(ErrReleased)
	marker.endMarker()
	lk.tel.leaseEnded(l.resource)
	return until, nil
}

// Release ends the lease: it cancels the lease's context first (work stops),
// then frees the resource in the store, conditioned on this grant (owner
// string and token).
//
// The store call is bounded by the time until the store would expire the
// lease anyway, and ctx's cancellation never keeps it from being sent: a
// ctx that had already ended when Release was called (Release(lease.Context()),
// or a context cancelled during a renewal: field case C13) does not cut the
// first attempt short, and an attempt that ctx cuts short is made again at
// once in the background, on a context ctx cannot end. Release returns when
// the store answered, or when ctx ends, whichever is first; a release not
// yet confirmed then goes on in the background until the lease would expire
// (Locker.Close waits for it). The first attempt runs in the calling
// goroutine.
//
// It returns nil when the store confirmed that this grant no longer holds
// the lease; an error wrapping ErrLeaseLost when the lease had already been
// lost (its *LostError) or the store no longer had this grant; ErrReleased
// when it had already been released; and otherwise an error saying that
// the release was not confirmed and the lease will expire by its TTL at the
// latest.
func (l *Lease) Release(ctx context.Context) error {
	until, err := l.end("release")
	if err != nil {
		return err
	}
	defer l.lk.done()
	ctx, span := l.lk.tel.start(ctx, "tenure.release", l.resource)
	err = l.releaseWithin(ctx, until)
	l.lk.tel.released(ctx, span, l.resource, err)
	return err
}

// releaseWithin frees the lease in the store (see Release). The first
// attempt runs in the calling goroutine: on a context ctx cannot end when
// ctx could not end the call anyway or had already ended, and otherwise on
// ctx itself, so that the caller who gives up gets its answer at once. An
// attempt that ctx cut short, or that failed, goes on in the background
// (as unknown: it may have been applied), with the caller waiting for its
// answer or for ctx.
func (l *Lease) releaseWithin(ctx context.Context, until time.Time) error {
	done := ctx.Done()
	if done == nil || ctx.Err() != nil {
		return l.releaseUntil(context.WithoutCancel(ctx), until, nil, false)
	}
	err, final := l.releaseOnce(ctx, until)
	if final {
		return err
	}
	cutShort := ctx.Err() != nil
	unknown := cutShort || errors.Is(err, ErrUnknownOutcome)
	result := make(chan error, 1)
	last := &lastError{err: err}
	l.lk.background(until, func() {
		if !unknown {
			// A failed first attempt waits out one retry delay, as the
			// attempts of releaseUntil do.
			if !l.lk.sleep(context.Background(), l.lk.cfg.retry.Delay(0), until) {
				result <- l.unconfirmed(err)
				return
			}
		}
		result <- l.releaseUntil(context.WithoutCancel(ctx), until, last, unknown)
	})
	if cutShort {
		return l.notConfirmedBeforeGivingUp(ctx, last)
	}
	select {
	case err := <-result:
		return err
	case <-done:
		return l.notConfirmedBeforeGivingUp(ctx, last)
	}
}

// releaseOnce makes one release attempt on ctx, bounded by until (or by
// one retry interval when until has passed). final is true when its answer
// is Release's (freed, not this grant's, bad input); otherwise err is the
// failure, and the release should be tried again.
func (l *Lease) releaseOnce(ctx context.Context, until time.Time) (err error, final bool) {
	left := until.Sub(l.lk.clock.Now())
	if left <= 0 {
		left = l.lk.cfg.retry.Cap
	}
	cctx, cancel := l.lk.bounded(ctx, left)
	err = l.lk.store.Release(cctx, l.resource, l.owner, l.token)
	interrupted := cctx.Err() != nil
	cancel()
	switch {
	case err == nil:
		return nil, true
	case interrupted && !definite(err):
		return driver.UnknownOutcome(err), false
	case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrInvalidResource), errors.Is(err, ErrInvalidOwner):
		return fmt.Errorf("tenure: release %q (token %d): %w", l.resource, l.token, err), true
	case !transient(err):
		// A closed or unusable store never gets better: no retries.
		return l.unconfirmed(err), true
	}
	return err, false
}

// notConfirmedBeforeGivingUp is Release's error when its caller's ctx
// ended before the store confirmed the release, which goes on in the
// background.
func (l *Lease) notConfirmedBeforeGivingUp(ctx context.Context, last *lastError) error {
	err := fmt.Errorf("tenure: release %q (token %d): not confirmed before the caller gave up (%w); still trying in the background, and the lease will expire by its TTL (%v) at the latest",
		l.resource, l.token, context.Cause(ctx), l.ttl)
	if e := last.get(); e != nil {
		err = fmt.Errorf("%w: %w", err, e)
	}
	return err
}

// lastError keeps the last error of a release running in the background,
// for the caller that stopped waiting for it.
type lastError struct {
	mu  sync.Mutex
	err error
}

func (e *lastError) set(err error) {
	if e != nil {
		e.mu.Lock()
		e.err = err
		e.mu.Unlock()
	}
}

func (e *lastError) get() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// releaseUntil frees the lease in the store, retrying transient failures
// until until (when the store expires it anyway) or until ctx ends. It
// always makes one attempt, even when the local clock says the store has
// expired the lease already: the store's clock may run slower, and freeing a
// lease that is gone costs one answer. unknown says that an earlier attempt
// may have freed it (its answer was lost), so that an answer "not this
// grant's" confirms the release.
func (l *Lease) releaseUntil(ctx context.Context, until time.Time, last *lastError, unknown bool) error {
	lk := l.lk
	var lastErr error
	for attempt := 0; ; attempt++ {
		left := until.Sub(lk.clock.Now())
		if left <= 0 {
			if attempt > 0 {
				break
			}
			left = lk.cfg.retry.Cap
		}
		cctx, cancel := lk.bounded(ctx, left)
		err := lk.store.Release(cctx, l.resource, l.owner, l.token)
		if err != nil && cctx.Err() != nil && !definite(err) {
			// Cut short after the request may have been sent, as in
			// releaseOnce: whatever the driver says, it may have been applied.
			err = driver.UnknownOutcome(err)
		}
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrLeaseLost):
			if unknown {
				// An earlier attempt whose answer was lost freed it: the store
				// now confirms that this grant does not hold it.
				return nil
			}
			return fmt.Errorf("tenure: release %q (token %d): %w", l.resource, l.token, err)
		case errors.Is(err, ErrUnknownOutcome):
			unknown = true
		case errors.Is(err, ErrInvalidResource), errors.Is(err, ErrInvalidOwner):
			return fmt.Errorf("tenure: release %q (token %d): %w", l.resource, l.token, err)
		case !transient(err):
			// A closed or unusable store never gets better: no retries.
			return l.unconfirmed(err)
		}
		lastErr = err
		last.set(err)
		if ctx.Err() != nil || lk.abandoned.Load() || !lk.sleep(ctx, lk.cfg.retry.Delay(attempt), until) {
			break
		}
	}
	if unknown {
		lastErr = driver.UnknownOutcome(lastErr)
	}
	return l.unconfirmed(lastErr)
}

// unconfirmed is Release's error when the store did not confirm the
// release before the lease would expire: err is the last failure.
func (l *Lease) unconfirmed(err error) error {
	return fmt.Errorf("tenure: release %q (token %d): not confirmed by the store; the lease will expire by its TTL (%v) at the latest: %w", l.resource, l.token, l.ttl, err)
}

// ReleaseAfter ends the lease like Release (its context is cancelled with
// ErrReleased and renewal stops), but instead of freeing the resource it
// leaves it held in the store for d from now, rounded as the store rounds
// TTLs. Nobody else is granted the resource before d has passed. This is
// how a job run from cron on several hosts whose clocks differ by a few
// seconds runs once per tick (ShedLock's lockAtLeastFor).
//
// The store keeps the lease under another owner string, KeptOwner(Owner()),
// with the same token (driver.Keeper; every store of this module has it),
// so that a renewal of this grant that reaches the store after the hold
// began (a request delivered after its sender gave up) finds another holder
// and cannot cut the hold short. On a store without driver.Keeper it is one
// renewal of this grant with TTL d, which such a late renewal can cut back
// to the lease's TTL when d is longer.
//
// d must be a TTL the store accepts (driver.TTLChecker); otherwise the
// error wraps ErrInvalidTTL and the lease is left as it was. d <= 0 is a
// plain Release. It returns nil when the store confirmed the new expiry; an
// error wrapping ErrLeaseLost when the lease had already been lost or the
// store no longer has this grant; ErrReleased when it had already been
// released; and otherwise the store's error (the lease then
// expires by its TTL at the latest). The call is bounded by ctx (unless ctx
// had ended when the call began: the lease's own context, as for Release)
// and by the time until the store would expire the lease.
func (l *Lease) ReleaseAfter(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return l.Release(ctx)
	}
	if c, ok := l.lk.store.(driver.TTLChecker); ok {
		if err := c.CheckTTL(d); err != nil {
			return fmt.Errorf("tenure: release %q after %v: %w", l.resource, d, err)
		}
	}
	until, err := l.end("release")
	if err != nil {
		return err
	}
	defer l.lk.done()
	now := l.lk.clock.Now()
	if !now.Before(until) {
		return fmt.Errorf("tenure: release %q after %v: %w: the store expired it already", l.resource, d, ErrLeaseLost)
	}
	cctx, cancel := l.lk.bounded(context.WithoutCancel(ctx), until.Sub(now))
	defer cancel()
	if ctx.Err() == nil {
		// The caller's ctx bounds the call. One that had already ended (the
		// lease's own context, which ending the lease cancelled) does not:
		// ReleaseAfter(lease.Context(), d) keeps the lease, as
		// Release(lease.Context()) frees it.
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
	}
	if k, ok := l.lk.store.(driver.Keeper); ok {
		err = k.Keep(cctx, l.resource, l.owner, l.token, KeptOwner(l.owner), d)
	} else {
		err = l.lk.store.Renew(cctx, l.resource, l.owner, l.token, d)
	}
	if err != nil {
		return fmt.Errorf("tenure: release %q after %v (token %d): the store did not confirm; the lease expires by its TTL (%v), or %v after the store applies the hold, if it does: %w", l.resource, d, l.token, l.ttl, d, err)
	}
	return nil
}

// KeptOwner returns the owner string under which ReleaseAfter leaves a
// grant's lease held: the grant's owner string and "/kept". Locker.Owns
// recognises it as the Locker's; nothing renews or releases it.
func KeptOwner(owner string) string { return owner + "/kept" }

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
