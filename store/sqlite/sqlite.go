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
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	sqlitedriver "modernc.org/sqlite" // also registers the "sqlite" driver

	"github.com/tenure-go/tenure/driver"
)

// DefaultBusyTimeout is how long a write waits for another process's
// transaction to finish before it fails with "database is locked".
const DefaultBusyTimeout = 5 * time.Second

// MaxTTL is the longest TTL the store accepts (about 146 years: expiries are
// int64 milliseconds).
const MaxTTL = driver.MaxMillisecondTTL

// ttls is the range of TTLs the store keeps: 1 ms to MaxTTL.
var ttls = driver.MillisecondTTLs

// Clock returns the current time on a clock shared by every process of the
// host, with an epoch that changes when that clock restarts (the boot id).
type Clock func() (epoch string, now time.Duration, err error)

// Config configures a Store. Only Path is required.
type Config struct {
	// Path is the database file, as written: every character is part of the
	// name ('%' too); '?' and '#' are not supported. Its directory must
	// exist.
	Path string

	// BusyTimeout is how long a write waits for the database lock that
	// another process's transaction holds (default DefaultBusyTimeout).
	// Negative is an error.
	BusyTimeout time.Duration

	// MustExist opens an existing store only, to inspect it or free leases
	// in it: Open creates no file, no directory and no table, and changes
	// nothing in the file. A missing file is an error wrapping
	// driver.ErrNoStore; a directory, an empty file, a file that is not a
	// SQLite database or one without tenure's table is an error wrapping
	// driver.ErrNotStore. A file the user may read but not write is opened
	// read-only: Get and List work, and writes return an error that says so.
	MustExist bool

	// Clock replaces the host clock (tests). Default: CLOCK_BOOTTIME, with
	// the kernel's boot id as epoch.
	Clock Clock

	// WallClock replaces the wall clock, which the store uses only to record
	// when a lease was granted, for display; never to decide expiry (tests).
	WallClock func() time.Time
}

// CheckTTL returns an error wrapping driver.ErrInvalidTTL for a TTL that a
// store opened with c cannot keep (below 1 ms or above MaxTTL), without
// I/O.
func (c Config) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// check validates c and fills in its defaults, without I/O.
func (c Config) check() (Config, error) {
	switch {
	case c.Path == "":
		return c, errors.New("sqlite store: empty path")
	case strings.ContainsAny(c.Path, "?#"):
		return c, fmt.Errorf("sqlite store: path %q: '?' and '#' are not supported in file names", c.Path)
	case c.BusyTimeout < 0:
		return c, fmt.Errorf("sqlite store: negative busy timeout %v", c.BusyTimeout)
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	if c.Clock == nil {
		c.Clock = hostClock
	}
	if c.WallClock == nil {
		c.WallClock = time.Now
	}
	return c, nil
}

// Store is a driver.Store on a SQLite file. It is safe for concurrent use by
// many goroutines and many processes.
type Store struct {
	db       *sql.DB
	path     string
	clock    Clock
	wall     func() time.Time
	readOnly bool
}

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

// columns are the columns of tenure_leases, in order.
var columns = []string{"resource", "owner", "token", "ttl_ms", "epoch", "expires_ms", "granted_at"}

// Open opens the database file cfg.Path. Unless cfg.MustExist is set, it
// creates the file and its table when they do not exist (the directory must
// exist). A path that cannot be opened or written returns an error within
// the busy timeout; what is there but is not a tenure store (a directory, a
// file that is not a SQLite database, another application's table of the
// same name) returns an error wrapping driver.ErrNotStore. See
// Config.MustExist for opening without creating anything.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if cfg.MustExist {
		return openExisting(ctx, cfg)
	}
	path := cfg.Path
	if dir := filepath.Dir(path); dir != "" {
		if st, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("sqlite store: %w", err)
		} else if !st.IsDir() {
			return nil, fmt.Errorf("sqlite store: %s is not a directory", dir)
		}
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return nil, notStore(path, "is a directory")
	}
	s, err := newStore(cfg, "_journal_mode=WAL", false)
	if err != nil {
		return nil, err
	}
	// Processes that open a new file at the same moment can see SQLITE_BUSY
	// while one of them switches it to WAL or creates the table; SQLite does
	// not call the busy handler there, so retry until the busy timeout.
	limit := time.Now().Add(cfg.BusyTimeout)
	for attempt := 0; ; attempt++ {
		_, err = s.db.ExecContext(ctx, schema)
		if err == nil {
			break
		}
		if !isBusy(err) || time.Now().After(limit) || ctx.Err() != nil {
			s.db.Close()
			if code(err) == sqliteNotADB {
				return nil, notStore(path, "is not a SQLite database")
			}
			return nil, fmt.Errorf("sqlite store: create schema in %s: %w", path, err)
		}
		time.Sleep(time.Duration(1+attempt%20) * time.Millisecond)
	}
	if err := s.checkSchema(ctx); err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// OpenURL opens the store that a sqlite: URL names (see ParseURL and Open).
func OpenURL(ctx context.Context, raw string) (*Store, error) {
	return driver.OpenURL(ctx, raw, ParseURL, Open)
}

// Init creates the database file and its table if they do not exist, as
// Open does, and closes it: for programs that prepare a store before its
// users run.
func Init(ctx context.Context, cfg Config) error {
	cfg.MustExist = false
	s, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	return s.Close()
}

// openExisting opens cfg.Path without creating or changing anything, read
// only when the user may not write the file.
func openExisting(ctx context.Context, cfg Config) (*Store, error) {
	path := cfg.Path
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("sqlite store: %s does not exist: %w", path, driver.ErrNoStore)
	case err != nil:
		return nil, fmt.Errorf("sqlite store: %w", err)
	case st.IsDir():
		return nil, notStore(path, "is a directory")
	case !st.Mode().IsRegular():
		return nil, notStore(path, "is not a regular file")
	case st.Size() == 0:
		return nil, notStore(path, "is an empty file")
	}
	readOnly := false
	if f, err := os.OpenFile(path, os.O_RDWR, 0); err != nil {
		if !errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("sqlite store: %w", err)
		}
		readOnly = true
	} else {
		f.Close()
	}
	// mode=rw never creates the file; mode=ro never writes it. No journal
	// mode is set: an existing tenure file is in WAL mode already, and
	// another file must not be changed.
	mode := "mode=rw"
	if readOnly {
		mode = "mode=ro"
	}
	s, err := newStore(cfg, mode, readOnly)
	if err != nil {
		return nil, err
	}
	err = s.checkSchema(ctx)
	if c := code(err); readOnly && (c == sqliteCantOpen || c == sqliteReadOnly) {
		// A read-only WAL database that no process has open (so without its
		// -shm file) in a directory the user may not write: SQLite can read
		// it only as immutable, which is right while nobody writes it.
		s.db.Close()
		if s, err = newStore(cfg, "mode=ro&immutable=1", true); err != nil {
			return nil, err
		}
		err = s.checkSchema(ctx)
	}
	if err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// newStore opens a database handle on cfg.Path with the DSN parameters
// params, without I/O (database/sql connects on first use).
func newStore(cfg Config, params string, readOnly bool) (*Store, error) {
	// SQLite reads the file name of a file: URI percent-decoded, so a '%' in
	// the name is written %25.
	dsn := fmt.Sprintf("file:%s?%s&_busy_timeout=%d&_synchronous=FULL&_txlock=immediate",
		strings.ReplaceAll(cfg.Path, "%", "%25"), params, cfg.BusyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: open %s: %w", cfg.Path, err)
	}
	return &Store{db: db, path: cfg.Path, clock: cfg.Clock, wall: cfg.WallClock, readOnly: readOnly}, nil
}

// checkSchema checks that the file holds tenure's table with its columns.
func (s *Store) checkSchema(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT name FROM pragma_table_info('tenure_leases') ORDER BY cid`)
	if err != nil {
		if code(err) == sqliteNotADB {
			return notStore(s.path, "is not a SQLite database")
		}
		return fmt.Errorf("sqlite store: read the schema of %s: %w", s.path, err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return fmt.Errorf("sqlite store: read the schema of %s: %w", s.path, err)
		}
		got = append(got, name)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite store: read the schema of %s: %w", s.path, err)
	}
	switch {
	case len(got) == 0:
		return notStore(s.path, "is a SQLite database without tenure's table tenure_leases")
	case !slices.Equal(got, columns):
		return notStore(s.path, fmt.Sprintf("has a table tenure_leases that is not tenure's (columns %s)", strings.Join(got, ", ")))
	}
	return nil
}

// notStore says that path is not a tenure store.
func notStore(path, what string) error {
	return fmt.Errorf("sqlite store: %s %s: %w", path, what, driver.ErrNotStore)
}

// SQLite result codes.
const (
	sqliteReadOnly = 8
	sqliteCantOpen = 14
	sqliteNotADB   = 26
)

// code returns the primary SQLite result code of err, or 0.
func code(err error) int {
	var e *sqlitedriver.Error
	if errors.As(err, &e) {
		return e.Code() & 0xff
	}
	return 0
}

// isBusy reports whether err is SQLITE_BUSY or SQLITE_LOCKED (with any
// extended code).
func isBusy(err error) bool {
	c := code(err)
	return c == 5 || c == 6
}

// CheckTTL implements driver.TTLChecker: TTLs from 1 ms to MaxTTL.
func (s *Store) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close closes the database. It does not release leases.
func (s *Store) Close() error { return s.db.Close() }

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
		return s.writeErr("begin", err)
	}
	epoch, now, err := s.clock()
	if err != nil {
		tx.Rollback()
		return err
	}
	if err := f(tx, epoch, now.Milliseconds()); err != nil {
		tx.Rollback()
		if code(err) == sqliteReadOnly {
			return s.writeErr("write", err)
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		return driver.UnknownOutcome(fmt.Errorf("sqlite store: commit: %w", err))
	}
	return nil
}

// writeErr describes an error of a write; a read-only database says so.
func (s *Store) writeErr(op string, err error) error {
	if s.readOnly || code(err) == sqliteReadOnly {
		return fmt.Errorf("sqlite store: %s is read-only for this user; leases can be read but not changed: %w", s.path, err)
	}
	return fmt.Errorf("sqlite store: %s: %w", op, err)
}

// Acquire implements driver.Store.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	ms := driver.Milliseconds(ttl)
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
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	ms := driver.Milliseconds(ttl)
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
