package tenure

import (
	"context"
	"time"

	"github.com/tenure-go/tenure/driver"
)

// Fairness on stores without release notifications (driver.Reserver). A
// blocking Acquire polls such a store with backoff, while a holder that
// releases and acquires again does so within a round trip: without help,
// a waiter in another process loses every race. So the attempts of a
// blocking Acquire that found the resource held reserve it in the store
// (the context of its attempts carries waitingKey), and the store grants a
// freed resource to the reserving waiter before anyone else. The
// reservation lasts one retry interval and a second beyond each attempt
// (the longest wait between two attempts, plus the attempt), and ends
// when the waiter is granted or gives up.

// waitingKey marks the context of a blocking Acquire's attempts once the
// resource was found held.
type waitingKey struct{}

// waiting returns ctx marked as an attempt of a waiting Acquire.
func waiting(ctx context.Context) context.Context {
	return context.WithValue(ctx, waitingKey{}, true)
}

// waiterID names this Locker's blocking acquires in a store's reservations.
func (lk *Locker) waiterID() string { return lk.owner + "/waiting" }

// reservation is how long a reservation lasts after an attempt: the longest
// wait before the next attempt (the retry interval) plus a second for it.
func (lk *Locker) reservation() time.Duration { return lk.cfg.retry.Cap + time.Second }

// storeAcquire is the store's Acquire, or AcquireWaiting for an attempt of
// a waiting Acquire on a driver.Reserver store.
func (lk *Locker) storeAcquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if r, ok := lk.store.(driver.Reserver); ok && ctx.Value(waitingKey{}) != nil {
		return r.AcquireWaiting(ctx, resource, owner, lk.waiterID(), ttl, lk.reservation())
	}
	return lk.store.Acquire(ctx, resource, owner, ttl)
}

// stopWaiting ends, in the background, the reservation that a blocking
// Acquire whose attempts carried *ctx (marked by waiting) may have left on
// resource, unless it was granted: a waiter that gives up does not keep a
// freed resource from others until its reservation expires.
func (lk *Locker) stopWaiting(ctx *context.Context, resource string) {
	r, ok := lk.store.(driver.Reserver)
	if !ok || (*ctx).Value(waitingKey{}) == nil {
		return
	}
	lk.mu.Lock()
	granted := lk.held[resource] != nil
	lk.mu.Unlock()
	if granted || !lk.begin() {
		// After Close, nothing more: the reservation expires by itself.
		return
	}
	go func() {
		defer lk.done()
		cctx, cancel := lk.bounded(context.Background(), lk.reservation())
		defer cancel()
		_ = r.Unreserve(cctx, resource, lk.waiterID())
	}()
}
