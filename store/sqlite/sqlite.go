// Package sqlite is tenure's embedded store: leases in one SQLite database
// file that every process on one host shares, through modernc.org/sqlite
// (pure Go, no cgo).
//
// The file is opened in WAL mode with a busy timeout, and every write is a
// transaction begun with BEGIN IMMEDIATE, so writers queue on SQLite's lock
// instead of failing. Expiry is decided inside the writing transaction, in
// milliseconds, on the host's CLOCK_BOOTTIME: a clock that every process on
// the host shares and that never steps, so a wall-clock jump (NTP, an
// operator) cannot make a live lease look expired. Each expiry is stored with
// the kernel's boot id; after a reboot every lease is expired. Fencing tokens
// live in the same row as the lease and are kept after release and expiry,
// so they never go back, also across restarts. Commits are synchronous=FULL,
// so a granted token survives a power loss.
//
// The file must be on a local file system: SQLite's locking is unreliable on
// network file systems, and the clock is per host.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tenure-go/tenure/driver"
	sqlitedriver "modernc.org/sqlite" // also registers the "sqlite" driver
)

// DefaultBusyTimeout is how long a write waits for another process's
// transaction to finish before it fails with "database is locked".
const DefaultBusyTimeout = 5 * time.Second

// MaxTTL is the longest TTL the store accepts (about 292 years: expiries are
// int64 milliseconds).
const MaxTTL = time.Duration(1<<62) / time.Millisecond * time.Millisecond

// Clock returns the current time on a clock shared by every process of the
// host, with an epoch that changes when that clock restarts (the boot id).
type Clock func() (epoch string, now time.Duration, err error)

// Store is a driver.Store on a SQLite file. It is safe for concurrent use by
// many goroutines and many processes.
type Store struct {
	db    *sql.DB
	path  string
	clock Clock
	wall  func() time.Time
}

// Option configures a Store.
type Option func(*options)

type options struct {
	busyTimeout time.Duration
	clock       Clock
	wall        func() time.Time
}

// WithBusyTimeout sets how long a write waits for the database lock (default
// 5 s).
func WithBusyTimeout(d time.Duration) Option { return func(o *options) { o.busyTimeout = d } }

// WithClock replaces the host clock (tests).
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithWallClock replaces the wall clock, which the store uses only to record
// when a lease was granted, for display; never to decide expiry (tests).
func WithWallClock(f func() time.Time) Option { return func(o *options) { o.wall = f } }

const schema = `
CREATE TABLE IF NOT EXISTS tenure_leases (
	resource   TEXT PRIMARY KEY NOT NULL,
	owner      TEXT,              -- NULL when free
	token      INTEGER NOT NULL,  -- last fencing token granted; kept after release and expiry
	ttl_ms     INTEGER,
	epoch      TEXT,              -- boot id of the clock that expires_ms counts on
	expires_ms INTEGER,           -- CLOCK_BOOTTIME milliseconds at which the lease expires
	granted_at TEXT               -- wall-clock time of the grant, for display only
) WITHOUT ROWID;`

// Open opens (creating if needed) the database file at path and its schema.
// The directory must exist. A path that cannot be opened or written returns
// an error within the busy timeout.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	o := options{busyTimeout: DefaultBusyTimeout, clock: hostClock, wall: time.Now}
	for _, f := range opts {
		f(&o)
	}
	if path == "" {
		return nil, errors.New("sqlite store: empty path")
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlite store: path %q: '?' and '#' are not supported in file names", path)
	}
	if o.busyTimeout < 0 {
		return nil, fmt.Errorf("sqlite store: negative busy timeout %v", o.busyTimeout)
	}
	if dir := filepath.Dir(path); dir != "" {
		if st, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("sqlite store: %w", err)
		} else if !st.IsDir() {
			return nil, fmt.Errorf("sqlite store: %s is not a directory", dir)
		}
	}
	dsn := fmt.Sprintf("file:%s?_busy_timeout=%d&_journal_mode=WAL&_synchronous=FULL&_txlock=immediate",
		path, o.busyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: open %s: %w", path, err)
	}
	s := &Store{db: db, path: path, clock: o.clock, wall: o.wall}
	// Processes that open a new file at the same moment can see SQLITE_BUSY
	// while one of them switches it to WAL or creates the table; SQLite does
	// not call the busy handler there, so retry until the busy timeout.
	limit := time.Now().Add(o.busyTimeout)
	for attempt := 0; ; attempt++ {
		_, err = db.ExecContext(ctx, schema)
		if err == nil {
			return s, nil
		}
		if !isBusy(err) || time.Now().After(limit) || ctx.Err() != nil {
			db.Close()
			return nil, fmt.Errorf("sqlite store: create schema in %s: %w", path, err)
		}
		time.Sleep(time.Duration(1+attempt%20) * time.Millisecond)
	}
}

// isBusy reports whether err is SQLITE_BUSY or SQLITE_LOCKED (with any
// extended code).
func isBusy(err error) bool {
	var e *sqlitedriver.Error
	if errors.As(err, &e) {
		code := e.Code() & 0xff
		return code == 5 || code == 6
	}
	return false
}

// CheckTTL implements driver.TTLChecker: TTLs from 1 ms to MaxTTL.
func (s *Store) CheckTTL(ttl time.Duration) error { return validateTTL(ttl) }

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close closes the database. It does not release leases.
func (s *Store) Close() error { return s.db.Close() }

func validateTTL(ttl time.Duration) error {
	if err := driver.ValidateTTL(ttl); err != nil {
		return err
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: %v is below the store's resolution of 1ms", driver.ErrInvalidTTL, ttl)
	}
	if ttl > MaxTTL {
		return fmt.Errorf("%w: %v is above the store's maximum %v", driver.ErrInvalidTTL, ttl, MaxTTL)
	}
	return nil
}

// ttlMillis rounds ttl up to whole milliseconds, so the store never keeps a
// lease shorter than asked.
func ttlMillis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

type row struct {
	owner   sql.NullString
	token   int64
	ttl     sql.NullInt64
	epoch   sql.NullString
	expires sql.NullInt64
}

func (r row) live(epoch string, nowMs int64) bool {
	return r.owner.Valid && r.epoch.Valid && r.epoch.String == epoch && r.expires.Valid && r.expires.Int64 > nowMs
}

func (r row) record(resource string, nowMs int64) driver.Record {
	rec := driver.Record{Resource: resource, Owner: r.owner.String, Token: uint64(r.token)}
	if r.ttl.Valid {
		rec.TTL = time.Duration(r.ttl.Int64) * time.Millisecond
	}
	if r.expires.Valid {
		rec.Remaining = time.Duration(r.expires.Int64-nowMs) * time.Millisecond
	}
	return rec
}

const selectRow = `SELECT owner, token, ttl_ms, epoch, expires_ms FROM tenure_leases WHERE resource = ?`

func scanRow(sc interface{ Scan(...any) error }) (row, error) {
	var r row
	err := sc.Scan(&r.owner, &r.token, &r.ttl, &r.epoch, &r.expires)
	return r, err
}

// write runs f in a BEGIN IMMEDIATE transaction, with the clock read after
// the lock is held, so that expiry is decided inside the transaction that
// writes. Errors before COMMIT leave nothing applied; a failed COMMIT is
// reported as an unknown outcome.
func (s *Store) write(ctx context.Context, f func(tx *sql.Tx, epoch string, nowMs int64) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite store: begin: %w", err)
	}
	epoch, now, err := s.clock()
	if err != nil {
		tx.Rollback()
		return err
	}
	if err := f(tx, epoch, now.Milliseconds()); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return driver.UnknownOutcome(fmt.Errorf("sqlite store: commit: %w", err))
	}
	return nil
}

// Acquire implements driver.Store.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := driver.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	if err := validateTTL(ttl); err != nil {
		return driver.Record{}, err
	}
	ms := ttlMillis(ttl)
	var rec driver.Record
	err := s.write(ctx, func(tx *sql.Tx, epoch string, now int64) error {
		r, err := scanRow(tx.QueryRowContext(ctx, selectRow, resource))
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite store: read %q: %w", resource, err)
		}
		exists := err == nil
		if exists && r.live(epoch, now) {
			if r.owner.String != owner {
				return &driver.HeldError{Holder: r.record(resource, now)}
			}
			// The same owner: the same lease, renewed.
			if _, err := tx.ExecContext(ctx, `UPDATE tenure_leases SET ttl_ms = ?, expires_ms = ? WHERE resource = ?`,
				ms, now+ms, resource); err != nil {
				return fmt.Errorf("sqlite store: renew %q: %w", resource, err)
			}
			rec = driver.Record{Resource: resource, Owner: owner, Token: uint64(r.token), TTL: ttl, Remaining: time.Duration(ms) * time.Millisecond}
			return nil
		}
		token := r.token + 1
		if _, err := tx.ExecContext(ctx, `INSERT INTO tenure_leases (resource, owner, token, ttl_ms, epoch, expires_ms, granted_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (resource) DO UPDATE SET owner = excluded.owner, token = excluded.token, ttl_ms = excluded.ttl_ms,
				epoch = excluded.epoch, expires_ms = excluded.expires_ms, granted_at = excluded.granted_at`,
			resource, owner, token, ms, epoch, now+ms, s.wall().UTC().Format(time.RFC3339Nano)); err != nil {
			return fmt.Errorf("sqlite store: grant %q: %w", resource, err)
		}
		rec = driver.Record{Resource: resource, Owner: owner, Token: uint64(token), TTL: ttl, Remaining: time.Duration(ms) * time.Millisecond}
		return nil
	})
	return rec, err
}

// Renew implements driver.Store.
func (s *Store) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if err := driver.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	if err := validateTTL(ttl); err != nil {
		return err
	}
	ms := ttlMillis(ttl)
	return s.write(ctx, func(tx *sql.Tx, epoch string, now int64) error {
		res, err := tx.ExecContext(ctx, `UPDATE tenure_leases SET ttl_ms = ?, expires_ms = ?
			WHERE resource = ? AND owner = ? AND token = ? AND epoch = ? AND expires_ms > ?`,
			ms, now+ms, resource, owner, int64(token), epoch, now)
		if err != nil {
			return fmt.Errorf("sqlite store: renew %q: %w", resource, err)
		}
		return changedOne(res, "renew", resource)
	})
}

// Release implements driver.Store.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	return s.write(ctx, func(tx *sql.Tx, epoch string, now int64) error {
		res, err := tx.ExecContext(ctx, `UPDATE tenure_leases SET owner = NULL, ttl_ms = NULL, epoch = NULL, expires_ms = NULL, granted_at = NULL
			WHERE resource = ? AND owner = ? AND token = ? AND epoch = ? AND expires_ms > ?`,
			resource, owner, int64(token), epoch, now)
		if err != nil {
			return fmt.Errorf("sqlite store: release %q: %w", resource, err)
		}
		return changedOne(res, "release", resource)
	})
}

func changedOne(res sql.Result, op, resource string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlite store: %s %q: %w", op, resource, err)
	}
	if n != 1 {
		return fmt.Errorf("sqlite store: %s %q: no live lease with this owner and token: %w", op, resource, driver.ErrLeaseLost)
	}
	return nil
}

// Get implements driver.Store.
func (s *Store) Get(ctx context.Context, resource string) (driver.Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return driver.Record{}, err
	}
	epoch, now, err := s.clock()
	if err != nil {
		return driver.Record{}, err
	}
	nowMs := now.Milliseconds()
	r, err := scanRow(s.db.QueryRowContext(ctx, selectRow, resource))
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !r.live(epoch, nowMs)) {
		return driver.Record{}, fmt.Errorf("sqlite store: %q: %w", resource, driver.ErrNotHeld)
	}
	if err != nil {
		return driver.Record{}, fmt.Errorf("sqlite store: get %q: %w", resource, err)
	}
	return r.record(resource, nowMs), nil
}

// List implements driver.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	epoch, now, err := s.clock()
	if err != nil {
		return nil, err
	}
	nowMs := now.Milliseconds()
	// Resource names are valid UTF-8, which never holds the byte 0xff, so
	// prefix+"\xff" bounds the range of names that start with prefix.
	rows, err := s.db.QueryContext(ctx, `SELECT resource, owner, token, ttl_ms, epoch, expires_ms FROM tenure_leases
		WHERE resource >= ? AND resource < ? AND owner IS NOT NULL AND epoch = ? AND expires_ms > ?
		ORDER BY resource`, prefix, prefix+"\xff", epoch, nowMs)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: list %q: %w", prefix, err)
	}
	defer rows.Close()
	var out []driver.Record
	for rows.Next() {
		var resource string
		var r row
		if err := rows.Scan(&resource, &r.owner, &r.token, &r.ttl, &r.epoch, &r.expires); err != nil {
			return nil, fmt.Errorf("sqlite store: list %q: %w", prefix, err)
		}
		if strings.HasPrefix(resource, prefix) {
			out = append(out, r.record(resource, nowMs))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite store: list %q: %w", prefix, err)
	}
	return out, nil
}
