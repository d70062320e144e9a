// Package mysql is a driver.Store on MySQL and MariaDB (InnoDB), through
// github.com/go-sql-driver/mysql.
//
// Leases live in one table (default tenure_leases), one row per resource in
// use, and the floor of fencing tokens in a second table of one row
// (default tenure_leases_tokens):
//
//	CREATE TABLE tenure_leases (
//		resource   VARBINARY(256) PRIMARY KEY, -- compared byte for byte
//		owner      VARBINARY(256),             -- the grant's owner string; NULL when released
//		token      BIGINT UNSIGNED NOT NULL,   -- its fencing token (the last one, when released)
//		ttl_us     BIGINT,                     -- TTL last written, microseconds
//		expires_at DATETIME(6),                -- UTC, on the database's clock
//		granted_at DATETIME(6)                 -- UTC: when it was granted, or released
//	) ENGINE=InnoDB
//	CREATE TABLE tenure_leases_tokens (id TINYINT UNSIGNED PRIMARY KEY, top BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB
//
// Expiry is decided by the database's clock inside the statement that
// grants or renews, in microseconds: UTC_TIMESTAMP(6), the time the
// statement started (as NOW(6); not SYSDATE(6), which would be read anew at
// each use). One reading per statement means that every condition and
// every expiry of a statement agree; a statement that waited for a row lock
// judges leases at its start, which can only make a lease look live longer,
// and counts a TTL from before its commit, which can only shorten a lease
// after the holder's own deadline (the holder counts from before it sent
// the statement). It is also the value that statement-based replication
// sends to replicas (SET TIMESTAMP in the binary log), so a replica computes
// the same expiries and tokens. The database server's clock must not step
// (run NTP in slewing mode), as with any store that expires on its clock;
// the client's clock is never used.
//
// A grant's token is max(the floor + 1, the database's clock in
// microseconds since the Unix epoch, the row's old token + 1): the row's
// token (rows are kept SweepGrace after release or expiry) makes a
// resource's tokens strictly increase while its row exists; the floor,
// which the sweep raises above the tokens of the rows it deletes before it
// deletes them, takes over when the row is gone; and the clock floor keeps
// tokens above every earlier one when the tables are lost (dropped,
// deleted by hand, restored from a backup), unless the database's clock
// went back by more than the age of what was lost. No grant writes the
// floor: grants of different resources never wait for each other (and, on
// Galera, never conflict).
//
// Every operation is one statement (Acquire adds a read when the resource
// is held, Renew and Release one when they did not apply), sent with its
// arguments interpolated (go-sql-driver's interpolateParams), so one round
// trip each: see docs/store-mysql.md for the costs. The statements are
// written for both MySQL's left-to-right evaluation of assignments and
// MariaDB's SIMULTANEOUS_ASSIGNMENT mode, for every sql_mode (ANSI_QUOTES,
// NO_BACKSLASH_ESCAPES, ONLY_FULL_GROUP_BY, strict modes), and for
// REPEATABLE READ and READ COMMITTED: every decision is made on the locked
// current row (INSERT ... ON DUPLICATE KEY UPDATE, UPDATE), never on a
// snapshot.
//
// No lease is tied to a database session: there are no GET_LOCK locks, and
// a connection that dies (KILL, wait_timeout, a proxy restart) changes
// nothing in the table. The holder's next renewal goes through another
// connection of the pool.
//
// Release notifications: MySQL has no LISTEN/NOTIFY. A Store with waiters
// polls, every Config.PollInterval, the rows of the resources its waiters
// wait for, in one statement, and wakes a waiter (driver.Hub: the one that
// has waited longest) when a resource is free. See Store.Subscribe. A poll
// finds a release only while the resource stays free, so a waiting
// acquire reserves the resource (driver.Reserver, in a third table) and
// the store grants it to that waiter first: see Store.AcquireWaiting.
//
// An error that leaves the outcome of a write unknown (the connection broke
// or the context ended after the statement was sent) is reported with
// driver.UnknownOutcome; a statement that was never sent or that the server
// refused (an error from the server: it rolled the statement back) is a
// plain error.
package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/storeclient"
)

// Defaults.
const (
	// DefaultTable is the leases table.
	DefaultTable = "tenure_leases"
	// DefaultConnectTimeout bounds each connection attempt when the
	// configuration sets no timeout.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultPollInterval is how often a Store with waiters looks for
	// releases.
	DefaultPollInterval = 50 * time.Millisecond
	// DefaultSweepInterval is how often a Store deletes the rows of
	// released and expired leases (see Store.Sweep).
	DefaultSweepInterval = time.Minute
	// SweepGrace is how long the row of a released or expired lease is
	// kept: the next grant of a name in use takes over its row, whose
	// token is the floor of the next one.
	SweepGrace = time.Minute
)

// MaxTTL is the longest TTL the store accepts (about 146 years).
const MaxTTL = driver.MaxMillisecondTTL

// ttls is the range of TTLs the store keeps exactly: 1 µs to MaxTTL.
var ttls = driver.TTLRange{Min: time.Microsecond, Max: MaxTTL}

// micros returns ttl in whole microseconds, rounded up, so that the store
// never keeps a lease shorter than asked.
func micros(ttl time.Duration) int64 {
	return int64((ttl + time.Microsecond - 1) / time.Microsecond)
}

// ErrNoSchema means that the leases table or its token table does not
// exist: run Init (`tenure init`), which creates them. It matches
// driver.ErrNoStore too.
var ErrNoSchema error = noSchemaError{}

type noSchemaError struct{}

func (noSchemaError) Error() string {
	return "the leases table or its token table does not exist; create them with `tenure init` (mysql.Init)"
}

func (noSchemaError) Is(target error) bool { return target == driver.ErrNoStore }

// Config configures a Store.
type Config struct {
	// DSN is a go-sql-driver data source name
	// (user:password@tcp(host:port)/database?param=value), with
	// go-sql-driver's parameters. Ignored when MySQL is set. Use
	// ParseURL for a mysql:// URL.
	DSN string

	// MySQL, when set, is used instead of parsing DSN (a copy: the Store
	// changes what it needs, see Open).
	MySQL *gomysql.Config

	// Table is the leases table, optionally qualified by its database
	// ("locks.tenure_leases"): letters, digits and underscores, at most 57
	// characters for the table (its token table adds "_tokens"). Default
	// DefaultTable.
	Table string

	// ConnectTimeout bounds each connection attempt when the
	// configuration sets no timeout. Default DefaultConnectTimeout.
	ConnectTimeout time.Duration

	// MaxConns is the size of the connection pool. Default: 4, or the
	// number of CPUs when greater.
	MaxConns int

	// PollInterval is how often a Store with waiting Acquires looks for
	// releases of the resources they wait for (one statement for all of
	// them). Default DefaultPollInterval; negative: never (waiters back off
	// on their own, see tenure.WithRetry).
	PollInterval time.Duration

	// SweepInterval is how often the Store deletes the rows of leases that
	// were released or expired more than SweepGrace ago (Store.Sweep), from
	// its first grant until Close; each Store waits a random 50% to 150%
	// of it between sweeps. Default DefaultSweepInterval; negative: never.
	SweepInterval time.Duration

	// WrapConnector, when set, wraps the connector of the Store's
	// connections: to count or trace the statements it sends.
	WrapConnector func(sqldriver.Connector) sqldriver.Connector
}

// CheckTTL returns an error wrapping driver.ErrInvalidTTL for a TTL that a
// store opened with c cannot keep (below 1 µs or above MaxTTL), without
// I/O.
func (c Config) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

var identRE = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]{0,63}\.)?[A-Za-z_][A-Za-z0-9_]{0,56}$`)

// check validates c and fills in its defaults, without I/O.
func (c Config) check() (Config, error) {
	if c.MySQL == nil {
		if c.DSN == "" {
			return c, errors.New("mysql store: no DSN")
		}
		mc, err := gomysql.ParseDSN(c.DSN)
		if err != nil {
			return c, fmt.Errorf("mysql store: bad DSN: %w", err)
		}
		mc.Logger = quietLogger
		c.MySQL = mc
	} else {
		c.MySQL = c.MySQL.Clone()
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.MaxConns == 0 {
		c.MaxConns = max(4, runtime.NumCPU())
	}
	switch {
	case !identRE.MatchString(c.Table):
		return c, fmt.Errorf("mysql store: table name %q: use letters, digits and underscores (at most 57), optionally database.table", c.Table)
	case c.ConnectTimeout < 0:
		return c, fmt.Errorf("mysql store: negative connect timeout %v", c.ConnectTimeout)
	case c.MaxConns < 0:
		return c, fmt.Errorf("mysql store: negative MaxConns %d", c.MaxConns)
	case c.MySQL.MultiStatements || c.MySQL.ClientFoundRows:
		return c, errors.New("mysql store: multiStatements and clientFoundRows must be off: the store reads its answers from each statement's count of changed rows")
	}
	for k := range c.MySQL.Params {
		name := strings.ToLower(strings.TrimPrefix(k, "@@"))
		name = strings.TrimPrefix(strings.TrimPrefix(name, "session."), "local.")
		if _, ok := sessionVars[name]; ok || name == "max_join_size" {
			return c, fmt.Errorf("mysql store: the configuration sets the session variable %s: the store sets %s on its connections itself", name, sessionVarNames())
		}
	}
	return c, nil
}

// sessionVars are the session variables the store sets on each of its
// connections when it opens them (go-sql-driver sends one SET), over the
// defaults that the server's configuration, SET GLOBAL or init_connect
// give new sessions. Each statement of the store must commit on its own
// (autocommit on; a grant left in an open transaction is seen by no other
// session and is rolled back when its session ends, while its holder goes
// on; the store sends no BEGIN or COMMIT of its own), and no limit may
// stop or cut short its
// statements (a batch renewal updates rows by a join: sql_safe_updates
// refuses it; sql_select_limit would hide the holders it reads, so that
// renewed leases looked lost; max_join_size refuses the joins unless
// sql_big_selects is on). A configuration that sets one of them, or
// max_join_size, is refused.
var sessionVars = map[string]string{
	"autocommit":       "1",
	"sql_safe_updates": "0",
	"sql_select_limit": "18446744073709551615",
	"sql_big_selects":  "1",
}

func sessionVarNames() string {
	names := make([]string, 0, len(sessionVars))
	for k := range sessionVars {
		names = append(names, k)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Store is a driver.Store, driver.Notifier, driver.Watcher,
// driver.BatchRenewer, driver.Keeper and driver.Reserver (see
// AcquireWaiting) on MySQL or MariaDB. It is safe for concurrent use.
type Store struct {
	db      *sql.DB
	gate    *gate
	table   string // quoted identifier
	floor   string // quoted identifier of the token table
	waits   string // quoted identifier of the reservations table
	regName string // as configured, for messages
	where   string // user@address/database, for messages
	connTO  time.Duration

	sql struct {
		acquire, holder, renew, keep, release, list, raiseFloor stmt
		acquireRes, reserved, reserve, clearReserved, unreserve stmt
		listAll, deadRows, deleteDead, poll                     string // deleteDead and poll: fmt verbs for the IN list
		sweepReserved                                           string
	}

	hub       driver.Hub // release notifications; Listen is poll
	pollEvery time.Duration
	watched   struct {
		mu sync.Mutex
		n  map[string]int // resources with subscribers, and how many
	}

	sweepEvery time.Duration
	sweepOnce  sync.Once
	sweepDone  chan struct{} // closed when the sweeper ended; nil if it never started

	// schemaOK is set once checkTables found both tables and found them
	// tenure's; until then every statement checks first. Cleared when a
	// table is found missing, so that a table re-created by hand is
	// checked again.
	schemaOK atomic.Bool
	// reservations is set with schemaOK when the reservations table
	// exists (driver.Reserver); a Store that found none keeps none.
	reservations atomic.Bool

	life      context.Context // ends at Close
	end       context.CancelFunc
	closeOnce sync.Once
	closed    atomic.Bool
}

// quietLogger drops go-sql-driver's own log lines (a broken connection
// is logged there as well as returned): the Store reports every error to
// its caller.
var quietLogger = log.New(io.Discard, "", 0)

// Open connects to the database and checks that it answers, within the
// connect timeout (and ctx). It does not create the schema: Init does, once
// (`tenure init`); operations on a database without it return errors
// wrapping ErrNoSchema. Bad configuration returns an error before any I/O.
//
// On its copy of the go-sql-driver configuration, the Store sets
// interpolateParams (one round trip per statement), turns clientFoundRows
// and multiStatements off, uses utf8mb4, and sets the connect timeout when
// none is set. go-sql-driver's own log lines (a connection found broken
// is logged as well as returned) are dropped for a configuration parsed
// from DSN or a URL; a Config.MySQL keeps its Logger. It sets autocommit,
// sql_safe_updates, sql_select_limit and sql_big_selects
// on every connection (see sessionVars), and refuses a configuration that
// sets them; the session's sql_mode, isolation level and time zone are
// left as the server sets them.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg, err := cfg.check()
	if err != nil {
		return nil, err
	}
	mc := cfg.MySQL
	mc.InterpolateParams = true
	mc.ClientFoundRows = false
	mc.MultiStatements = false
	if err := mc.Apply(gomysql.Charset("utf8mb4", "utf8mb4_general_ci")); err != nil {
		return nil, fmt.Errorf("mysql store: %w", err)
	}
	if mc.Timeout == 0 {
		mc.Timeout = cfg.ConnectTimeout
	}
	if mc.Params == nil {
		mc.Params = map[string]string{}
	}
	for k, v := range sessionVars {
		mc.Params[k] = v
	}
	conn, err := gomysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("mysql store: %w", err)
	}
	var c sqldriver.Connector = conn
	if cfg.WrapConnector != nil {
		c = cfg.WrapConnector(c)
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(cfg.MaxConns)
	db.SetMaxIdleConns(cfg.MaxConns)
	s := &Store{
		db:         db,
		gate:       newGate(cfg.MaxConns),
		where:      fmt.Sprintf("%s@%s/%s", mc.User, mc.Addr, mc.DBName),
		connTO:     mc.Timeout,
		pollEvery:  cfg.PollInterval,
		sweepEvery: cfg.SweepInterval,
	}
	s.setNames(cfg.Table)
	s.watched.n = map[string]int{}
	s.life, s.end = context.WithCancel(context.Background())
	s.hub.Listen = s.poll
	s.prepareSQL()
	pctx, cancel := context.WithTimeout(ctx, s.connTO+time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		if pctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %v: %w", s.connTO+time.Second, err)
		}
		return nil, fmt.Errorf("mysql store: connect %s: %w", s.where, err)
	}
	return s, nil
}

// The store's connection pool, for tenure's own tests and harness.
func init() { storeclient.Register(func(s *Store) *sql.DB { return s.db }) }

// Close stops the poller and the sweeper, and closes the pool. It does not
// release leases. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.end()
		s.sweepOnce.Do(func() {}) // no sweeper starts after Close
		if s.sweepDone != nil {
			<-s.sweepDone
		}
		s.hub.Close()
		s.db.Close()
	})
	return nil
}

// errClosed is what a closed Store answers: it matches
// driver.ErrStoreUnusable, so that a Locker waiting on it stops.
var errClosed = fmt.Errorf("mysql store: closed (%w)", driver.ErrStoreUnusable)

// CheckTTL implements driver.TTLChecker, so a Locker rejects a TTL this
// store cannot keep before any I/O.
func (s *Store) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// Server error numbers the store acts on (MySQL's and MariaDB's).
const (
	erNoSuchTable       = 1146 // ER_NO_SUCH_TABLE
	erBadField          = 1054 // ER_BAD_FIELD_ERROR
	erDeadlock          = 1213 // ER_LOCK_DEADLOCK; Galera: a certification failure or a brute-force abort
	erServerShutdown    = 1053 // ER_SERVER_SHUTDOWN
	erQueryInterrupted  = 1317 // ER_QUERY_INTERRUPTED
	erConnectionKilled  = 1927 // MariaDB's ER_CONNECTION_KILLED
	erClientInterTO     = 4031 // MySQL's ER_CLIENT_INTERACTION_TIMEOUT (wait_timeout)
	erGRRollback        = 3101 // MySQL Group Replication: ER_TRANSACTION_ROLLBACK_DURING_COMMIT (a certification failure)
	erErrorDuringCommit = 1180 // ER_ERROR_DURING_COMMIT; Galera: the node lost the cluster while it replicated the statement
)

// failed wraps an error of a statement that was not applied, or of a read.
func (s *Store) failed(op, resource string, err error) error {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erNoSuchTable:
			s.schemaOK.Store(false)
			return fmt.Errorf("mysql store: %s %q: %w: %w", op, resource, ErrNoSchema, err)
		case erBadField:
			return fmt.Errorf("mysql store: %s %q: the table %s is not tenure's leases table: %w: %w", op, resource, s.regName, driver.ErrNotStore, err)
		}
	}
	if errors.Is(err, sql.ErrConnDone) && s.closed.Load() {
		return fmt.Errorf("mysql store: %s %q: %w", op, resource, errClosed)
	}
	return fmt.Errorf("mysql store: %s %q: %w", op, resource, err)
}

// errNoConn marks errors from taking a connection from the pool: nothing
// was sent.
var errNoConn = errors.New("no connection")

// notSent marks an error found before a statement was sent (its context
// had ended).
type notSent struct{ err error }

func (e notSent) Error() string { return e.err.Error() }
func (e notSent) Unwrap() error { return e.err }

// writeErr classifies the error of a write statement: one the server
// reported (the statement failed and was rolled back) or one that happened
// before anything was sent is a plain error; anything else (the connection
// broke, or ctx ended, after the statement was sent) leaves the outcome
// unknown, and so does error 1180, with which a Galera node answers a
// statement whose replication it could not finish because it lost the
// cluster (wsrep-lib maps the provider's connection and provider failures
// to it): the other nodes may have committed it.
func (s *Store) writeErr(op, resource string, err error) error {
	var (
		me *gomysql.MySQLError
		ns notSent
	)
	if errors.Is(err, errNoConn) || errors.Is(err, errClosed) {
		return err
	}
	if errors.As(err, &me) && me.Number == erErrorDuringCommit {
		return driver.UnknownOutcome(s.failed(op, resource, err))
	}
	if errors.As(err, &me) || errors.As(err, &ns) || errors.Is(err, sqldriver.ErrBadConn) || errors.Is(err, driver.ErrNotStore) {
		return s.failed(op, resource, err)
	}
	return driver.UnknownOutcome(s.failed(op, resource, err))
}

// maxAttempts bounds how often one operation is tried again on another
// connection after it was found not applied for a reason that another try
// may not meet (see retryable).
const maxAttempts = 5

// retryable reports an error that proves the statement was not applied and
// that another try may succeed: nothing was sent on a dead connection
// (driver.ErrBadConn), the server ended the session or the statement
// (shutdown, KILL, wait_timeout), or it chose the statement's transaction
// as a deadlock victim (on Galera, also a certification failure or a
// brute-force abort by a replicated write; on MySQL Group Replication, a
// certification failure is error 3101).
func retryable(err error) bool {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erDeadlock, erServerShutdown, erQueryInterrupted, erConnectionKilled, erClientInterTO, erGRRollback:
			return true
		}
		return false
	}
	return errors.Is(err, sqldriver.ErrBadConn)
}

// with runs f on a connection from the pool, again on another connection
// when the first try was proven not applied and may succeed on another
// (see retryable). Errors from taking a connection are definite: nothing
// was sent. A release passes the other statements waiting for a
// connection (gate).
func (s *Store) with(ctx context.Context, op, resource string, f func(c *sql.Conn) error) error {
	var err error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if s.closed.Load() {
			return fmt.Errorf("mysql store: %s %q: %w: %w", op, resource, errNoConn, errClosed)
		}
		if err = s.gate.enter(ctx, op == "release"); err != nil {
			return fmt.Errorf("mysql store: %s %q: %w: %w", op, resource, errNoConn, err)
		}
		var c *sql.Conn
		c, err = s.db.Conn(ctx)
		if err != nil {
			s.gate.leave()
			if s.closed.Load() {
				return fmt.Errorf("mysql store: %s %q: %w: %w", op, resource, errNoConn, errClosed)
			}
			return fmt.Errorf("mysql store: %s %q: %w: %w", op, resource, errNoConn, err)
		}
		if cerr := ctx.Err(); cerr != nil {
			err = notSent{cerr}
		} else if err = s.checkSchema(ctx, c); err == nil {
			err = f(c)
		}
		c.Close()
		s.gate.leave()
		if err == nil || ctx.Err() != nil || !retryable(err) {
			return err
		}
	}
	return err
}

// checkSchema checks the tables on c (checkTables) until they have been
// found tenure's once. Its errors are definite: no statement of the
// operation was sent.
func (s *Store) checkSchema(ctx context.Context, c *sql.Conn) error {
	if s.schemaOK.Load() {
		return nil
	}
	exist, reservations, err := s.checkTables(ctx, c)
	switch {
	case errors.Is(err, driver.ErrNotStore):
		return err
	case err != nil:
		return notSent{fmt.Errorf("checking the tables: %w", err)}
	case exist:
		s.reservations.Store(reservations)
		s.schemaOK.Store(true)
	}
	return nil
}

// startSweeper starts the background sweep at the Store's first grant.
func (s *Store) startSweeper() {
	if s.sweepEvery < 0 {
		return
	}
	s.sweepOnce.Do(func() {
		s.sweepDone = make(chan struct{})
		go s.sweeper()
	})
}

func (s *Store) sweeper() {
	defer close(s.sweepDone)
	for {
		t := time.NewTimer(time.Duration(float64(s.sweepEvery) * (0.5 + rand.Float64())))
		select {
		case <-s.life.Done():
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.life, s.sweepEvery)
		_, _ = s.Sweep(ctx) // best effort: the next sweep tries again
		cancel()
	}
}
