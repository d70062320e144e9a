package tenure

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

// RWLock is a shared/exclusive (read/write) lock on one resource, across
// every process that uses the same store: any number of shared holders at
// once, or one exclusive holder and nobody else. Each holder has a lease,
// with the whole contract of a plain lease of the same TTL: renewed in the
// background, trusted until its deadline, lost (its context cancelled with a
// *LostError) when it can no longer be trusted, and ended by Release or
// ReleaseAfter; a holder that dies frees its share within its TTL.
//
// Like Semaphore, it works on every store without store code, with point
// operations and one List:
//
//   - The lease on the resource itself is the gate, and every grant passes
//     through it. An exclusive request acquires the gate and keeps it as its
//     lease. A shared request acquires the gate for a moment (with an owner
//     string that IsSharedRequest recognises, and a TTL of at most
//     MaxSharedGateTTL), acquires a lease of its own named SharedName(resource,
//     id), its registration, then releases the gate. The registration counts
//     only when the store confirmed it before the gate's deadline, so it was
//     written while the gate was this request's; otherwise (and when the store
//     says at the release that the gate was no longer this request's, after an
//     operator freed it) it is freed and the request tries again.
//   - An exclusive request that holds the gate lists the registrations
//     (SharedHolders) and is granted once none is left, held or kept
//     (ReleaseAfter). No registration can be written while it holds the gate,
//     and each one written before was confirmed before that gate tenure
//     ended, hence before this one began, so the list shows every shared
//     holder that may still trust its lease. Until then the exclusive request
//     waits, woken by the release of each registration it watches (where the
//     store sends release notifications, driver.Watcher) or polling, and it
//     renews the gate meanwhile.
//
// Order: while an exclusive request holds the gate, waiting for the shared
// holders to end, no shared request is granted, so a stream of shared
// requests cannot starve it (writer preference): an exclusive request that
// has taken the gate is granted as soon as the shared holders granted before
// it have ended. Requests wait for the gate as a plain Acquire waits for a
// lease (backoff with jitter, or a release notification; not first come,
// first served across processes); a shared request holds it only for two
// store calls, so an exclusive one finds it free between them. Shared
// requests of one Locker pass through the gate one at a time, in the order
// they came.
//
// Fencing tokens: every holder, shared or exclusive, reports (Lease.Token)
// the token of its grant of the gate, which the store strictly increases
// with every grant of the resource, so tokens increase in grant order across
// both modes. A resource protected by the lock keeps the largest token it
// has seen and rejects a write with a smaller one, and a read with a token
// smaller than the largest token of a write it accepted: a holder that lost
// its lease without knowing it cannot write after a newer holder of either
// mode came in.
//
// A plain Locker.Acquire of the same resource takes the gate as an exclusive
// request does, but does not wait for the shared holders: it excludes
// exclusive holders and new shared holders, not the shared holders already
// in. Use AcquireExclusive wherever shared holders may exist (`tenure run`
// does).
//
// The design follows the two locks of Raynal's reader-writer lock (a gate
// that writers keep and readers pass through, and a count of readers that
// a writer waits to drain), with the readers counted as leases of their own
// so that a dead reader's share expires. Curator's InterProcessReadWriteLock
// orders requests by ZooKeeper's sequential nodes (fair, first come, first
// served); Redisson's RReadWriteLock keeps a mode and the readers in one
// Redis hash (not fair, and readers can starve a writer).
//
// It is safe for concurrent use. Make one with Locker.RWLock.
type RWLock struct {
	lk       *Locker
	resource string
}

// SharedHeldError reports that an exclusive request found shared holders of
// the resource. It matches ErrHeld with errors.Is.
type SharedHeldError struct {
	Resource string
	// Holders are the shared holders' leases (their registrations), sorted
	// by name.
	Holders []Record
}

// Error names the holders; the names from the store are quoted.
func (e *SharedHeldError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tenure: %q has %d shared holder", e.Resource, len(e.Holders))
	if len(e.Holders) != 1 {
		b.WriteString("s")
	}
	b.WriteString(":")
	for i, h := range e.Holders {
		if i == 10 {
			fmt.Fprintf(&b, ", and %d more", len(e.Holders)-i)
			break
		}
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %q", h.Owner)
		if h.Remaining > 0 {
			fmt.Fprintf(&b, " (%s left)", h.Remaining.Round(time.Millisecond))
		}
	}
	return b.String()
}

// Is reports whether target is ErrHeld.
func (e *SharedHeldError) Is(target error) bool { return target == ErrHeld }

// sharedPrefix is the prefix of every registration name of resource.
func sharedPrefix(resource string) string { return resource + naming.SharedInfix }

// newSharedName returns a registration name with a fresh random id.
func newSharedName(resource string) string {
	var b [naming.SharedIDLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return naming.SharedName(resource, hex.EncodeToString(b[:]))
}

// MaxSharedGateTTL is the longest TTL with which a shared request holds an
// RWLock's gate while it registers: its own TTL, or this when that is
// longer (and the store accepts it), so that a shared request that dies
// there blocks the resource for at most this long.
const MaxSharedGateTTL = 10 * time.Second

// RWLock returns the shared/exclusive lock on resource. The names of its
// shared holders' leases (SharedName) must be valid resource names, so the
// resource may be at most MaxResourceLen − 24 bytes long. It makes no I/O;
// the error wraps ErrInvalidResource.
func (lk *Locker) RWLock(resource string) (*RWLock, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return nil, err
	}
	if err := driver.ValidateResource(naming.SharedName(resource, strings.Repeat("0", naming.SharedIDLen))); err != nil {
		return nil, fmt.Errorf("tenure: shared/exclusive lock on %q: the names of its shared holders' leases would be too long: %w", resource, err)
	}
	return &RWLock{lk: lk, resource: resource}, nil
}

// Resource returns the lock's resource: the name of its gate lease, which
// an exclusive holder's lease bears.
func (rw *RWLock) Resource() string { return rw.resource }

// SharedHolders returns the live leases of the lock's shared holders, held
// or kept (ReleaseAfter), sorted by name. The exclusive holder, if any,
// holds the lease on the resource itself (Locker.Get; IsSharedRequest tells
// a shared request passing through it from an exclusive holder). After
// Close it returns ErrClosed.
func (rw *RWLock) SharedHolders(ctx context.Context) ([]Record, error) {
	if !rw.lk.begin() {
		return nil, ErrClosed
	}
	defer rw.lk.done()
	return rw.sharedHolders(ctx)
}

func (rw *RWLock) sharedHolders(ctx context.Context) ([]Record, error) {
	recs, err := rw.lk.store.List(ctx, sharedPrefix(rw.resource))
	if err != nil {
		return nil, fmt.Errorf("tenure: shared/exclusive lock on %q: list its shared holders: %w", rw.resource, err)
	}
	out := recs[:0]
	for _, r := range recs {
		if res, ok := naming.ParseSharedName(r.Resource); ok && res == rw.resource {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Resource, b.Resource) })
	return out, nil
}

// gateTTL is the TTL with which a shared request of ttl holds the gate.
func (rw *RWLock) gateTTL(ttl time.Duration) time.Duration {
	if ttl <= MaxSharedGateTTL || rw.lk.CheckTTL(MaxSharedGateTTL) != nil {
		return ttl
	}
	return MaxSharedGateTTL
}

// passingTries bounds the attempts of TryAcquireShared and
// TryAcquireExclusive that find the gate held by a shared request passing
// through it: it leaves within two store calls.
const passingTries = 5

// passing reports whether err, from an acquire of the gate, says that a
// shared request holds it (another process's, or this Locker's), rather
// than an exclusive holder.
func (lk *Locker) passing(err error) bool {
	var held *HeldError
	if !errors.As(err, &held) {
		return false
	}
	o := held.Holder.Owner
	return naming.IsSharedRequest(o) || o == lk.owner
}

// TryAcquireShared makes one attempt to become a shared holder for ttl: it
// does not wait for an exclusive holder (nor for an exclusive request that
// waits for the shared holders to end), but it does wait, a few retry
// delays at most, for shared requests that pass through the gate. When an
// exclusive holder or request holds the gate, the error is a *HeldError
// (errors.Is ErrHeld) naming it. Bad input is refused before any I/O, and
// after Close it returns ErrClosed without I/O; other errors are what
// Locker.TryAcquire returns. The lease it returns is the shared holder's
// registration (its Resource is SharedName(resource, id)), and its Token is
// the gate's (see RWLock).
func (rw *RWLock) TryAcquireShared(ctx context.Context, ttl time.Duration) (*Lease, error) {
	if err := rw.lk.CheckTTL(ttl); err != nil {
		return nil, err
	}
	if !rw.lk.begin() {
		return nil, ErrClosed
	}
	defer rw.lk.done()
	return rw.shared(ctx, ttl, nil)
}

// AcquireShared blocks until this caller is a shared holder for ttl, or
// ctx ends. It waits while an exclusive holder or request holds the gate,
// as Locker.Acquire waits for a lease (OnWait options see the gate's
// holder), and tries again when a registration came too late (see RWLock).
// When ctx ends first, the error wraps ctx's error and the last attempt's.
// Bad input, a closed Locker and an unusable store end the wait at once, and
// so does a store error on the first attempt.
func (rw *RWLock) AcquireShared(ctx context.Context, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	ac := &acquireConfig{}
	for _, o := range opts {
		if o != nil { // a nil option chooses nothing
			o(ac)
		}
	}
	if err := rw.lk.CheckTTL(ttl); err != nil {
		return nil, err
	}
	if !rw.lk.begin() {
		return nil, ErrClosed
	}
	defer rw.lk.done()
	return rw.shared(ctx, ttl, ac)
}

// errGateEnded means that a shared request's registration was not
// confirmed while its gate was trusted.
var errGateEnded = errors.New("the gate ended before the shared holder's lease was confirmed")

// shared passes through the gate and registers a shared holder. ac is nil
// for a single attempt (TryAcquireShared).
func (rw *RWLock) shared(ctx context.Context, ttl time.Duration, ac *acquireConfig) (*Lease, error) {
	lk := rw.lk
	// One request of this Locker at a time goes for the gate: the others
	// wait here, in order, rather than polling the Locker's own hold.
	leave, err := lk.enterGate(ctx, rw.resource)
	if err != nil {
		return nil, fmt.Errorf("tenure: shared/exclusive lock on %q: %w", rw.resource, err)
	}
	defer leave()
	gttl := rw.gateTTL(ttl)
	var lastErr error
	for attempt := 0; ; attempt++ {
		var gate *Lease
		if ac != nil {
			gopts := []AcquireOption{func(c *acquireConfig) { *c = *ac; c.grant = grantOpts{mark: naming.SharedGateMark} }}
			gate, err = lk.Acquire(ctx, rw.resource, gttl, gopts...)
		} else {
			gate, err = lk.tryAcquireWith(ctx, rw.resource, gttl, grantOpts{mark: naming.SharedGateMark})
		}
		if err != nil {
			if ac == nil && lk.passing(err) && attempt < passingTries-1 {
				if _, werr := lk.wait(ctx, lk.cfg.retry.Delay(attempt), nil); werr != nil {
					return nil, err
				}
				continue
			}
			if lastErr != nil && ctx.Err() != nil {
				return nil, fmt.Errorf("%w (after: %w)", err, lastErr)
			}
			return nil, err
		}
		l, err := rw.register(ctx, gate, ttl)
		if err == nil {
			return l, nil
		}
		lastErr = err
		retry := errors.Is(err, errGateEnded) || errors.Is(err, ErrUnknownOutcome)
		if ac != nil && transient(err) && attempt > 0 {
			retry = true
		}
		if !retry || ctx.Err() != nil || (ac == nil && attempt >= passingTries-1) {
			return nil, err
		}
		lk.log.Warn("shared acquire attempt failed; retrying", "resource", rw.resource, "err", err)
		if errors.Is(err, errGateEnded) {
			// The store answered too slowly for the gate: try again at
			// once (each such attempt took the gate's trust to fail).
			continue
		}
		if _, werr := lk.wait(ctx, lk.cfg.retry.Delay(attempt), nil); werr != nil {
			if errors.Is(werr, ErrClosed) {
				return nil, werr
			}
			return nil, fmt.Errorf("%w (gave up: %w)", err, werr)
		}
	}
}

// register acquires a shared holder's registration while gate, the lock's
// gate held by this shared request, is trusted, and releases the gate. The
// registration reports the gate's token.
func (rw *RWLock) register(ctx context.Context, gate *Lease, ttl time.Duration) (*Lease, error) {
	lk := rw.lk
	releaseGate := func() error {
		err := gate.Release(ctx)
		if err != nil && !errors.Is(err, ErrLeaseLost) && !errors.Is(err, ErrReleased) {
			lk.log.Warn("could not release the gate of a shared/exclusive lock; it expires by its TTL", "resource", rw.resource, "ttl", gate.TTL(), "err", err)
		}
		return err
	}
	// The registration's store calls are bounded by the time the gate is
	// trusted: an answer after that does not count.
	left := gate.Deadline().Sub(lk.clock.Now())
	if left <= 0 || gate.Err() != nil {
		releaseGate()
		return nil, fmt.Errorf("tenure: shared acquire %q: %w", rw.resource, errGateEnded)
	}
	rctx, cancel := lk.bounded(ctx, left)
	reg, err := lk.tryAcquireWith(rctx, newSharedName(rw.resource), ttl, grantOpts{fence: gate.fence})
	cancel()
	if err != nil {
		releaseGate()
		if rctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w: %w", errGateEnded, err)
		}
		return nil, fmt.Errorf("tenure: shared acquire %q: %w", rw.resource, err)
	}
	// Confirmed while the gate was trusted: the store wrote it during this
	// gate tenure, before any exclusive request can hold the gate.
	if gate.Err() != nil || !lk.clock.Now().Before(gate.Deadline()) {
		_ = reg.Release(context.WithoutCancel(ctx))
		releaseGate()
		return nil, fmt.Errorf("tenure: shared acquire %q: %w", rw.resource, errGateEnded)
	}
	if err := releaseGate(); errors.Is(err, ErrLeaseLost) && !errors.Is(err, ErrLeaseExpired) {
		// The store says the gate was no longer this request's when it
		// was released: it was freed under it (an operator's forced
		// release), and an exclusive holder may have listed the shared
		// holders before this registration was written.
		_ = reg.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("tenure: shared acquire %q: the gate was freed while this request held it: %w: %w", rw.resource, errGateEnded, err)
	}
	return reg, nil
}

// TryAcquireExclusive makes one attempt to become the exclusive holder for
// ttl: it acquires the gate (waiting, a few retry delays at most, for
// shared requests that pass through it) and lists the shared holders. When
// there are any, it releases the gate and returns a *SharedHeldError
// (errors.Is ErrHeld) naming them; when the gate is held by an exclusive
// holder or request, a *HeldError naming it. Bad input is refused before
// any I/O, and after Close it returns ErrClosed without I/O; other errors
// are what Locker.TryAcquire returns. The lease it returns is the gate's.
func (rw *RWLock) TryAcquireExclusive(ctx context.Context, ttl time.Duration) (*Lease, error) {
	lk := rw.lk
	if err := lk.CheckTTL(ttl); err != nil {
		return nil, err
	}
	if !lk.begin() {
		return nil, ErrClosed
	}
	defer lk.done()
	for attempt := 0; ; attempt++ {
		gate, err := lk.TryAcquire(ctx, rw.resource, ttl)
		if err != nil {
			if lk.passing(err) && attempt < passingTries-1 {
				if _, werr := lk.wait(ctx, lk.cfg.retry.Delay(attempt), nil); werr == nil {
					continue
				}
			}
			return nil, err
		}
		shared, err := rw.listUnder(ctx, gate)
		if err == nil && len(shared) == 0 {
			return gate, nil
		}
		_ = gate.Release(ctx)
		if err != nil {
			return nil, err
		}
		return nil, &SharedHeldError{Resource: rw.resource, Holders: shared}
	}
}

// listUnder lists the shared holders while gate is held, bounded by the
// time the gate is trusted; it returns the gate's error when the gate was
// lost by the time the list came back.
func (rw *RWLock) listUnder(ctx context.Context, gate *Lease) ([]Record, error) {
	lk := rw.lk
	left := gate.Deadline().Sub(lk.clock.Now())
	if left <= 0 {
		return nil, gate.Err()
	}
	lctx, cancel := lk.bounded(ctx, left)
	shared, err := rw.sharedHolders(lctx)
	cancel()
	if gerr := gate.Err(); gerr != nil {
		return nil, fmt.Errorf("tenure: exclusive acquire %q: %w", rw.resource, gerr)
	}
	return shared, err
}

// AcquireExclusive blocks until this caller is the exclusive holder for
// ttl, or ctx ends: it waits for the gate as Locker.Acquire waits for a
// lease (OnWait options see its holder), then, holding it, for the shared
// holders to end (OnSharedWait options see them), woken by the release of
// each one it watches (up to 16, on stores that send release
// notifications) or polling with backoff and at each one's expiry. When the
// gate is lost meanwhile, it starts again. When ctx ends first, it releases
// the gate, and the error wraps ctx's error and the last *SharedHeldError
// or *HeldError. Bad input, a closed Locker and an unusable store end the
// wait at once, and so does a store error on the first attempt; later
// store errors are logged and retried. The lease it returns is the gate's.
func (rw *RWLock) AcquireExclusive(ctx context.Context, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	lk := rw.lk
	ac := &acquireConfig{}
	for _, o := range opts {
		if o != nil { // a nil option chooses nothing
			o(ac)
		}
	}
	if err := lk.CheckTTL(ttl); err != nil {
		return nil, err
	}
	if !lk.begin() {
		return nil, ErrClosed
	}
	defer lk.done()
	start := lk.clock.Now()
	for {
		gate, err := lk.Acquire(ctx, rw.resource, ttl, opts...)
		if err != nil {
			return nil, err
		}
		l, err := rw.drain(ctx, gate, ac, start)
		if err == nil || !errors.Is(err, errGateLost) {
			return l, err
		}
		lk.log.Warn("the gate of a shared/exclusive lock was lost while its exclusive request waited for the shared holders; acquiring it again", "resource", rw.resource, "err", err)
	}
}

// errGateLost means that an exclusive request lost the gate while it
// waited for the shared holders to end.
var errGateLost = errors.New("the gate was lost while waiting for the shared holders")

// drain waits, holding gate, until the shared holders have ended.
func (rw *RWLock) drain(ctx context.Context, gate *Lease, ac *acquireConfig, start time.Time) (*Lease, error) {
	lk := rw.lk
	w := &drainWatch{lk: lk, watched: map[string]bool{}}
	defer w.end()
	var lastErr error
	fail := func(err error) (*Lease, error) {
		_ = gate.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		shared, err := rw.listUnder(ctx, gate)
		if gerr := gate.Err(); gerr != nil {
			if errors.Is(gerr, ErrReleased) {
				// Close released it.
				return nil, ErrClosed
			}
			return nil, fmt.Errorf("tenure: exclusive acquire %q: %w: %w", rw.resource, errGateLost, gerr)
		}
		var remaining time.Duration
		switch {
		case err == nil && len(shared) == 0:
			return gate, nil
		case err == nil:
			held := &SharedHeldError{Resource: rw.resource, Holders: shared}
			lastErr = held
			for i, h := range shared {
				if i == 0 || h.Remaining < remaining {
					remaining = h.Remaining
				}
			}
			added := w.watch(ctx, shared)
			if ac.onSharedWait != nil {
				ac.onSharedWait(held, lk.clock.Now().Sub(start))
			}
			if added {
				// Look again at once: a release between the list and the
				// watch's start sent no notification to it.
				continue
			}
		case ctx.Err() != nil:
			if lastErr == nil {
				lastErr = err
			}
		case !transient(err):
			return fail(err)
		default:
			lastErr = err
			lk.log.Warn("listing the shared holders failed; retrying", "resource", rw.resource, "err", err)
		}
		delay := lk.waitDelay(attempt, w.notified(shared), remaining)
		if werr := w.wait(ctx, delay, gate); werr != nil {
			if errors.Is(werr, ErrClosed) {
				return fail(werr)
			}
			return fail(fmt.Errorf("%w (gave up waiting after %v: %w)", lastErr, lk.clock.Now().Sub(start).Round(time.Millisecond), werr))
		}
	}
}

// drainWatch is an exclusive request's watches of the shared holders'
// leases: a release of any wakes it.
type drainWatch struct {
	lk      *Locker
	notify  chan struct{}
	watched map[string]bool
	stops   []func()
	fwd     sync.WaitGroup // the goroutines that forward wake-ups
	off     bool           // the store sends no notifications, or they failed: poll
}

// watch watches the release of each of shared not yet watched, up to
// maxSubscribedSlots in all, where the store is a driver.Watcher, and
// reports whether it began any watch.
func (w *drainWatch) watch(ctx context.Context, shared []Record) (added bool) {
	if w.off {
		return false
	}
	wt, ok := w.lk.store.(driver.Watcher)
	if !ok {
		w.off = true
		return false
	}
	if w.notify == nil {
		w.notify = make(chan struct{}, 1)
	}
	for _, r := range shared {
		if w.watched[r.Resource] || len(w.watched) >= maxSubscribedSlots {
			continue
		}
		ch, stop, err := wt.Watch(ctx, r.Resource)
		if err != nil {
			w.lk.log.Warn("release notifications unavailable; polling", "resource", r.Resource, "err", err)
			w.off = true
			return added
		}
		w.watched[r.Resource] = true
		added = true
		done := make(chan struct{})
		w.stops = append(w.stops, func() { close(done); stop() })
		w.fwd.Add(1)
		go func() {
			defer w.fwd.Done()
			for {
				select {
				case <-done:
					return
				case <-ch:
					select {
					case w.notify <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return added
}

// notified reports whether a release of every one of shared wakes the
// request.
func (w *drainWatch) notified(shared []Record) bool {
	if w.off || w.notify == nil {
		return false
	}
	for _, r := range shared {
		if !w.watched[r.Resource] {
			return false
		}
	}
	return true
}

// wait sleeps for d on the Locker's clock, or until a watched release, or
// until gate ends (nil: the caller sees why), ctx ends (its cause) or the
// Locker is closed (ErrClosed).
func (w *drainWatch) wait(ctx context.Context, d time.Duration, gate *Lease) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	t := w.lk.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-w.notify:
	case <-gate.Done():
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-w.lk.closeCh:
		return ErrClosed
	}
	return nil
}

// end ends the watches.
func (w *drainWatch) end() {
	for _, stop := range w.stops {
		stop()
	}
	w.stops = nil
	w.fwd.Wait()
}

// OnSharedWait sets a function that RWLock.AcquireExclusive calls after
// each look at the shared holders that found some, while it holds the gate
// and waits for them to end, with the holders and the time waited so far.
func OnSharedWait(f func(held *SharedHeldError, waited time.Duration)) AcquireOption {
	return func(c *acquireConfig) { c.onSharedWait = f }
}

// localGate queues the shared requests of one Locker for one resource's
// gate.
type localGate struct {
	ch    chan struct{} // holds a value while a request passes
	users int           // requests queued or passing; guarded by Locker.mu
}

// enterGate waits for this Locker's turn at resource's gate, until ctx ends
// or Close; the returned function gives the turn back.
func (lk *Locker) enterGate(ctx context.Context, resource string) (func(), error) {
	lk.mu.Lock()
	if lk.gates == nil {
		lk.gates = make(map[string]*localGate)
	}
	g := lk.gates[resource]
	if g == nil {
		g = &localGate{ch: make(chan struct{}, 1)}
		lk.gates[resource] = g
	}
	g.users++
	lk.mu.Unlock()
	leave := func() {
		lk.mu.Lock()
		if g.users--; g.users == 0 {
			delete(lk.gates, resource)
		}
		lk.mu.Unlock()
	}
	select {
	case g.ch <- struct{}{}:
		return func() { <-g.ch; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, context.Cause(ctx)
	case <-lk.closeCh:
		leave()
		return nil, ErrClosed
	}
}
