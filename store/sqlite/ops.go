package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	// also registers the "sqlite" driver

	"github.com/tenure-go/tenure/driver"
)

// row is a row of tenure_leases as stored: each value as SQLite returns it
// (nil, int64, float64, string or []byte), so that a row another tool
// wrote with values of the wrong type is read, and judged, rather than
// failing the read.
type row struct {
	owner, token, ttl, epoch, expires any
}

// live reports whether the row is a live lease at nowMs of epoch: the
// condition of liveSQL.
func (r row) live(epoch string, nowMs int64) bool {
	exp, ttl, ok := r.lease(epoch)
	return ok && exp > nowMs && exp-ttl <= nowMs
}

// lease returns the expiry and TTL of a row that has every column of a
// lease on epoch's clock, with the right types (liveSQL without its
// clock).
func (r row) lease(epoch string) (exp, ttl int64, ok bool) {
	owner, ok1 := r.owner.(string)
	token, ok2 := r.token.(int64)
	ttl, ok3 := r.ttl.(int64)
	e, ok4 := r.epoch.(string)
	exp, ok5 := r.expires.(int64)
	return exp, ttl, ok1 && ok2 && ok3 && ok4 && ok5 && owner != "" && token > 0 && ttl > 0 && e == epoch
}

// liveness is what a reader knows of a row it read between two clock
// readings.
type liveness int

const (
	dead   liveness = iota // not a live lease at the instant the read saw
	alive                  // a live lease at that instant
	unsure                 // its expiry fell between the readings: read again
)

// liveBetween judges a row that a read saw at some instant between the
// clock readings before and after its query (WAL readers see a snapshot,
// and other processes commit while the reader runs). A row expired at
// before was dead then; a row that expires after after was alive at the
// instant of the snapshot, since a writer stamps a row with the clock it
// read before its commit, which is at or before that instant. Expiries in
// between are unsure. A row stamped after after was not written by tenure
// (liveSQL's rule). Judging a row at one reading only reports a lease free
// that was never free: at before, a lease renewed after that reading looks
// granted in the future; at after, a lease that expired between the
// snapshot and the reading, renewed meanwhile, looks expired.
func (r row) liveBetween(epoch string, before, after int64) liveness {
	exp, ttl, ok := r.lease(epoch)
	switch {
	case !ok || exp <= before || exp-ttl > after:
		return dead
	case exp > after:
		return alive
	}
	return unsure
}

// record returns the lease of a live row.
func (r row) record(resource string, nowMs int64) driver.Record {
	rec := driver.Record{Resource: resource}
	rec.Owner, _ = r.owner.(string)
	if t, ok := r.token.(int64); ok {
		rec.Token = uint64(t)
	}
	if t, ok := r.ttl.(int64); ok {
		rec.TTL = time.Duration(t) * time.Millisecond
	}
	if e, ok := r.expires.(int64); ok {
		rec.Remaining = time.Duration(e-nowMs) * time.Millisecond
	}
	return rec
}

func scanRow(sc interface{ Scan(...any) error }) (row, error) {
	var r row
	err := sc.Scan(&r.owner, &r.token, &r.ttl, &r.epoch, &r.expires)
	return r, err
}

// Acquire implements driver.Store. A row that is not a live lease
// (released by an older version, expired, written partly or with values of
// the wrong type by another tool, from another boot) is free: the grant
// replaces it, with a token above the row's. A free resource that a waiter
// reserved (driver.Reserver) is not granted: the *driver.HeldError is
// Reserved and names the waiter.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	return s.acquire(ctx, resource, owner, ttl, "", 0)
}

// acquire runs Acquire, or AcquireWaiting when waiter is not empty, in one
// transaction.
func (s *Store) acquire(ctx context.Context, resource, owner string, ttl time.Duration, waiter string, wait time.Duration) (driver.Record, error) {
	if err := s.writeBlocked(); err != nil {
		return driver.Record{}, err
	}
	ms := driver.Milliseconds(ttl)
	var rec driver.Record
	o := &op{kind: opAcquire, resource: resource, run: func(b *batch) error {
		epoch, now, err := b.clock()
		if err != nil {
			return err
		}
		r, found, err := b.row(resource)
		if err != nil {
			return err
		}
		if found && r.live(epoch, now) {
			held := r.record(resource, now)
			if held.Owner != owner {
				if err := b.reserve(resource, waiter, wait, epoch, now); err != nil {
					return err
				}
				return &driver.HeldError{Holder: held}
			}
			// The same owner string: the same grant, renewed.
			if _, err := b.exec(s.w.sameOwner, ms, now+ms, resource); err != nil {
				return fmt.Errorf("sqlite store: renew %q: %w", resource, err)
			}
			rec = driver.Record{Resource: resource, Owner: owner, Token: held.Token, TTL: ttl, Remaining: time.Duration(ms) * time.Millisecond}
			return nil
		}
		if other, err := b.reservedFor(resource, waiter, epoch, now); err != nil || other != nil {
			if err != nil {
				return err
			}
			return &driver.HeldError{Holder: *other, Reserved: true}
		}
		token, err := b.nextToken(resource, r, found)
		if err != nil {
			return err
		}
		if _, err := b.exec(s.w.grant, resource, owner, token, ms, epoch, now+ms, s.wall().UTC().Format(time.RFC3339Nano)); err != nil {
			return fmt.Errorf("sqlite store: grant %q: %w", resource, err)
		}
		if err := b.clearReserved(resource); err != nil {
			return err
		}
		rec = driver.Record{Resource: resource, Owner: owner, Token: uint64(token), TTL: ttl, Remaining: time.Duration(ms) * time.Millisecond}
		return nil
	}}
	if err := s.submit(ctx, o); err != nil {
		return driver.Record{}, err
	}
	if o.err != nil {
		return driver.Record{}, o.err
	}
	return rec, nil
}

// Renew implements driver.Store. A renewal of a grant that no longer holds
// the resource returns driver.NotHolder, naming the current holder when
// there is one.
func (s *Store) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	if err := s.writeBlocked(); err != nil {
		return err
	}
	ms := driver.Milliseconds(ttl)
	o := &op{kind: opRenew, resource: resource, run: func(b *batch) error {
		epoch, now, err := b.clock()
		if err != nil {
			return err
		}
		return b.renew(resource, owner, token, ms, epoch, now)
	}}
	if err := s.submit(ctx, o); err != nil {
		return err
	}
	return o.err
}

// Keep implements driver.Keeper: in one transaction, the row of this grant
// gets owner string keeper and expires ttl from now (milliseconds).
func (s *Store) Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error {
	if err := ttls.ValidateKeep(resource, owner, keeper, ttl); err != nil {
		return err
	}
	if err := s.writeBlocked(); err != nil {
		return err
	}
	ms := driver.Milliseconds(ttl)
	o := &op{kind: opKeep, resource: resource, run: func(b *batch) error {
		epoch, now, err := b.clock()
		if err != nil {
			return err
		}
		n, err := b.exec(s.w.keep, epoch, now, ms, now+ms, resource, owner, int64(token), keeper)
		if err != nil {
			return fmt.Errorf("sqlite store: keep %q: %w", resource, err)
		}
		if n == 1 {
			return nil
		}
		return b.notHolder("keep", resource, epoch, now)
	}}
	if err := s.submit(ctx, o); err != nil {
		return err
	}
	return o.err
}

// renew renews one lease inside the transaction, at now on epoch's clock.
func (b *batch) renew(resource, owner string, token uint64, ms int64, epoch string, now int64) error {
	n, err := b.exec(b.s.w.renew, epoch, now, ms, now+ms, resource, owner, int64(token))
	if err != nil {
		return fmt.Errorf("sqlite store: renew %q: %w", resource, err)
	}
	if n == 1 {
		return nil
	}
	return b.notHolder("renew", resource, epoch, now)
}

// Release implements driver.Store: it deletes the lease's row. A release of
// a grant that no longer holds the resource returns driver.NotHolder,
// naming the current holder when there is one.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	if err := s.writeBlocked(); err != nil {
		return err
	}
	o := &op{kind: opRelease, resource: resource, run: func(b *batch) error {
		epoch, now, err := b.clock()
		if err != nil {
			return err
		}
		n, err := b.exec(s.w.release, epoch, now, resource, owner, int64(token))
		if err != nil {
			return fmt.Errorf("sqlite store: release %q: %w", resource, err)
		}
		if n == 1 {
			return nil
		}
		return b.notHolder("release", resource, epoch, now)
	}}
	if err := s.submit(ctx, o); err != nil {
		return err
	}
	return o.err
}

// Get implements driver.Store. The answer is the lease at one instant
// during the call: the host clock is read before and after the query, and a
// lease whose expiry falls between the two readings is read again.
func (s *Store) Get(ctx context.Context, resource string) (driver.Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return driver.Record{}, err
	}
	for {
		epoch, before, err := s.clock()
		if err != nil {
			return driver.Record{}, err
		}
		r, err := scanRow(s.db.QueryRowContext(ctx, selectRow, resource))
		if ferr := s.checkFile(); ferr != nil {
			return driver.Record{}, fmt.Errorf("sqlite store: get %q: %w", resource, ferr)
		}
		if errors.Is(err, sql.ErrNoRows) {
			return driver.Record{}, fmt.Errorf("sqlite store: %q: %w", resource, driver.ErrNotHeld)
		}
		if err != nil {
			return driver.Record{}, fmt.Errorf("sqlite store: get %q: %w", resource, err)
		}
		after, err := s.clockAfter(epoch)
		if err != nil {
			return driver.Record{}, err
		}
		switch r.liveBetween(epoch, before.Milliseconds(), after) {
		case alive:
			return r.record(resource, after), nil
		case dead:
			return driver.Record{}, fmt.Errorf("sqlite store: %q: %w", resource, driver.ErrNotHeld)
		}
		if err := ctx.Err(); err != nil {
			return driver.Record{}, fmt.Errorf("sqlite store: get %q: %w", resource, err)
		}
	}
}

// clockAfter reads the host clock after a query that followed a reading on
// epoch's clock, in milliseconds. A new epoch (the clock restarted, which a
// test's clock can do) is an error: the reading before no longer counts.
func (s *Store) clockAfter(epoch string) (int64, error) {
	e, now, err := s.clock()
	if err != nil {
		return 0, err
	}
	if e != epoch {
		return 0, fmt.Errorf("sqlite store: the host clock restarted (boot id %q, was %q) during a read", e, epoch)
	}
	return now.Milliseconds(), nil
}

// List implements driver.Store. Like Get, it reads the host clock before
// and after its query, and reads again when a lease's expiry falls between
// the two readings, so the list is the leases at one instant during the
// call.
func (s *Store) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	for {
		out, again, err := s.listOnce(ctx, prefix)
		if err != nil || !again {
			return out, err
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("sqlite store: list %q: %w", prefix, err)
		}
	}
}

// listOnce is one reading of List; again is true when a lease's expiry fell
// between the clock readings around the query.
func (s *Store) listOnce(ctx context.Context, prefix string) (out []driver.Record, again bool, err error) {
	epoch, now, err := s.clock()
	if err != nil {
		return nil, false, err
	}
	before := now.Milliseconds()
	// Resource names are valid UTF-8, which never holds the byte 0xff, so
	// prefix+"\xff" bounds the range of names that start with prefix. The
	// query keeps every row that may have been live at the instant it saw
	// (liveSQL at before, without its bound on the grant's time, which
	// liveBetween checks at after).
	rows, err := s.db.QueryContext(ctx, `SELECT resource, owner, token, ttl_ms, epoch, expires_ms FROM tenure_leases
		WHERE resource >= ?3 AND resource < ?4 AND `+mayBeLiveSQL+` ORDER BY resource`, epoch, before, prefix, prefix+"\xff")
	if err != nil {
		if ferr := s.checkFile(); ferr != nil {
			err = ferr
		}
		return nil, false, fmt.Errorf("sqlite store: list %q: %w", prefix, err)
	}
	defer rows.Close()
	var read []row
	var names []string
	for rows.Next() {
		var resource string
		var r row
		if err := rows.Scan(&resource, &r.owner, &r.token, &r.ttl, &r.epoch, &r.expires); err != nil {
			return nil, false, fmt.Errorf("sqlite store: list %q: %w", prefix, err)
		}
		if strings.HasPrefix(resource, prefix) {
			read, names = append(read, r), append(names, resource)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("sqlite store: list %q: %w", prefix, err)
	}
	if ferr := s.checkFile(); ferr != nil {
		return nil, false, fmt.Errorf("sqlite store: list %q: %w", prefix, ferr)
	}
	after, err := s.clockAfter(epoch)
	if err != nil {
		return nil, false, err
	}
	for i, r := range read {
		switch r.liveBetween(epoch, before, after) {
		case alive:
			out = append(out, r.record(names[i], after))
		case unsure:
			return nil, true, nil
		}
	}
	return out, false, nil
}
