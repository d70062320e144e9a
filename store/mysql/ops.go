package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tenure-go/tenure/driver"
)

// holderRow is a live lease as the holder statement reads it.
type holderRow struct {
	owner           []byte
	token           uint64
	ttlUs, remainUs int64
}

func (h holderRow) record(resource string) driver.Record {
	return driver.Record{Resource: resource, Owner: string(h.owner), Token: h.token,
		TTL: time.Duration(h.ttlUs) * time.Microsecond, Remaining: time.Duration(max(h.remainUs, 0)) * time.Microsecond}
}

// readHolder reads the live lease on resource through c: found is false
// when there is none.
func (s *Store) readHolder(ctx context.Context, c *sql.Conn, resource string) (h holderRow, found bool, err error) {
	err = c.QueryRowContext(ctx, s.sql.holder.text, s.sql.holder.args(map[string]any{"r": resource})...).
		Scan(&h.owner, &h.token, &h.ttlUs, &h.remainUs)
	if errors.Is(err, sql.ErrNoRows) {
		return h, false, nil
	}
	return h, err == nil, err
}

// errReadAfterWrite marks the error of the read that follows a write
// which changed nothing: the write's outcome is known (nothing changed),
// so the error is not an unknown outcome.
type errReadAfterWrite struct{ err error }

func (e errReadAfterWrite) Error() string { return "reading the holder: " + e.err.Error() }
func (e errReadAfterWrite) Unwrap() error { return e.err }

// Acquire implements driver.Store. The TTL is rounded up to whole
// microseconds; TTLs below 1 µs or above MaxTTL return ErrInvalidTTL
// before any I/O. It returns a *driver.HeldError naming the holder, with
// the time left on the database's clock, when another owner holds the
// resource. One statement when it grants or renews (one round trip), a
// second one to read the holder when the resource is held.
//
// On a schema with the reservations table, a resource that is free but
// reserved for a waiter (driver.Reserver) is not granted: the *HeldError
// has Reserved set and names the waiter.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	return s.acquire(ctx, resource, owner, ttl, "", 0)
}

// acquire is Acquire, and AcquireWaiting when waiter is not empty.
func (s *Store) acquire(ctx context.Context, resource, owner string, ttl time.Duration, waiter string, wait time.Duration) (driver.Record, error) {
	if s.closed.Load() {
		return driver.Record{}, errClosed
	}
	us := micros(ttl)
	var w any // NULL for a plain Acquire
	if waiter != "" {
		w = waiter
	}
	var (
		changed int64
		token   uint64
		h       holderRow
		found   bool
		resv    *driver.Record // the reservation that kept a free resource
	)
	err := s.with(ctx, "acquire", resource, func(c *sql.Conn) error {
		resv, found = nil, false
		q, args := s.sql.acquire, map[string]any{"r": resource, "o": owner, "ttl": us, "w": w}
		reserving := s.reservations.Load()
		if reserving {
			q = s.sql.acquireRes
		}
		res, err := c.ExecContext(ctx, q.text, q.args(args)...)
		if err != nil {
			return err
		}
		changed, err = res.RowsAffected()
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		token = uint64(id)
		if changed > 0 {
			if reserving && waiter != "" {
				// Granted to the waiter: its reservation ends (best
				// effort: one left behind lapses after its wait).
				_, _ = c.ExecContext(ctx, s.sql.clearReserved.text, s.sql.clearReserved.args(args)...)
			}
			return nil
		}
		// Nothing changed: another owner holds it (or this grant renewed
		// it to the expiry it already had, within the same microsecond),
		// or it is free and reserved for another waiter.
		if h, found, err = s.readHolder(ctx, c, resource); err != nil {
			return errReadAfterWrite{err}
		}
		if !reserving {
			return nil
		}
		if !found {
			if resv, err = s.readReserved(ctx, c, resource, w); err != nil {
				return errReadAfterWrite{err}
			}
			return nil
		}
		if waiter != "" && string(h.owner) != owner {
			// Held by another owner: reserve it for this waiter, again
			// when the write was proven not applied (on Galera, a
			// certification conflict with another process's write of
			// the reservation); best effort after that: the next attempt
			// reserves it.
			args["wait"], args["k"] = micros(wait), h.token
			for range maxAttempts {
				_, err := c.ExecContext(ctx, s.sql.reserve.text, s.sql.reserve.args(args)...)
				if err == nil || !retryable(err) || ctx.Err() != nil {
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		var ra errReadAfterWrite
		if errors.As(err, &ra) {
			return driver.Record{}, s.failed("acquire", resource, err)
		}
		return driver.Record{}, s.writeErr("acquire", resource, err)
	}
	if changed == 0 && (!found || string(h.owner) != owner) {
		if resv != nil {
			return driver.Record{}, &driver.HeldError{Holder: *resv, Reserved: true}
		}
		if !found {
			// Released or expired between the two statements: no holder
			// to name (driver.HeldError), try again.
			return driver.Record{}, &driver.HeldError{Holder: driver.Record{Resource: resource, Token: token}}
		}
		return driver.Record{}, &driver.HeldError{Holder: h.record(resource)}
	}
	if token == 0 {
		return driver.Record{}, fmt.Errorf("mysql store: acquire %q: the server returned no token (is %s a leases table?): %w", resource, s.regName, driver.ErrNotStore)
	}
	s.startSweeper()
	return driver.Record{Resource: resource, Owner: owner, Token: token, TTL: ttl,
		Remaining: time.Duration(us) * time.Microsecond}, nil
}

// change runs a renew, keep or release statement: nil when it changed the
// row; otherwise the holder is read and the error names it
// (driver.NotHolder), unless the live lease is this grant's, unchanged
// because it already had what the statement set (renewedUnchanged
// reports whether that counts as done).
func (s *Store) change(ctx context.Context, op, resource, owner string, token uint64, q stmt, args map[string]any, unchangedIsDone bool) error {
	var (
		changed int64
		h       holderRow
		found   bool
	)
	err := s.with(ctx, op, resource, func(c *sql.Conn) error {
		res, err := c.ExecContext(ctx, q.text, q.args(args)...)
		if err != nil {
			return err
		}
		if changed, err = res.RowsAffected(); err != nil || changed > 0 {
			return err
		}
		if h, found, err = s.readHolder(ctx, c, resource); err != nil {
			return errReadAfterWrite{err}
		}
		return nil
	})
	if err != nil {
		var ra errReadAfterWrite
		if errors.As(err, &ra) {
			return s.failed(op, resource, err)
		}
		return s.writeErr(op, resource, err)
	}
	if changed > 0 {
		return nil
	}
	if found && string(h.owner) == owner && h.token == token {
		if unchangedIsDone {
			return nil
		}
		// Read after a write that did not match it: the lease changed in
		// between (impossible for a live grant but by its own calls).
		return fmt.Errorf("mysql store: %s %q: %w", op, resource, driver.NotHolder(nil))
	}
	if !found {
		return fmt.Errorf("mysql store: %s %q: %w", op, resource, driver.NotHolder(nil))
	}
	rec := h.record(resource)
	return fmt.Errorf("mysql store: %s %q: %w", op, resource, driver.NotHolder(&rec))
}

// Renew implements driver.Store: it extends the live lease with this owner
// and token to ttl from now on the database's clock, or returns an error
// wrapping driver.ErrLeaseLost (driver.NotHolder, naming the current
// holder when there is one) and changes nothing. One statement; a second
// one reads the holder when it did not apply.
func (s *Store) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	us := micros(ttl)
	return s.change(ctx, "renew", resource, owner, token, s.sql.renew,
		map[string]any{"r": resource, "o": owner, "k": token, "ttl": us}, true)
}

// Keep implements driver.Keeper: one statement gives the live lease of
// this grant to owner string keeper, expiring ttl from now on the
// database's clock.
func (s *Store) Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error {
	if err := ttls.ValidateKeep(resource, owner, keeper, ttl); err != nil {
		return err
	}
	us := micros(ttl)
	return s.change(ctx, "keep", resource, owner, token, s.sql.keep,
		map[string]any{"r": resource, "o": owner, "k": token, "ttl": us, "keeper": keeper}, false)
}

// Release implements driver.Store: it frees the live lease with this owner
// and token, or returns an error wrapping driver.ErrLeaseLost
// (driver.NotHolder, naming the current holder when there is one) and
// changes nothing. One statement; a second one reads the holder when it did
// not apply. Waiters of this Store are woken at once (the longest waiting
// one, and every watcher); those of other Stores at their Store's next
// poll.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	err := s.change(ctx, "release", resource, owner, token, s.sql.release,
		map[string]any{"r": resource, "o": owner, "k": token}, false)
	if err == nil {
		s.hub.Wake(resource)
	}
	return err
}

// Get implements driver.Store. Remaining is measured on the database's
// clock.
func (s *Store) Get(ctx context.Context, resource string) (driver.Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return driver.Record{}, err
	}
	var (
		h     holderRow
		found bool
	)
	err := s.with(ctx, "get", resource, func(c *sql.Conn) (err error) {
		h, found, err = s.readHolder(ctx, c, resource)
		return err
	})
	if err != nil {
		return driver.Record{}, s.failed("get", resource, err)
	}
	if !found {
		return driver.Record{}, fmt.Errorf("mysql store: %q: %w", resource, driver.ErrNotHeld)
	}
	return h.record(resource), nil
}

// List implements driver.Store: the live leases whose resource starts with
// prefix, in byte order of the resource.
func (s *Store) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	var out []driver.Record
	err := s.with(ctx, "list", prefix, func(c *sql.Conn) error {
		out = nil
		q, args := s.sql.listAll, []any(nil)
		if prefix != "" {
			q, args = s.sql.list.text, s.sql.list.args(map[string]any{"p": prefix, "n": len(prefix)})
		}
		rows, err := c.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				r []byte
				h holderRow
			)
			if err := rows.Scan(&r, &h.owner, &h.token, &h.ttlUs, &h.remainUs); err != nil {
				return err
			}
			out = append(out, h.record(string(r)))
		}
		return rows.Err()
	})
	if err != nil {
		return nil, s.failed("list", prefix, err)
	}
	return out, nil
}

// Sweep deletes the rows of leases that were released or expired more than
// SweepGrace ago, and rows that are neither (left in a partial state by
// another tool), at most 1,000 per round until none is left or ctx ends,
// and returns how many it deleted. Each round reads the rows due with
// their tokens, raises the token floor to the largest of them, and then
// deletes those that are still due and whose token is not above it: three
// statements, each committed on its own, so no lock is held between them
// (a sweeping process that is paused or cut off stops no grant), a lease
// taken or renewed meanwhile is never deleted, and no token is lost with
// its row. Every Store sweeps by itself (Config.SweepInterval); Sweep is
// for tests and operators.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	var total int64
	for {
		var n int64
		var found int
		err := s.with(ctx, "sweep", s.regName, func(c *sql.Conn) error {
			n, found = 0, 0
			var (
				cand []any
				top  uint64
			)
			rows, err := c.QueryContext(ctx, s.sql.deadRows)
			if err != nil {
				return err
			}
			for rows.Next() {
				var (
					r []byte
					k uint64
				)
				if err := rows.Scan(&r, &k); err != nil {
					rows.Close()
					return err
				}
				cand = append(cand, r)
				top = max(top, k)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			found = len(cand)
			if found == 0 {
				return nil
			}
			if _, err := c.ExecContext(ctx, s.sql.raiseFloor.text, s.sql.raiseFloor.args(map[string]any{"top": top})...); err != nil {
				return err
			}
			res, err := c.ExecContext(ctx, fmt.Sprintf(s.sql.deleteDead, placeholders(len(cand))), append(cand, top)...)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, s.failed("sweep", s.regName, err)
		}
		total += n
		if found < sweepBatch || ctx.Err() != nil {
			if ctx.Err() == nil && s.reservations.Load() {
				if err := s.with(ctx, "sweep", s.regName, func(c *sql.Conn) error {
					_, err := c.ExecContext(ctx, s.sql.sweepReserved)
					return err
				}); err != nil {
					return total, s.failed("sweep reservations", s.regName, err)
				}
			}
			return total, ctx.Err()
		}
	}
}
