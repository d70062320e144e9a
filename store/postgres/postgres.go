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

// Pool returns the store's connection pool (for tests and diagnostics).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

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

// Init connects to the database (as Open does) and creates the leases table
// and its token sequence if they do not exist, or migrates a table made by
// an older tenure (one row per resource ever held, a token counter per row):
// it adds the waiters column and creates the sequence above every token in
// the table. It is idempotent and safe to run from many processes at once
// (a transaction-scoped advisory lock serialises the DDL; no lease ever
// uses advisory locks). The role needs CREATE on the schema; the stores
// that only use the table need SELECT, INSERT, UPDATE and DELETE on it and
// USAGE and UPDATE on the sequence.
//
// After a migration, clients of the older tenure can still renew, release
// and read the leases they hold, but every acquire of theirs fails (the
// waiters column has no default), so they never grant a token from the
// old per-row counters again: upgrade them.
func Init(ctx context.Context, cfg Config) error {
	s, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.init(ctx)
}

func (s *Store) init(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres store: init: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	// Exec mode: no named prepared statement, so Init works through a
	// transaction pooler too.
	exec := func(what, sql string, args ...any) error {
		if _, err := tx.Exec(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...); err != nil {
			return fmt.Errorf("postgres store: init: %s: %w", what, err)
		}
		return nil
	}
	if err := exec("lock", `SELECT pg_advisory_xact_lock(hashtext('tenure schema ' || $1::text))`, s.regName); err != nil {
		return err
	}
	ddl := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	resource   text COLLATE "C" PRIMARY KEY,
	owner      text,
	token      bigint NOT NULL CHECK (token > 0),
	ttl_ms     bigint,
	expires_at timestamptz,
	granted_at timestamptz,
	waiters    boolean NOT NULL,
	CHECK ((owner IS NULL) = (expires_at IS NULL))
) WITH (fillfactor = %d)`, s.table, fillFactor)
	if err := exec("create table "+s.regName, ddl); err != nil {
		return err
	}
	// A table of an older tenure has no waiters column: add it with false
	// in every row, then drop the default so that the older clients'
	// acquires (which do not set it) fail instead of granting tokens from
	// their per-row counters.
	var hasWaiters bool
	err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'waiters' AND NOT attisdropped)`,
		pgx.QueryExecModeExec, s.table).Scan(&hasWaiters)
	if err != nil {
		return fmt.Errorf("postgres store: init: %w", err)
	}
	if !hasWaiters {
		if err := exec("migrate "+s.regName, fmt.Sprintf(`ALTER TABLE %s ADD COLUMN waiters boolean NOT NULL DEFAULT false`, s.table)); err != nil {
			return err
		}
		if err := exec("migrate "+s.regName, fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN waiters DROP DEFAULT`, s.table)); err != nil {
			return err
		}
	}
	// Renewals rewrite rows all the time: room on each page keeps them HOT
	// updates (no new index entry, pruned on the page). A table of an
	// earlier tenure gets it for its new pages.
	var hasFill bool
	err = tx.QueryRow(ctx, `SELECT coalesce(reloptions::text[] && ARRAY['fillfactor=' || $2::text], false) FROM pg_class WHERE oid = $1::regclass`,
		pgx.QueryExecModeExec, s.table, fmt.Sprint(fillFactor)).Scan(&hasFill)
	if err != nil {
		return fmt.Errorf("postgres store: init: %w", err)
	}
	if !hasFill {
		if err := exec("fillfactor", fmt.Sprintf(`ALTER TABLE %s SET (fillfactor = %d)`, s.table, fillFactor)); err != nil {
			return err
		}
	}
	// The sequence is not owned by the table: dropping the table leaves it,
	// and the tokens of a re-created table go on from it.
	if err := exec("create sequence", fmt.Sprintf(`CREATE SEQUENCE IF NOT EXISTS %s AS bigint MINVALUE 1`, s.seq)); err != nil {
		return err
	}
	if err := exec("sequence above the tokens of the table", fmt.Sprintf(`SELECT setval('%[1]s', m) FROM (SELECT max(token) AS m FROM %[2]s) t, %[1]s q
WHERE m IS NOT NULL AND (m > q.last_value OR NOT q.is_called)`, s.seq, s.table)); err != nil {
		return err
	}
	for _, c := range []string{
		fmt.Sprintf(`COMMENT ON TABLE %s IS 'tenure leases: one row per resource in use (swept a minute after release or expiry); fencing tokens from the sequence %s, floored by the clock (github.com/tenure-go/tenure/store/postgres)'`, s.table, strings.ReplaceAll(s.seq, `'`, `''`)),
		fmt.Sprintf(`COMMENT ON COLUMN %s.waiters IS 'someone waits for this lease: its release sends a notification. No default on purpose: older tenure clients, which grant tokens from per-row counters, cannot insert'`, s.table),
		fmt.Sprintf(`COMMENT ON SEQUENCE %s IS 'tenure fencing tokens of %s: never set it lower'`, s.seq, strings.ReplaceAll(s.table, `'`, `''`)),
	} {
		if err := exec("comment", c); err != nil {
			return err
		}
	}
	// Last, so that a table that is not tenure's is left as it was: the
	// transaction is rolled back.
	if _, err := s.checkTable(ctx, tx); err != nil {
		return fmt.Errorf("postgres store: init: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres store: init: commit: %w", err)
	}
	return nil
}

// fillFactor is the leases table's fillfactor: half of each page is kept
// free for the new row versions of renewals.
const fillFactor = 50

// ms is a TTL in milliseconds as SQL sees it.
const ms = `($3::bigint * interval '1 millisecond')`

// liveSQL is the condition of a live lease on row alias a at time now.
// Anything else (expired, released by an older tenure, or a partial row
// written by another tool: owner, expiry or token missing) is free.
func liveSQL(a, now string) string {
	return fmt.Sprintf(`(%[1]s.owner IS NOT NULL AND %[1]s.expires_at > %[2]s AND %[1]s.token > 0) IS TRUE`, a, now)
}

// remainSQL is the time left on the lease of row alias a, milliseconds.
func remainSQL(a string) string {
	return fmt.Sprintf(`floor(extract(epoch FROM %s.expires_at - clock_timestamp()) * 1000)::bigint`, a)
}

func (s *Store) prepareSQL() {
	t, q := s.table, s.seq
	// Acquire: one statement that grants a free resource, renews the same
	// grant's live lease (a retry), or, when another owner holds it, marks
	// the row as waited for and returns the holder. ON CONFLICT locks the row
	// and evaluates the SET on its newest version, with the clock read once
	// after the lock, so concurrent acquires serialise on the row and a
	// grant's TTL counts from its effect. The token of a grant is
	// max(nextval, the clock in µs) for a name without a row, and also above
	// the row's token (the last one granted: rows are kept SweepGrace after
	// release) for a name with one; setval carries the clock or the row's
	// token into the sequence, so the next grant of any resource is above
	// it. A statement that granted nothing changed only the waiters mark (a
	// hint): it commits without waiting for the WAL flush.
	s.sql.acquire = fmt.Sprintf(`INSERT INTO %[1]s AS l (resource, owner, token, ttl_ms, expires_at, granted_at, waiters)
SELECT $1, $2, CASE WHEN n.c > n.v THEN setval('%[2]s', n.c) ELSE n.v END, $3, n.now + %[3]s, n.now, false
FROM (SELECT nextval('%[2]s') AS v, (extract(epoch FROM c.now) * 1000000)::bigint AS c, c.now FROM (SELECT clock_timestamp() AS now) c) n
ON CONFLICT (resource) DO UPDATE SET (token, owner, granted_at, ttl_ms, expires_at, waiters) = (
	SELECT
		CASE WHEN s.live THEN l.token WHEN s.floor > excluded.token THEN setval('%[2]s', s.floor) ELSE excluded.token END,
		CASE WHEN s.live THEN l.owner ELSE excluded.owner END,
		CASE WHEN s.live THEN l.granted_at ELSE s.now END,
		CASE WHEN s.other THEN l.ttl_ms ELSE excluded.ttl_ms END,
		CASE WHEN s.other THEN l.expires_at ELSE s.now + %[3]s END,
		CASE WHEN s.other THEN true ELSE coalesce(l.waiters, false) END
	FROM (SELECT c.now, %[4]s AS live, %[4]s AND l.owner <> excluded.owner AS other, coalesce(l.token, 0) + 1 AS floor
		FROM (SELECT clock_timestamp() AS now) c) s
)
RETURNING owner, token, coalesce(ttl_ms, 0), %[5]s,
	CASE WHEN owner IS DISTINCT FROM $2 THEN set_config('synchronous_commit', 'off', true) END`, t, q, ms, liveSQL("l", "c.now"), remainSQL("l"))
	// Get and List judge a row live at the start of the statement's
	// transaction (now(): they run as one statement each), which is before
	// the statement took its snapshot, never at clock_timestamp(), read
	// after it: a lease that expired between the snapshot and that reading,
	// renewed by a session that committed meanwhile, would read as free
	// although it never was. A row the snapshot holds whose expiry is after
	// now() was live then, or (committed after now()) when it committed.
	s.sql.holder = fmt.Sprintf(`SELECT owner, token, coalesce(ttl_ms, 0), %[2]s FROM %[1]s h WHERE resource = $1 AND %[3]s`,
		t, remainSQL("h"), liveSQL("h", "now()"))
	// Renew and Release answer with no row when they applied, and with one
	// row naming the current holder (NULLs when there is none) when they
	// did not, in the same statement: the holder is read from the
	// statement's snapshot (taken before the write), which is enough to
	// tell "taken by X" from "gone". The write's CTE gates the read (a
	// one-time filter; OFFSET 0 keeps the subquery), so a write that
	// applied reads nothing more and sends no row back.
	holder := func(cte string) string {
		return fmt.Sprintf(`SELECT h.owner, h.token, coalesce(h.ttl_ms, 0), %[1]s
FROM (SELECT) AS one LEFT JOIN LATERAL (SELECT * FROM %[2]s h WHERE h.resource = $1 AND %[3]s OFFSET 0) h ON true
WHERE NOT EXISTS (SELECT FROM %[4]s)`, remainSQL("h"), t, liveSQL("h", "clock_timestamp()"), cte)
	}
	s.sql.renew = fmt.Sprintf(`WITH u AS (
	UPDATE %[1]s SET ttl_ms = $4, expires_at = clock_timestamp() + ($4::bigint * interval '1 millisecond')
	WHERE resource = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
	RETURNING 1
)
%[2]s`, t, holder("u"))
	// Keep hands the lease to another owner string ($5) with a new expiry,
	// in the same shape as Renew.
	s.sql.keep = fmt.Sprintf(`WITH u AS (
	UPDATE %[1]s SET owner = $5, ttl_ms = $4, expires_at = clock_timestamp() + ($4::bigint * interval '1 millisecond')
	WHERE resource = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
	RETURNING 1
)
%[2]s`, t, holder("u"))
	// Release frees the row (its token stays, and the time it was freed is
	// kept in granted_at for the sweep) and notifies, in the same statement
	// (RETURNING is computed for every row the CTE changes, whether or not
	// it is read), only when the row says someone waits: NOTIFY is
	// delivered when, and only if, the release commits. The mark stays
	// with the row (the waiters that a release did not wake look again only
	// when the next holder's lease would expire, so the next release must
	// wake one); the row, and its mark, go when the name is not used for
	// SweepGrace.
	s.sql.release = fmt.Sprintf(`WITH f AS (
	UPDATE %[1]s SET owner = NULL, ttl_ms = NULL, expires_at = NULL, granted_at = clock_timestamp()
	WHERE resource = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
	RETURNING CASE WHEN waiters THEN pg_notify($4, $1)::text END
)
%[2]s`, t, holder("f"))
	// RenewBatch: every renewal in one UPDATE over the unnested arrays; one
	// answer row per lease that was not renewed (b.i is its 1-based
	// position), naming its holder.
	s.sql.renewBatch = fmt.Sprintf(`WITH b AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS b(resource, owner, token, ttl_ms, i)
), u AS (
	UPDATE %[1]s l SET ttl_ms = b.ttl_ms, expires_at = clock_timestamp() + (b.ttl_ms * interval '1 millisecond')
	FROM b WHERE l.resource = b.resource AND l.owner = b.owner AND l.token = b.token AND l.expires_at > clock_timestamp()
	RETURNING b.i
)
SELECT b.i, h.owner, h.token, coalesce(h.ttl_ms, 0), %[2]s
FROM b LEFT JOIN u ON u.i = b.i
LEFT JOIN LATERAL (SELECT * FROM %[1]s h WHERE u.i IS NULL AND h.resource = b.resource AND %[3]s OFFSET 0) h ON true
WHERE u.i IS NULL`,
		t, remainSQL("h"), liveSQL("h", "clock_timestamp()"))
	s.sql.list = fmt.Sprintf(`SELECT resource, owner, token, coalesce(ttl_ms, 0), %[2]s
FROM %[1]s h WHERE resource >= $1 AND starts_with(resource, $1) AND %[3]s
ORDER BY resource`, t, remainSQL("h"), liveSQL("h", "now()"))
	// Sweep: rows of leases that expired or were released SweepGrace ago,
	// and rows that are neither a lease nor a released one (partial rows).
	dead := fmt.Sprintf(`(((d.owner IS NOT NULL AND d.expires_at > clock_timestamp() - %[1]s AND d.token > 0)
	OR (d.owner IS NULL AND d.granted_at > clock_timestamp() - %[1]s)) IS NOT TRUE)`,
		fmt.Sprintf("interval '%d milliseconds'", SweepGrace.Milliseconds()))
	// The sweep raises the sequence to the largest token of the rows it
	// deletes (when it is below it) before they are gone: a row is a
	// resource's token floor, and the sequence must take over when it goes.
	// Concurrent grants each setval the sequence to their own clock reading,
	// in no order, so it can lag the largest token granted by their skew
	// (under a millisecond); the clock hides that while it runs forward, and
	// this raise closes it for the swept names whatever the clock does.
	s.sql.sweep = fmt.Sprintf(`WITH d AS (
	DELETE FROM %[1]s d WHERE resource IN (SELECT resource FROM %[1]s d WHERE %[2]s LIMIT %[3]d) AND %[2]s RETURNING d.token
), m AS (SELECT count(*) AS n, max(token) AS top FROM d)
SELECT m.n, CASE WHEN m.top > q.last_value THEN setval('%[4]s', m.top) END FROM m, %[4]s q`,
		t, dead, sweepBatch, s.seq)
	s.sql.probe = `SELECT pg_notify($1, $2)`
	s.sql.watch = fmt.Sprintf(`UPDATE %s SET waiters = true WHERE resource = $1 AND owner IS NOT NULL AND waiters IS NOT TRUE`, t)
}

// sweepBatch bounds the rows one sweep statement deletes.
const sweepBatch = 1000

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
