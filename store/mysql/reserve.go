package mysql

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/tenure-go/tenure/driver"
)

// Reservations (driver.Reserver). A Store's poll sees a release by another
// process only if it reads the row between the release and the holder's
// next acquire, which comes within a round trip: a holder that releases
// and acquires again at once would win every race against a waiter in
// another process. So a waiting acquire that finds the resource held
// reserves it in the reservations table (default tenure_leases_waits, one
// row per resource: the waiter and when its reservation lapses, on the
// database's clock), unless another waiter's reservation is live; a free
// resource is then granted, in the acquire's statement, only to that
// waiter while its reservation lives, and anyone else gets a *HeldError
// with Reserved set. A schema of an earlier version has no reservations
// table: the Store keeps none (AcquireWaiting is Acquire) until Init
// creates it and the Store is opened again. Programs of earlier versions
// ignore the table: they honour no reservations.

// AcquireWaiting implements driver.Reserver: Acquire for an attempt of the
// blocking acquire named waiter. When the resource is free and reserved
// for no other waiter, it is granted and waiter's reservation ends (a
// second statement); when another owner holds it, a second statement
// reserves it for waiter for wait from now (rounded up to whole
// microseconds), unless another waiter's reservation is live (its own is
// extended). Input is validated before any I/O.
func (s *Store) AcquireWaiting(ctx context.Context, resource, owner, waiter string, ttl, wait time.Duration) (driver.Record, error) {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	if err := driver.ValidateWaiting(resource, owner, waiter, ttl, wait); err != nil {
		return driver.Record{}, err
	}
	return s.acquire(ctx, resource, owner, ttl, waiter, wait)
}

// Unreserve implements driver.Reserver: one statement deletes waiter's
// reservation of resource, if it has one.
func (s *Store) Unreserve(ctx context.Context, resource, waiter string) error {
	if err := driver.ValidateUnreserve(resource, waiter); err != nil {
		return err
	}
	if s.closed.Load() {
		return errClosed
	}
	err := s.with(ctx, "unreserve", resource, func(c *sql.Conn) error {
		if !s.reservations.Load() {
			return nil
		}
		_, err := c.ExecContext(ctx, s.sql.unreserve.text, s.sql.unreserve.args(map[string]any{"r": resource, "w": waiter})...)
		return err
	})
	if err != nil {
		return s.writeErr("unreserve", resource, err)
	}
	return nil
}

// Reservations reports whether the Store keeps reservations
// (driver.Reserver): whether it found the reservations table. It is known
// after the Store's first operation; before, it is false.
func (s *Store) Reservations() bool { return s.reservations.Load() }

// readReserved returns the live reservation of resource by another waiter
// than w (nil: none), as a Record naming the waiter, or nil.
func (s *Store) readReserved(ctx context.Context, c *sql.Conn, resource string, w any) (*driver.Record, error) {
	var (
		who    []byte
		leftUs int64
	)
	err := c.QueryRowContext(ctx, s.sql.reserved.text, s.sql.reserved.args(map[string]any{"r": resource, "w": w})...).Scan(&who, &leftUs)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &driver.Record{Resource: resource, Owner: string(who), Remaining: time.Duration(max(leftUs, 0)) * time.Microsecond}, nil
}
