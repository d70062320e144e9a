// Package sqlite is tenure's embedded store: leases in one SQLite database
// file that every process on one host shares, through modernc.org/sqlite
// (pure Go, no cgo).
//
// The file is opened in WAL mode with a busy timeout. Each Store writes
// through one connection, in group commits: the operations that callers
// started while the previous transaction ran go into the next BEGIN
// IMMEDIATE transaction together, each one atomic, with one COMMIT (one
// fsync) for all of them; Stores of one process on one file take turns
// through a process-wide gate, and only other processes wait in SQLite's
// busy handler. Expiry is decided inside the writing transaction, in
// milliseconds, on the host's CLOCK_BOOTTIME: a clock that every process on
// the host shares and that never steps, so a wall-clock jump (NTP, an
// operator) cannot make a live lease look expired. Each expiry is stored
// with the kernel's boot id; after a reboot every lease is expired.
//
// Fencing tokens come from one counter per file: a grant's token is
// max(counter + 1, the wall clock in microseconds since the Unix epoch,
// the token of the row it replaces + 1). A resource's row exists only while
// its lease may be live (release deletes it, expired rows are swept), so
// no state is left per name. The wall-clock floor is what keeps tokens from
// going back when the file itself is lost (deleted, replaced, restored
// from a backup): a token granted in a new file is above every token
// granted before, unless the wall clock went back by more than the age of
// what was lost. A transaction that may grant commits with
// synchronous=FULL, so a granted token survives a power loss; one of
// renewals and releases only commits without an fsync (synchronous=NORMAL):
// only a crash of the operating system can lose it, and that reboots the
// host, which expires every lease anyway.
//
// Every write checks, with one stat after its transaction, that the path
// still names the file the Store opened; a file deleted or replaced under
// running holders loses their leases (ErrFileReplaced, driver.ErrLeaseLost)
// instead of letting them trust a file nobody else uses. See
// docs/stores.md (SQLite) for what the store detects, what it cannot, and
// what an operator must not do.
//
// The file must be on a local file system: SQLite's locking is unreliable on
// network file systems, and the clock is per host; Open refuses the network
// file systems it recognizes.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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

// fsOf names a network file system that holds a directory (tests replace
// it).
var fsOf = networkFS

// ttls is the range of TTLs the store keeps: 1 ms to MaxTTL.
var ttls = driver.MillisecondTTLs

// hostClockFunc returns the current time on a clock shared by every process
// of the host, with an epoch that changes when that clock restarts (the
// boot id).
type hostClockFunc func() (epoch string, now time.Duration, err error)

// Config configures a Store. Only Path is required.
type Config struct {
	// Path is the database file, as written: every character is part of the
	// name ('%' too); '?' and '#' are not supported. Its directory must
	// exist.
	Path string

	// BusyTimeout is how long a write waits for the database lock that
	// another process's transaction holds, or that another Store of this
	// process holds (default DefaultBusyTimeout). Negative is an error.
	BusyTimeout time.Duration

	// MustExist opens an existing store only, to inspect it or free leases
	// in it: Open creates no file, no directory and no table, and changes
	// nothing in the file. A missing file is an error wrapping
	// driver.ErrNoStore; a directory, an empty file, a file that is not a
	// SQLite database or one without tenure's table is an error wrapping
	// driver.ErrNotStore. A file the user may read but not write is opened
	// read-only: Get and List work, and writes return an error that says so.
	// So is a file in the format of an earlier tenure version, which only
	// Open without MustExist upgrades.
	MustExist bool

	// hostClock replaces the host clock (tests). Default: CLOCK_BOOTTIME,
	// with the kernel's boot id as epoch.
	hostClock hostClockFunc

	// wallClock replaces the wall clock (tests). The store uses it for the
	// floor of new fencing tokens (microseconds since the Unix epoch) and to
	// record when a lease was granted, for display; never to decide expiry.
	wallClock func() time.Time
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
	if c.hostClock == nil {
		c.hostClock = hostClock
	}
	if c.wallClock == nil {
		c.wallClock = time.Now
	}
	return c, nil
}

// Store is a driver.Store and driver.BatchRenewer on a SQLite file. It is
// safe for concurrent use by many goroutines and many processes.
type Store struct {
	db          *sql.DB // reads (Get, List), and the writer's connection
	path        string
	clock       hostClockFunc
	wall        func() time.Time
	busyTimeout time.Duration
	mustExist   bool
	// readOnly: the user may not write the file; legacy: the file is in
	// an older format that only Open without MustExist upgrades. Writes
	// then fail with writeBlocked before any I/O.
	readOnly, legacy bool

	// The file the store opened, and the error once the path no longer
	// names it (see checkFile).
	file os.FileInfo
	gone atomic.Pointer[error]

	// The writer: one connection, its statements, the queue of operations
	// waiting for the next transaction (see writer.go); nil for read-only
	// and legacy stores.
	wdb  *sql.DB
	conn *sql.Conn
	w    *statements
	gate *gate
	// syncFull: the writer's connection is at synchronous=FULL (see
	// setSync); only the writer goroutine uses it.
	syncFull bool

	mu            sync.Mutex
	queue         []*op
	running       bool // a writeLoop goroutine runs
	closed        bool
	sweeping      bool
	swept         time.Time
	checkpointing bool
	checkpointed  time.Time
	wg            sync.WaitGroup // writeLoop, sweep and checkpoint goroutines
	closing       context.Context
	stop          context.CancelFunc
}

// Open opens the database file cfg.Path. Unless cfg.MustExist is set, it
// creates the file and its tables when they do not exist (the directory
// must exist), and upgrades a file of an earlier tenure version in place
// (the token counter starts above every token stored in it; see the
// package documentation). A path that cannot be opened or written returns
// an error within the busy timeout; what is there but is not a tenure store
// (a directory, a file that is not a SQLite database, another application's
// table of the same name) returns an error wrapping driver.ErrNotStore. A
// missing file whose write-ahead log is still there (a database deleted
// while in use) is refused: SQLite would mix that log into the new file. So
// is a file on a network file system (Linux: NFS, SMB/CIFS, 9P, Ceph, AFS,
// Coda, Lustre, GFS2, OCFS2), in both modes.
// See Config.MustExist for opening without creating anything.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if fs := pathFS(cfg.Path); fs != "" {
		return nil, fmt.Errorf("sqlite store: %s is on a network file system (%s): SQLite's locks do not hold there, and the clock "+
			"that expires leases is per host, so two hosts would both be granted; put the file on a local file system, "+
			"or use PostgreSQL, etcd or Redis for leases across hosts", cfg.Path, fs)
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
	if log := leftoverLog(path); log != "" {
		return nil, fmt.Errorf("sqlite store: %s does not exist but %s does: the database was deleted, perhaps while processes still use it, "+
			"and SQLite would mix that file into a new database; stop every process that uses %s, then remove %s-wal and %s-shm",
			path, log, path, path, path)
	}
	// Reads never create the file: after it was deleted, a new connection
	// would otherwise make an empty one at the path, next to the old -wal.
	s, err := newStore(cfg, "mode=rw", false)
	if err != nil {
		return nil, err
	}
	// Processes that open a new file at the same moment can see SQLITE_BUSY
	// while one of them switches it to WAL or creates the tables; SQLite
	// does not call the busy handler there, so retry until the busy timeout.
	limit := time.Now().Add(cfg.BusyTimeout)
	for attempt := 0; ; attempt++ {
		err = s.openWriter(ctx, cfg, "_journal_mode=WAL", true)
		if err == nil {
			break
		}
		if !isBusy(err) || time.Now().After(limit) || ctx.Err() != nil {
			s.db.Close()
			if code(err) == sqliteNotADB {
				return nil, notStore(path, "is not a SQLite database")
			}
			if errors.Is(err, driver.ErrNotStore) || strings.HasPrefix(err.Error(), "sqlite store: ") {
				return nil, err
			}
			return nil, fmt.Errorf("sqlite store: create the tables in %s: %w", path, err)
		}
		time.Sleep(time.Duration(1+attempt%20) * time.Millisecond)
	}
	return s, nil
}

// pathFS names the network file system that the database at path would be
// on, or "": the directory as written, and, through symbolic links, the
// directory where the file is, or where a dangling link would make SQLite
// create it (SQLite follows links to the database, and puts its -wal and
// -shm next to the file it finds).
func pathFS(path string) string {
	dirs := []string{filepath.Dir(path)}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	} else if target, err := os.Readlink(path); err == nil {
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		dirs = append(dirs, filepath.Dir(target))
		if real, err := filepath.EvalSymlinks(filepath.Dir(target)); err == nil {
			dirs = append(dirs, real)
		}
	}
	for _, d := range dirs {
		if fs := fsOf(d); fs != "" {
			return fs
		}
	}
	return ""
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
	s.file = st
	version, err := readSchema(ctx, s.db, path)
	if c := code(err); readOnly && (c == sqliteCantOpen || c == sqliteReadOnly) {
		// A read-only WAL database that no process has open (so without its
		// -shm file) in a directory the user may not write: SQLite can read
		// it only as immutable, which is right while nobody writes it.
		s.db.Close()
		if s, err = newStore(cfg, "mode=ro&immutable=1", true); err != nil {
			return nil, err
		}
		s.file = st
		version, err = readSchema(ctx, s.db, path)
	}
	if err != nil {
		s.db.Close()
		return nil, err
	}
	s.legacy = version < schemaVersion
	if !s.readOnly && !s.legacy {
		if err := s.openWriter(ctx, cfg, "mode=rw", false); err != nil {
			s.db.Close()
			return nil, err
		}
	}
	return s, nil
}

// newStore opens a database handle on cfg.Path with the DSN parameters
// params, without I/O (database/sql connects on first use).
func newStore(cfg Config, params string, readOnly bool) (*Store, error) {
	db, err := openDB(cfg, params)
	if err != nil {
		return nil, err
	}
	closing, stop := context.WithCancel(context.Background())
	return &Store{
		db: db, path: cfg.Path, clock: cfg.hostClock, wall: cfg.wallClock, busyTimeout: cfg.BusyTimeout,
		mustExist: cfg.MustExist, readOnly: readOnly, closing: closing, stop: stop, swept: time.Now(),
	}, nil
}

// openDB returns a database handle on cfg.Path with the DSN parameters
// params, without I/O (database/sql connects on first use).
func openDB(cfg Config, params string) (*sql.DB, error) {
	// SQLite reads the file name of a file: URI percent-decoded, so a '%' in
	// the name is written %25.
	dsn := fmt.Sprintf("file:%s?%s&_busy_timeout=%d&_synchronous=FULL",
		strings.ReplaceAll(cfg.Path, "%", "%25"), params, cfg.BusyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: open %s: %w", cfg.Path, err)
	}
	return db, nil
}

// openWriter opens the writer's connection (on a handle of its own, with
// the DSN parameters params), creates or upgrades the schema when create is
// set, prepares the statements, and records which file the connection
// opened: the file at the path both before and after the connection opened
// it (for a file this call creates, after).
func (s *Store) openWriter(ctx context.Context, cfg Config, params string, create bool) (err error) {
	wdb, err := openDB(cfg, params)
	if err != nil {
		return err
	}
	before, berr := os.Stat(s.path)
	conn, err := wdb.Conn(ctx)
	if err != nil {
		wdb.Close()
		return err
	}
	defer func() {
		if err != nil {
			conn.Close()
			wdb.Close()
		}
	}()
	if err := conn.PingContext(ctx); err != nil {
		return err
	}
	after, err := os.Stat(s.path)
	if err != nil {
		return fmt.Errorf("sqlite store: %w", err)
	}
	if berr == nil && !os.SameFile(before, after) {
		return fmt.Errorf("sqlite store: %s was replaced by another file while it was being opened", s.path)
	}
	if create {
		epoch, now, err := s.clock()
		if err != nil {
			return err
		}
		if err := setup(ctx, conn, s.path, epoch, now.Milliseconds()); err != nil {
			return err
		}
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA wal_autocheckpoint = %d`, autoCheckpointPages)); err != nil {
		return err
	}
	waiting, err := tableColumns(ctx, conn, s.path, "tenure_waiting")
	if err != nil {
		return err
	}
	w, err := prepare(ctx, conn, len(waiting) > 0)
	if err != nil {
		return fmt.Errorf("sqlite store: prepare the statements on %s: %w", s.path, err)
	}
	s.wdb, s.conn, s.w, s.file = wdb, conn, w, after
	s.syncFull = true // the DSN's _synchronous=FULL
	s.gate = openGate(after, s.path)
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

// Close waits for the transaction under way, fails the operations still
// queued, and closes the database. It does not release leases. It is
// idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	queued := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, o := range queued {
		if o.state.CompareAndSwap(opQueued, opWithdrawn) {
			o.setAll(errClosed, false)
			close(o.done)
		}
	}
	s.stop()
	s.wg.Wait()
	if s.w != nil {
		s.w.close()
		s.conn.Close()
		s.wdb.Close()
		s.gate.close()
	}
	return s.db.Close()
}

// writeErr describes an error of a write; a read-only database says so.
func (s *Store) writeErr(op string, err error) error {
	if s.readOnly || code(err) == sqliteReadOnly {
		return fmt.Errorf("sqlite store: %s is read-only for this user; leases can be read but not changed: %w", s.path, err)
	}
	return fmt.Errorf("sqlite store: %s: %w", op, err)
}

// writeBlocked returns why this store cannot write, without I/O, or nil.
func (s *Store) writeBlocked() error {
	switch {
	case s.readOnly:
		return fmt.Errorf("sqlite store: %s is read-only for this user; leases can be read but not changed", s.path)
	case s.legacy:
		return fmt.Errorf("sqlite store: %s is in the format of an earlier tenure version, which this store opened for inspection only "+
			"(MustExist); open it once without MustExist (the tenure command: tenure init) to upgrade it, then change leases in it", s.path)
	}
	return nil
}
