package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-go/tenure/driver"
)

// holderRow is a lease as the renew and release statements return it when
// they did not apply: the current holder, if any (nullable columns).
type holderRow struct {
	owner                  *string
	token, ttlMs, remainMs *int64
}

// notHolder is the error of a renewal or release of (owner, token) that
// did not apply, naming the holder h when there is one. A holder equal to
// the grant itself comes from the statement's snapshot, taken before a
// concurrent change that the write saw: then no holder is named.
func notHolder(resource, owner string, token uint64, h holderRow) error {
	if h.owner == nil || h.token == nil || (*h.owner == owner && uint64(*h.token) == token) {
		return driver.NotHolder(nil)
	}
	rec := driver.Record{Resource: resource, Owner: *h.owner, Token: uint64(*h.token)}
	if h.ttlMs != nil {
		rec.TTL = time.Duration(*h.ttlMs) * time.Millisecond
	}
	if h.remainMs != nil {
		rec.Remaining = time.Duration(max(*h.remainMs, 0)) * time.Millisecond
	}
	return driver.NotHolder(&rec)
}

// Acquire implements driver.Store. The TTL is rounded up to whole
// milliseconds; TTLs below 1 ms or above MaxTTL return ErrInvalidTTL before
// any I/O. It returns a *driver.HeldError naming the holder, with the time
// left on the database's clock, when another owner holds the resource (and
// marks the lease as waited for, so that its release notifies). One
// statement, one round trip.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	if s.closed.Load() {
		return driver.Record{}, errClosed
	}
	msTTL := driver.Milliseconds(ttl)
	var (
		holder          string
		token           int64
		ttlMs, remainMs int64
	)
	err := s.with(ctx, "acquire", resource, func(c *pgxpool.Conn) error {
		return c.QueryRow(ctx, s.sql.acquire, s.args(resource, owner, msTTL)...).Scan(&holder, &token, &ttlMs, &remainMs, nil)
	})
	if err != nil {
		return driver.Record{}, s.writeErr("acquire", resource, err)
	}
	if holder != owner {
		return driver.Record{}, &driver.HeldError{Holder: driver.Record{Resource: resource, Owner: holder, Token: uint64(token),
			TTL: time.Duration(ttlMs) * time.Millisecond, Remaining: time.Duration(max(remainMs, 0)) * time.Millisecond}}
	}
	s.startSweeper()
	return driver.Record{Resource: resource, Owner: owner, Token: uint64(token), TTL: ttl,
		Remaining: time.Duration(msTTL) * time.Millisecond}, nil
}

// Renew implements driver.Store: it extends the live lease with this owner
// and token to ttl from now on the database's clock, or returns an error
// wrapping driver.ErrLeaseLost (driver.NotHolder, naming the current
// holder when there is one) and changes nothing. One statement.
func (s *Store) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	var (
		failed bool
		h      holderRow
	)
	err := s.with(ctx, "renew", resource, func(c *pgxpool.Conn) (err error) {
		failed, h, err = queryHolder(ctx, c, s.sql.renew, s.args(resource, owner, int64(token), driver.Milliseconds(ttl)))
		return err
	})
	if err != nil {
		return s.writeErr("renew", resource, err)
	}
	if failed {
		return fmt.Errorf("postgres store: renew %q: %w", resource, notHolder(resource, owner, token, h))
	}
	return nil
}

// Keep implements driver.Keeper: one statement gives the live lease of
// this grant to owner string keeper, expiring ttl from now on the
// database's clock.
func (s *Store) Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error {
	if err := ttls.ValidateKeep(resource, owner, keeper, ttl); err != nil {
		return err
	}
	var (
		failed bool
		h      holderRow
	)
	err := s.with(ctx, "keep", resource, func(c *pgxpool.Conn) (err error) {
		failed, h, err = queryHolder(ctx, c, s.sql.keep, s.args(resource, owner, int64(token), driver.Milliseconds(ttl), keeper))
		return err
	})
	if err != nil {
		return s.writeErr("keep", resource, err)
	}
	if failed {
		return fmt.Errorf("postgres store: keep %q: %w", resource, notHolder(resource, owner, token, h))
	}
	return nil
}

// queryHolder runs a renew or release statement: no row when it applied,
// one row naming the holder when it did not.
func queryHolder(ctx context.Context, c *pgxpool.Conn, sql string, args []any) (failed bool, h holderRow, err error) {
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		return false, h, err
	}
	defer rows.Close()
	if rows.Next() {
		failed = true
		if err := rows.Scan(&h.owner, &h.token, &h.ttlMs, &h.remainMs); err != nil {
			return false, h, err
		}
	}
	rows.Close()
	return failed, h, rows.Err()
}

// Release implements driver.Store: it frees the live lease with this owner
// and token, and notifies when someone waits for it, or returns an
// error wrapping driver.ErrLeaseLost (driver.NotHolder, naming the current
// holder when there is one) and changes nothing. One statement.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	var (
		failed bool
		h      holderRow
	)
	err := s.with(ctx, "release", resource, func(c *pgxpool.Conn) (err error) {
		failed, h, err = queryHolder(ctx, c, s.sql.release, s.args(resource, owner, int64(token), s.channel))
		return err
	})
	if err != nil {
		return s.writeErr("release", resource, err)
	}
	if failed {
		return fmt.Errorf("postgres store: release %q: %w", resource, notHolder(resource, owner, token, h))
	}
	return nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (s *Store) get(ctx context.Context, q querier, resource string) (driver.Record, error) {
	var (
		owner           string
		token           int64
		ttlMs, remainMs int64
	)
	err := q.QueryRow(ctx, s.sql.holder, s.args(resource)...).Scan(&owner, &token, &ttlMs, &remainMs)
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.Record{}, fmt.Errorf("postgres store: %q: %w", resource, driver.ErrNotHeld)
	}
	if err != nil {
		return driver.Record{}, err
	}
	return driver.Record{Resource: resource, Owner: owner, Token: uint64(token),
		TTL: time.Duration(ttlMs) * time.Millisecond, Remaining: time.Duration(max(remainMs, 0)) * time.Millisecond}, nil
}

// Get implements driver.Store. Remaining is measured on the database's
// clock.
func (s *Store) Get(ctx context.Context, resource string) (driver.Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return driver.Record{}, err
	}
	var rec driver.Record
	err := s.with(ctx, "get", resource, func(c *pgxpool.Conn) (err error) {
		rec, err = s.get(ctx, c, resource)
		return err
	})
	if err != nil && !errors.Is(err, driver.ErrNotHeld) {
		return driver.Record{}, s.failed("get", resource, err)
	}
	return rec, err
}

// List implements driver.Store: the live leases whose resource starts with
// prefix, in byte order of the resource.
func (s *Store) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	var out []driver.Record
	err := s.with(ctx, "list", prefix, func(c *pgxpool.Conn) (err error) {
		out, err = s.list(ctx, c, prefix)
		return err
	})
	if err != nil {
		return nil, s.failed("list", prefix, err)
	}
	return out, nil
}

type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (s *Store) list(ctx context.Context, q rowsQuerier, prefix string) ([]driver.Record, error) {
	rows, err := q.Query(ctx, s.sql.list, s.args(prefix)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.Record
	for rows.Next() {
		var (
			rec             driver.Record
			token           int64
			ttlMs, remainMs int64
		)
		if err := rows.Scan(&rec.Resource, &rec.Owner, &token, &ttlMs, &remainMs); err != nil {
			return nil, err
		}
		rec.Token = uint64(token)
		rec.TTL = time.Duration(ttlMs) * time.Millisecond
		rec.Remaining = time.Duration(max(remainMs, 0)) * time.Millisecond
		out = append(out, rec)
	}
	return out, rows.Err()
}

// Sweep deletes the rows of leases that were released or expired more than
// SweepGrace ago, and rows that are neither (left in a partial state by
// another tool, or released by an older tenure), at most 1,000 per statement until
// none is left or ctx ends, and returns how many it deleted. A lease that
// is taken or renewed meanwhile is never deleted (each row is checked
// again after it is locked); tokens do not depend on the rows. Every Store
// sweeps by itself (Config.SweepInterval); Sweep is for tests and
// operators.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	var total int64
	for {
		var n int64
		err := s.with(ctx, "sweep", s.regName, func(c *pgxpool.Conn) error {
			var raised *int64
			return c.QueryRow(ctx, s.sql.sweep, s.args()...).Scan(&n, &raised)
		})
		if err != nil {
			return total, s.failed("sweep", s.regName, err)
		}
		total += n
		if n < sweepBatch || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}
