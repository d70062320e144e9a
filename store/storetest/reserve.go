package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// testReservation: a store with driver.Reserver grants a freed resource to
// the waiter that reserved it before anyone else: a waiting acquire that
// finds the resource held reserves it (one waiter at a time); once the
// holder released it, a plain Acquire (the holder coming back) and other
// waiters are refused with a *HeldError that is Reserved and names the
// waiter, Get shows the resource free, and the waiter is granted, with a
// greater token. Then the next waiter reserves it. Unreserve ends a
// reservation, and one whose waiter stops asking lapses after its wait.
// Bad input changes nothing.
func testReservation(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	rs, ok := e.store.(driver.Reserver)
	if !ok {
		t.Skip("the store does not implement driver.Reserver (it has release notifications, or keeps no reservations)")
	}
	r := e.res("r")
	a, w, x := e.owner("a"), e.owner("w"), e.owner("x")
	ww, wx := w+"/waiting", x+"/waiting"
	const wait = 30 * time.Second
	heldBy := func(what string, err error, owner string, reserved bool) {
		t.Helper()
		var held *tenure.HeldError
		if !errors.As(err, &held) || held.Holder.Owner != owner || held.Reserved != reserved {
			t.Fatalf("%s: %v; want held by %q (reserved: %v)", what, err, owner, reserved)
		}
		if reserved && (held.Holder.Token != 0 || held.Holder.Remaining < 0 || held.Holder.Remaining > wait) {
			t.Fatalf("%s: reservation %+v; want token 0 and up to %v left (0: unknown)", what, held.Holder, wait)
		}
	}
	// Bad input is refused before anything changes.
	if _, err := rs.AcquireWaiting(ctx, r, a, ww, longTTL, 0); !errors.Is(err, tenure.ErrInvalidTTL) {
		t.Errorf("AcquireWaiting with wait 0: %v; want ErrInvalidTTL", err)
	}
	if _, err := rs.AcquireWaiting(ctx, r, a, "", longTTL, wait); !errors.Is(err, tenure.ErrInvalidOwner) {
		t.Errorf("AcquireWaiting with an empty waiter: %v; want ErrInvalidOwner", err)
	}
	if err := rs.Unreserve(ctx, r, ""); !errors.Is(err, tenure.ErrInvalidOwner) {
		t.Errorf("Unreserve with an empty waiter: %v; want ErrInvalidOwner", err)
	}
	e.mustFree(ctx, r)

	recA := e.mustAcquire(ctx, r, a+".1", longTTL)
	_, err := rs.AcquireWaiting(ctx, r, w+".1", ww, longTTL, wait)
	heldBy("W waiting while A holds", err, a+".1", false)
	_, err = rs.AcquireWaiting(ctx, r, x+".1", wx, longTTL, wait)
	heldBy("X waiting while A holds", err, a+".1", false)
	if err := e.store.Release(ctx, r, a+".1", recA.Token); err != nil {
		t.Fatal(err)
	}
	_, err = e.store.Acquire(ctx, r, a+".2", longTTL)
	heldBy("A acquiring again at once", err, ww, true)
	_, err = rs.AcquireWaiting(ctx, r, x+".2", wx, longTTL, wait)
	heldBy("X waiting after the release", err, ww, true)
	e.mustFree(ctx, r)
	recW, err := rs.AcquireWaiting(ctx, r, w+".2", ww, longTTL, wait)
	if err != nil {
		t.Fatalf("W, which reserved the freed resource: %v; want granted", err)
	}
	if !e.cfg.NoFencing && recW.Token <= recA.Token {
		t.Fatalf("W's token %d <= A's %d", recW.Token, recA.Token)
	}
	e.mustHeldBy(ctx, r, w+".2", recW.Token)
	// The next waiter reserves it.
	_, err = rs.AcquireWaiting(ctx, r, x+".3", wx, longTTL, wait)
	heldBy("X waiting while W holds", err, w+".2", false)
	if err := e.store.Release(ctx, r, w+".2", recW.Token); err != nil {
		t.Fatal(err)
	}
	_, err = e.store.Acquire(ctx, r, w+".3", longTTL)
	heldBy("W acquiring again at once", err, wx, true)
	// X gives up: Unreserve frees the resource for anyone.
	if err := rs.Unreserve(ctx, r, wx); err != nil {
		t.Fatalf("Unreserve: %v", err)
	}
	rec := e.mustAcquire(ctx, r, a+".3", longTTL)
	// A reservation whose waiter stops asking lapses.
	_, err = rs.AcquireWaiting(ctx, r, w+".4", ww, longTTL, e.cfg.ShortTTL)
	heldBy("W waiting, briefly", err, a+".3", false)
	if err := e.store.Release(ctx, r, a+".3", rec.Token); err != nil {
		t.Fatal(err)
	}
	_, err = e.store.Acquire(ctx, r, a+".4", longTTL)
	heldBy("A right after its release", err, ww, true)
	if e.cfg.Advance != nil {
		e.cfg.Advance(e.cfg.ShortTTL + time.Millisecond)
	} else {
		time.Sleep(e.cfg.ShortTTL + e.cfg.ExpirySlack)
	}
	e.mustAcquire(ctx, r, a+".5", longTTL)
}
