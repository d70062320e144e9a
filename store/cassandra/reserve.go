package cassandra

import (
	"context"
	"errors"
	"fmt"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/driver"
)

// Reservations (driver.Reserver), in ModeNative: Cassandra sends no
// release notifications, so a waiter in another process polls, and a
// holder that releases and acquires again at once would win every race. A
// waiting acquire that finds the resource held writes its name into the
// row's waiter cell, with a TTL of its wait, unless another waiter's is
// there (a conditional UPDATE ... IF waiter IN (null, ?)); a free resource
// is then granted, in the grant's conditional batch, only with the waiter
// cell null (Acquire) or its own (AcquireWaiting, which also clears it).
// ModeJaeger keeps none: its table is Jaeger's. A table created by an
// earlier version has no waiter column; the Store then keeps none until
// Init adds it.

// hasWaiterColumn reports whether the native table has the waiter column.
func (s *Store) hasWaiterColumn(ctx context.Context) (bool, error) {
	qctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	err := s.session.Query(s.st.findWaiter, schemaProbeKey).Consistency(gocql.One).IterContext(qctx).Close()
	var inv *gocql.RequestErrInvalid
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &inv):
		return false, nil
	}
	return false, fmt.Errorf("cassandra store: check table %s.%s: %w", s.cfg.keyspace, s.cfg.table, err)
}

// Reservations reports whether the Store keeps reservations
// (driver.Reserver): in ModeNative, on a table with the waiter column.
func (s *Store) Reservations() bool { return s.reservations }

// AcquireWaiting implements driver.Reserver: Acquire for an attempt of the
// blocking acquire named waiter. When the resource is free and reserved for
// no other waiter, the grant also clears the reservation; when it is held,
// a second conditional write reserves it for waiter for wait (rounded up
// as StoreTTL rounds TTLs), unless another waiter's reservation is there.
// In ModeJaeger, and on a table without the waiter column, it is Acquire.
func (s *Store) AcquireWaiting(ctx context.Context, resource, owner, waiter string, ttl, wait time.Duration) (driver.Record, error) {
	if err := driver.ValidateWaiting(resource, owner, waiter, ttl, wait); err != nil {
		return driver.Record{}, err
	}
	return s.acquire(ctx, resource, owner, ttl, waiter, wait)
}

// Unreserve implements driver.Reserver: one conditional write that clears
// the resource's reservation if it is waiter's.
func (s *Store) Unreserve(ctx context.Context, resource, waiter string) error {
	if err := driver.ValidateUnreserve(resource, waiter); err != nil {
		return err
	}
	if s.closed.Load() {
		return errClosed
	}
	if !s.reservations {
		return nil
	}
	if _, _, err := s.casQuery(ctx, s.st.unreserve, resource, waiter); err != nil {
		return fmt.Errorf("cassandra store: unreserve %q: %w", resource, err)
	}
	return nil
}

// reservedOther reports whether the row cur, free, is reserved for another
// waiter than the grant's.
func (g grant) reservedOther(cur row) bool {
	return g.s.reservations && cur.waiter != "" && cur.waiter != g.waiter
}

// reservedErr is the error of a grant refused because cur is reserved for
// another waiter. The not-applied result carries no TTL: Remaining is 0.
func (g grant) reservedErr(cur row) error {
	return &driver.HeldError{Holder: driver.Record{Resource: g.resource, Owner: cur.waiter}, Reserved: true}
}

// heldErr is Store.heldErr for a grant that found the resource held by
// another owner; an AcquireWaiting reserves the resource first (best
// effort: a reservation whose write failed is made by the next attempt).
func (g grant) heldErr(ctx context.Context, cur row, wait time.Duration) error {
	if g.waiter != "" && (cur.waiter == "" || cur.waiter == g.waiter) {
		secs, err := StoreTTL(max(wait, MinTTL))
		if err == nil {
			_, _, _ = g.s.casQuery(ctx, g.s.st.reserve, secs, g.waiter, g.resource, g.waiter)
		}
	}
	return g.s.heldErr(ctx, g.resource, cur)
}
