// Package postgres is a driver.Store on PostgreSQL, through
// github.com/jackc/pgx/v5 (pgxpool).
//
// Leases live in one table (default tenure_leases), one row per resource in
// use, and fencing tokens come from one sequence per table (default
// tenure_leases_token_seq):
//
//	CREATE TABLE tenure_leases (
//		resource   text COLLATE "C" PRIMARY KEY,
//		owner      text,             -- the grant's owner string; NULL when released
//		token      bigint NOT NULL,  -- its fencing token (the last one, when released)
//		ttl_ms     bigint,           -- TTL last written, milliseconds
//		expires_at timestamptz,      -- on the database's clock
//		granted_at timestamptz,      -- when it was granted, or released
//		waiters    boolean NOT NULL  -- someone waits: notify on release
//	)
//	CREATE SEQUENCE tenure_leases_token_seq AS bigint
//
// A grant's token is max(the sequence's next value, the database's clock in
// microseconds since the Unix epoch, the row's old token + 1), and the
// sequence is moved up to it (setval) when the clock or the old row is
// ahead, and the sweep raises it above the tokens of the rows it deletes
// (concurrent grants' setvals land in no order, so the sequence can lag
// the largest token by their clock skew; a name's row is its floor until
// then): one strictly increasing counter for the whole table gives every
// resource a strictly increasing sequence of tokens, and the clock floor
// keeps tokens above every earlier one when the table, its rows or the
// sequence are lost (dropped, deleted by hand, re-created by `tenure init`),
// unless the database's clock went back by more than the age of what was
// lost. So rows need not outlive their leases for long: Release frees the
// row, and every Store deletes, about once a minute, the rows of leases
// that were released or expired more than SweepGrace earlier (Sweep). No
// state is left for names no longer in use.
//
// Every operation is one SQL statement, so one atomic transaction. Expiry is
// decided by the database's clock (clock_timestamp(), read inside the
// statement), never by a client's clock: a client whose wall clock jumps
// cannot make a live lease look free. The database server's own clock must
// not step (run NTP in slewing mode), as with any store that expires on its
// clock.
//
// No lease is tied to a database session: there are no advisory locks, and a
// connection that dies (pg_terminate_backend, an idle-connection cull, a
// proxy restart) changes nothing in the table. The holder's next renewal goes
// through another connection of the pool (case C09).
//
// Release notifications: a release sends NOTIFY on a channel (default
// tenure_release), in the same statement, only when the row says that
// someone waits (an acquire found the lease held, or a Store with a
// subscriber renewed it), so that a release nobody waits for never takes
// PostgreSQL's cluster-wide lock on notifying commits. The Store implements
// driver.Notifier: one listening connection per Store fans notifications out
// to the waiting Acquires of that Store and reconnects when it fails. It
// checks, at each (re)connection, that a notification sent through the pool
// reaches it; when none does (a transaction pooler such as PgBouncer in
// transaction mode lends server sessions per transaction, so LISTEN cannot
// work through it), Subscribe fails at once and waiters poll with their
// retry interval. A notification is only a hint; expiry sends none.
//
// Behind a transaction pooler, named prepared statements cannot work either
// (each transaction may run on another server session). The Store uses
// pgx's default mode (statements prepared once per connection) until the
// server reports a prepared statement that already exists or does not
// exist; it then runs every statement without named prepared statements
// (pgx's QueryExecModeCacheDescribe: one round trip per statement) and
// retries the statement, which was not run. The URL parameter
// default_query_exec_mode=cache_describe (or exec, or simple_protocol)
// chooses such a mode from the start.
//
// An error that leaves the outcome of a write unknown (the connection broke
// or the context ended after the statement was sent) is reported with
// driver.UnknownOutcome; a statement that was never sent (no connection
// could be had) or that the server refused is a plain error.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-go/tenure/driver"
)

// Defaults.
const (
	// DefaultTable is the leases table.
	DefaultTable = "tenure_leases"
	// DefaultChannel is the LISTEN/NOTIFY channel of release notifications.
	DefaultChannel = "tenure_release"
	// DefaultConnectTimeout bounds each connection attempt when the DSN sets
	// no connect_timeout.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultSweepInterval is how often a Store deletes the rows of
	// released and expired leases (see Store.Sweep).
	DefaultSweepInterval = time.Minute
	// SweepGrace is how long the row of a released or expired lease is
	// kept: the next grant of a name in use takes over its row (a cheaper
	// write than a new row, and one whose token is read after the row is
	// locked), and the waiters an expired lease records are notified when
	// the next holder releases it.
	SweepGrace = time.Minute
)

// MaxTTL is the longest TTL the store accepts (about 146 years; TTLs are kept
// as int64 milliseconds).
const MaxTTL = driver.MaxMillisecondTTL

// ttls is the range of TTLs the store keeps: 1 ms to MaxTTL.
var ttls = driver.MillisecondTTLs

// ErrNoSchema means that the leases table or its token sequence does not
// exist, or that the table was made by an older tenure: run Init (`tenure
// init`), which creates or migrates them. It matches driver.ErrNoStore too.
var ErrNoSchema error = noSchemaError{}

type noSchemaError struct{}

func (noSchemaError) Error() string {
	return "the leases table or its token sequence does not exist, or the table is of an older tenure; create or migrate it with `tenure init` (postgres.Init)"
}

func (noSchemaError) Is(target error) bool { return target == driver.ErrNoStore }

// Config configures a Store.
type Config struct {
	// DSN is a pgx connection string: a URL (postgres://user:pass@host:port/db?sslmode=verify-full&sslrootcert=...)
	// or key=value pairs, with every parameter pgx and libpq know (TLS,
	// passwords, service files, target_session_attrs, pool_max_conns,
	// default_query_exec_mode, ...). Ignored when Pool is set.
	DSN string

	// Pool, when set, is used instead of parsing DSN.
	Pool *pgxpool.Config

	// Table is the leases table, optionally schema-qualified
	// ("leases.tenure"): letters, digits and underscores. Default
	// DefaultTable. Its token sequence is the table's name (cut to 53
	// bytes) followed by "_token_seq", in the same schema.
	Table string

	// Channel is the NOTIFY channel for releases: lower-case letters, digits
	// and underscores. Default DefaultChannel. Stores that share a table
	// must share the channel.
	Channel string

	// ConnectTimeout bounds each connection attempt when the DSN sets no
	// connect_timeout. Default DefaultConnectTimeout.
	ConnectTimeout time.Duration

	// SweepInterval is how often the Store deletes the rows of leases that
	// were released or expired more than SweepGrace ago (Store.Sweep), from its first grant
	// until Close; each Store waits a random 50% to 150% of it between
	// sweeps. Default DefaultSweepInterval; negative: never.
	SweepInterval time.Duration

	// Logger receives what the Store does on its own: the listening
	// connection of release notifications lost, found silent, and
	// re-established (warnings and information). Default slog.Default().
	Logger *slog.Logger
}

// Store is a driver.Store, driver.Notifier and driver.BatchRenewer on
// PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	gate    *gate  // admits statements to the pool, releases first (gate.go)
	table   string // quoted identifier
	seq     string // quoted identifier of the token sequence
	regName string // as configured, for messages and the schema lock
	channel string
	connCfg *pgx.ConnConfig // for the listening connection
	connTO  time.Duration

	sql struct {
		acquire, holder, renew, keep, renewBatch, release, list, sweep, probe, watch string
	}

	// pooled: run statements without named prepared statements (a
	// transaction pooler was detected).
	pooled atomic.Bool

	// schemaOK is set once checkTable found the table and found it
	// tenure's; until then every statement checks first. Cleared when the
	// table is found missing, so that a table re-created by hand is
	// checked again.
	schemaOK atomic.Bool

	hub driver.Hub // release notifications; Listen is listen
	log *slog.Logger
	// listenCheck is how long the listening connection may be silent before
	// it is pinged, and how long the ping may take (ListenCheck).
	listenCheck time.Duration

	// notify is the state of release notifications (notify.go).
	notify struct {
		mu      sync.Mutex
		down    error           // notifications cannot reach this Store; nil when unknown or working
		downCtx context.Context // cancelled (cause down) when they are found not to
		setDown context.CancelCauseFunc
		watched map[string]int // resources with subscribers in this Store
		nWatch  atomic.Int64
	}

	sweepEvery time.Duration
	sweepOnce  sync.Once
	sweepDone  chan struct{} // closed when the sweeper ended; nil if it never started

	life      context.Context // ends at Close
	end       context.CancelFunc
	closeOnce sync.Once
	closed    atomic.Bool // Close was called
}

var (
	identRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)
	channelRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
)

// Open connects to the database and checks that it answers, within the
// connect timeout (and ctx). It does not create the schema: Init does, once
// (`tenure init`); operations on a database without it return errors wrapping
// ErrNoSchema. Bad configuration returns an error before any I/O.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	pc := cfg.Pool
	if pc == nil {
		if cfg.DSN == "" {
			return nil, errors.New("postgres store: no DSN")
		}
		var err error
		if pc, err = pgxpool.ParseConfig(cfg.DSN); err != nil {
			return nil, fmt.Errorf("postgres store: bad DSN: %w", err)
		}
	} else {
		pc = pc.Copy()
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if cfg.Channel == "" {
		cfg.Channel = DefaultChannel
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	if !identRE.MatchString(cfg.Table) {
		return nil, fmt.Errorf("postgres store: table name %q: use letters, digits and underscores, optionally schema.table", cfg.Table)
	}
	if !channelRE.MatchString(cfg.Channel) {
		return nil, fmt.Errorf("postgres store: channel name %q: use lower-case letters, digits and underscores", cfg.Channel)
	}
	if cfg.ConnectTimeout < 0 {
		return nil, fmt.Errorf("postgres store: negative connect timeout %v", cfg.ConnectTimeout)
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	parts := strings.Split(cfg.Table, ".")
	seqParts := append([]string(nil), parts...)
	last := seqParts[len(seqParts)-1]
	if len(last) > 53 {
		last = last[:53]
	}
	seqParts[len(seqParts)-1] = last + "_token_seq"
	s := &Store{
		pool:        pool,
		gate:        newGate(int(pool.Config().MaxConns)),
		table:       pgx.Identifier(parts).Sanitize(),
		seq:         pgx.Identifier(seqParts).Sanitize(),
		regName:     cfg.Table,
		channel:     cfg.Channel,
		connCfg:     pc.ConnConfig.Copy(),
		connTO:      pc.ConnConfig.ConnectTimeout,
		sweepEvery:  cfg.SweepInterval,
		log:         cfg.Logger,
		listenCheck: ListenCheck,
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.life, s.end = context.WithCancel(context.Background())
	s.hub.Listen = s.listen
	s.notify.downCtx, s.notify.setDown = context.WithCancelCause(context.Background())
	s.prepareSQL()
	pctx, cancel := context.WithTimeout(ctx, s.connTO+time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store: connect %s: %w", redacted(pc.ConnConfig), onceEach{err})
	}
	return s, nil
}

// onceEach is err with each line of its message said once: pgx lists
// every connection attempt on a line of its own, and with sslmode=prefer it
// tries each address twice (TLS, then plain), so a server that cannot be
// reached gets the same dial error twice. errors.Is and As see err.
type onceEach struct{ err error }

func (e onceEach) Unwrap() error { return e.err }

func (e onceEach) Error() string {
	lines := strings.Split(e.err.Error(), "\n")
	seen := make(map[string]bool, len(lines))
	out := lines[:0]
	for _, l := range lines {
		if k := strings.TrimSpace(l); !seen[k] {
			seen[k] = true
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// redacted names c's user, addresses (the first, then pgx's fallbacks)
// and database, without its password.
func redacted(c *pgx.ConnConfig) string {
	addrs := []string{net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))}
	for _, f := range c.Fallbacks {
		if a := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))); !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return fmt.Sprintf("%s@%s/%s", c.User, strings.Join(addrs, ","), c.Database)
}

// Pooled reports whether the Store runs its statements without named
// prepared statements, because the server reported a prepared statement
// that already existed or did not exist (a transaction pooler).
func (s *Store) Pooled() bool { return s.pooled.Load() }

// Close stops the listening connection and the sweeper, and closes the
// pool. It does not release leases. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.end()
		s.sweepOnce.Do(func() {}) // no sweeper starts after Close
		if s.sweepDone != nil {
			<-s.sweepDone
		}
		s.hub.Close()
		s.notify.mu.Lock()
		s.notify.setDown(errClosed)
		s.notify.mu.Unlock()
		s.pool.Close()
	})
	return nil
}

// errClosed is what a closed Store answers: it matches
// driver.ErrStoreUnusable, so that a Locker waiting on it stops.
var errClosed = fmt.Errorf("postgres store: closed (%w)", driver.ErrStoreUnusable)

// CheckTTL returns an error wrapping driver.ErrInvalidTTL for a TTL that a
// store opened with c cannot keep (below 1 ms or above MaxTTL), without
// I/O.
func (c Config) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// CheckTTL implements driver.TTLChecker, so a Locker rejects a TTL this
// store cannot keep before any I/O.
func (s *Store) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// args returns a statement's arguments, first the query mode when the
// Store runs behind a transaction pooler.
func (s *Store) args(a ...any) []any {
	if s.pooled.Load() {
		return append([]any{pgx.QueryExecModeCacheDescribe}, a...)
	}
	return a
}

// failed wraps an error of a statement that was not applied, or of a read.
func (s *Store) failed(op, resource string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "42P01" && strings.Contains(pgErr.Message, "does not exist"): // undefined_table: the table or the sequence
			s.schemaOK.Store(false)
			return fmt.Errorf("postgres store: %s %q: %w: %w", op, resource, ErrNoSchema, err)
		case pgErr.Code == "42703" && strings.Contains(pgErr.Message, `"waiters"`): // an older tenure's table
			return fmt.Errorf("postgres store: %s %q: %w: %w", op, resource, ErrNoSchema, err)
		case pgErr.Code == "42703": // undefined_column: a table of the same name, not tenure's
			return fmt.Errorf("postgres store: %s %q: the table %s is not tenure's leases table: %w: %w", op, resource, s.regName, driver.ErrNotStore, err)
		}
	}
	return fmt.Errorf("postgres store: %s %q: %w", op, resource, err)
}

// writeErr classifies the error of a write statement: one the server
// reported (the statement failed and was rolled back) or one that happened
// before anything was sent is a plain error; anything else (the connection
// broke, or ctx ended, after the statement was sent) leaves the outcome
// unknown.
func (s *Store) writeErr(op, resource string, err error) error {
	var pgErr *pgconn.PgError
	var ce checkErr
	if errors.Is(err, errNoConn) {
		return err
	}
	if errors.As(err, &pgErr) || pgconn.SafeToRetry(err) || errors.As(err, &ce) || errors.Is(err, driver.ErrNotStore) {
		return s.failed(op, resource, err)
	}
	return driver.UnknownOutcome(s.failed(op, resource, err))
}

// errNoConn marks errors from taking a connection from the pool: nothing
// was sent.
var errNoConn = errors.New("no connection")

// maxAttempts bounds how often one operation is tried on a fresh connection
// after its connection was found dead before the statement ran.
const maxAttempts = 5

// retryable reports an error that proves the statement was not applied and
// that the connection, not the statement, was at fault: nothing was sent, or
// the server had already terminated the session (pg_terminate_backend, an
// idle-session cull, a shutdown: SQLSTATE class 57) or refused it (class 08).
// The operation is then tried again on another connection of the pool.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "57") || strings.HasPrefix(pgErr.Code, "08")
	}
	return pgconn.SafeToRetry(err)
}

// preparedStatementError reports the errors of a named prepared statement
// that a transaction pooler moved between server sessions: preparing one
// that the session already has (42P05, duplicate_prepared_statement) or
// running one it does not have (26000, invalid_sql_statement_name). The
// statement did not run.
func preparedStatementError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P05" || pgErr.Code == "26000")
}

// with runs f on a connection from the pool, again on another connection
// when the first one turned out to be dead before the statement ran (see
// retryable), and again without named prepared statements when a
// transaction pooler is detected (see preparedStatementError). Errors from
// taking a connection are definite: nothing was sent.
//
// A release passes the other statements waiting for a connection (gate).
func (s *Store) with(ctx context.Context, op, resource string, f func(c *pgxpool.Conn) error) error {
	var err error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err = s.gate.enter(ctx, op == "release"); err != nil {
			return fmt.Errorf("postgres store: %s %q: %w: %w", op, resource, errNoConn, err)
		}
		var c *pgxpool.Conn
		c, err = s.pool.Acquire(ctx)
		if err != nil {
			s.gate.leave()
			if s.closed.Load() {
				// Close ran while this statement waited: say so, as a
				// call after Close would (driver.ErrStoreUnusable).
				return fmt.Errorf("postgres store: %s %q: %w: %w", op, resource, errNoConn, errClosed)
			}
			return fmt.Errorf("postgres store: %s %q: %w: %w", op, resource, errNoConn, err)
		}
		if err = s.checkSchema(ctx, c); err == nil {
			err = f(c)
		}
		c.Release()
		s.gate.leave()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if preparedStatementError(err) {
			// Behind a transaction pooler: from now on, no named prepared
			// statements. The first such error is not an attempt of its own.
			if !s.pooled.Swap(true) {
				attempt--
			}
			continue
		}
		if !retryable(err) {
			return err
		}
	}
	return err
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
