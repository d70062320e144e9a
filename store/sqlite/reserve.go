package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tenure-go/tenure/driver"
)

// Reservations (driver.Reserver): SQLite sends no release notifications, so
// a waiter in another process polls, and a holder that releases and
// acquires again within a transaction's time would win every race. A
// waiting acquire that finds the resource held, or free but reserved for
// another waiter, reserves it unless another reservation is live; a free
// resource is granted only to its reserving waiter while the reservation
// lives. Reservations live in tenure_waiting, one row per resource, and
// expire on the same clock as leases.

const (
	// reservedSQL reads the live reservation of a resource (?1), given the
	// epoch (?2) and the clock (?3).
	reservedSQL = `SELECT waiter, expires_ms FROM tenure_waiting WHERE resource = ?1 AND epoch = ?2 AND expires_ms > ?3`
	// reserveSQL reserves ?1 for waiter ?2 until ?4 on epoch ?3, unless
	// another waiter's reservation is live at ?5.
	reserveSQL = `INSERT INTO tenure_waiting (resource, waiter, epoch, expires_ms) VALUES (?1, ?2, ?3, ?4)
		ON CONFLICT (resource) DO UPDATE SET waiter = excluded.waiter, epoch = excluded.epoch, expires_ms = excluded.expires_ms
		WHERE tenure_waiting.waiter = excluded.waiter OR tenure_waiting.epoch <> excluded.epoch OR tenure_waiting.expires_ms <= ?5`
)

// AcquireWaiting implements driver.Reserver: Acquire, for an attempt of a
// blocking acquire named waiter, which reserves the resource for wait
// (milliseconds, rounded up) when it is not granted and no other waiter's
// reservation is live, all in one transaction.
func (s *Store) AcquireWaiting(ctx context.Context, resource, owner, waiter string, ttl, wait time.Duration) (driver.Record, error) {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	if err := driver.ValidateWaiting(resource, owner, waiter, ttl, wait); err != nil {
		return driver.Record{}, err
	}
	return s.acquire(ctx, resource, owner, ttl, waiter, wait)
}

// Unreserve implements driver.Reserver: it deletes waiter's reservation of
// resource, if any.
func (s *Store) Unreserve(ctx context.Context, resource, waiter string) error {
	if err := driver.ValidateUnreserve(resource, waiter); err != nil {
		return err
	}
	if err := s.writeBlocked(); err != nil {
		return err
	}
	if s.w.unreserve == nil {
		return nil
	}
	o := &op{kind: opUnreserve, resource: resource, run: func(b *batch) error {
		_, err := b.exec(s.w.unreserve, resource, waiter)
		if err != nil {
			return fmt.Errorf("sqlite store: unreserve %q: %w", resource, err)
		}
		return nil
	}}
	if err := s.submit(ctx, o); err != nil {
		return err
	}
	return o.err
}

// reservedFor returns the live reservation of resource by another waiter
// than waiter (as a Record naming it), or nil.
func (b *batch) reservedFor(resource, waiter, epoch string, now int64) (*driver.Record, error) {
	if b.s.w.reserved == nil {
		return nil, nil
	}
	var who string
	var until int64
	err := b.s.w.reserved.QueryRowContext(bctx, resource, epoch, now).Scan(&who, &until)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		b.fatal = err
		return nil, fmt.Errorf("sqlite store: read the reservation of %q: %w", resource, err)
	case who == waiter:
		return nil, nil
	}
	return &driver.Record{Resource: resource, Owner: who, Remaining: time.Duration(until-now) * time.Millisecond}, nil
}

// reserve reserves resource for waiter (none when empty) for wait from now,
// unless another waiter's reservation is live.
func (b *batch) reserve(resource, waiter string, wait time.Duration, epoch string, now int64) error {
	if waiter == "" || b.s.w.reserve == nil {
		return nil
	}
	if _, err := b.exec(b.s.w.reserve, resource, waiter, epoch, now+driver.Milliseconds(wait), now); err != nil {
		return fmt.Errorf("sqlite store: reserve %q: %w", resource, err)
	}
	return nil
}

// clearReserved deletes the reservation of a resource just granted (its
// waiter's, or one that had lapsed).
func (b *batch) clearReserved(resource string) error {
	if b.s.w.clearReserved == nil {
		return nil
	}
	if _, err := b.exec(b.s.w.clearReserved, resource); err != nil {
		return fmt.Errorf("sqlite store: grant %q: %w", resource, err)
	}
	return nil
}
