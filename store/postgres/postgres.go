// Package postgres is a driver.Store on PostgreSQL, through
// github.com/jackc/pgx/v5 (pgxpool).
//
// Leases live in one table (default tenure_leases), one row per resource
// that was ever held:
//
//	CREATE TABLE tenure_leases (
//		resource   text COLLATE "C" PRIMARY KEY,
//		owner      text,          -- NULL when free
//		token      bigint NOT NULL, -- last fencing token granted; never goes back
//		ttl_ms     bigint,        -- TTL of the live lease, milliseconds
//		expires_at timestamptz,   -- on the database's clock
//		granted_at timestamptz    -- when the live lease was granted (display)
//	)
//
// The row is kept after release and expiry (only owner and expiry are
// cleared), so the fencing token of a resource never goes back, also across
// restarts of the clients and of the server: it is as durable as any other
// committed row.
//
// Every operation is one SQL statement, so one atomic transaction. Expiry is
// decided by the database's clock (clock_timestamp(), read inside the
// statement that grants, renews or releases, after the row is locked), never
// by a client's clock: a client whose wall clock jumps cannot make a live
// lease look free. The database server's own clock must not step (run NTP in
// slewing mode), as with any store that expires on its clock.
//
// No lease is tied to a database session: there are no advisory locks, and a
// connection that dies (pg_terminate_backend, an idle-connection cull, a
// proxy restart) changes nothing in the table. The holder's next renewal goes
// through another connection of the pool (case C09).
//
// Release sends NOTIFY on a channel (default tenure_release) with the
// resource as payload, in the same statement, so it is delivered only if the
// release commits. The Store implements driver.Notifier: one listening
// connection per Store fans notifications out to the waiting Acquires of that
// Store and reconnects when it fails. A notification is only a hint; expiry
// sends none (a waiter finds an expired lease by its backoff).
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
	"regexp"
	"strings"
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
)

// MaxTTL is the longest TTL the store accepts (about 146 years; TTLs are kept
// as int64 milliseconds).
const MaxTTL = driver.MaxMillisecondTTL

// ttls is the range of TTLs the store keeps: 1 ms to MaxTTL.
var ttls = driver.MillisecondTTLs

// ErrNoSchema means that the leases table does not exist: run Init
// (`tenure init`) once. It matches driver.ErrNoStore too.
var ErrNoSchema error = noSchemaError{}

type noSchemaError struct{}

func (noSchemaError) Error() string {
	return "postgres store: the leases table does not exist; create it with `tenure init` (postgres.Init)"
}

func (noSchemaError) Is(target error) bool { return target == driver.ErrNoStore }

// Config configures a Store.
type Config struct {
	// DSN is a pgx connection string: a URL (postgres://user:pass@host:port/db?sslmode=verify-full&sslrootcert=...)
	// or key=value pairs, with every parameter pgx and libpq know (TLS,
	// passwords, service files, target_session_attrs, pool_max_conns, ...).
	// Ignored when Pool is set.
	DSN string

	// Pool, when set, is used instead of parsing DSN.
	Pool *pgxpool.Config

	// Table is the leases table, optionally schema-qualified
	// ("leases.tenure"): letters, digits and underscores. Default
	// DefaultTable.
	Table string

	// Channel is the NOTIFY channel for releases: lower-case letters, digits
	// and underscores. Default DefaultChannel. Stores that share a table
	// must share the channel.
	Channel string

	// ConnectTimeout bounds each connection attempt when the DSN sets no
	// connect_timeout. Default DefaultConnectTimeout.
	ConnectTimeout time.Duration
}

// Store is a driver.Store and driver.Notifier on PostgreSQL. It is safe for
// concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	table   string // quoted identifier
	regName string // for to_regclass
	channel string
	connCfg *pgx.ConnConfig // for the listening connection
	connTO  time.Duration

	sql struct {
		acquire, holder, renew, release, list string
	}

	hub driver.Hub // release notifications; Listen is listen
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
	s := &Store{
		pool:    pool,
		table:   pgx.Identifier(strings.Split(cfg.Table, ".")).Sanitize(),
		regName: cfg.Table,
		channel: cfg.Channel,
		connCfg: pc.ConnConfig.Copy(),
		connTO:  pc.ConnConfig.ConnectTimeout,
	}
	s.hub.Listen = s.listen
	s.prepareSQL()
	pctx, cancel := context.WithTimeout(ctx, s.connTO+time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store: connect %s: %w", redacted(pc.ConnConfig), err)
	}
	return s, nil
}

func redacted(c *pgx.ConnConfig) string {
	return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}

// Pool returns the store's connection pool (for tests and diagnostics).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close stops the listening connection and closes the pool. It does not
// release leases. It is safe to call more than once.
func (s *Store) Close() error {
	s.hub.Close()
	s.pool.Close()
	return nil
}

// CheckTTL returns an error wrapping driver.ErrInvalidTTL for a TTL that a
// store opened with c cannot keep (below 1 ms or above MaxTTL), without
// I/O.
func (c Config) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// CheckTTL implements driver.TTLChecker, so a Locker rejects a TTL this
// store cannot keep before any I/O.
func (s *Store) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// Init connects to the database (as Open does) and creates the leases table
// if it does not exist. It is idempotent and safe to run from many
// processes at once (a transaction-scoped advisory lock serialises the DDL;
// no lease ever uses advisory locks). The role needs CREATE on the schema;
// the stores that only use the table need SELECT, INSERT and UPDATE on it.
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
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('tenure schema ' || $1))`, s.regName); err != nil {
		return fmt.Errorf("postgres store: init: %w", err)
	}
	ddl := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	resource   text COLLATE "C" PRIMARY KEY,
	owner      text,
	token      bigint NOT NULL CHECK (token > 0),
	ttl_ms     bigint,
	expires_at timestamptz,
	granted_at timestamptz,
	CHECK ((owner IS NULL) = (expires_at IS NULL))
)`, s.table)
	if _, err := tx.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("postgres store: init: create table %s: %w", s.regName, err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`COMMENT ON TABLE %s IS 'tenure leases: one row per resource ever held; token never goes back (github.com/tenure-go/tenure/store/postgres)'`, s.table)); err != nil {
		return fmt.Errorf("postgres store: init: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres store: init: commit: %w", err)
	}
	return nil
}

// ms is a TTL in milliseconds as SQL sees it.
const ms = `($3::bigint * interval '1 millisecond')`

func (s *Store) prepareSQL() {
	t := s.table
	// Acquire: insert the first grant, or take over a free or expired row
	// with the next token, or renew the caller's own live lease with the same
	// token. The WHERE of ON CONFLICT is evaluated on the newest row version,
	// after the row is locked, so concurrent acquires serialise on the row.
	// Nothing is returned when another owner holds a live lease.
	s.sql.acquire = fmt.Sprintf(`INSERT INTO %[1]s AS l (resource, owner, token, ttl_ms, expires_at, granted_at)
VALUES ($1, $2, 1, $3, clock_timestamp() + %[2]s, clock_timestamp())
ON CONFLICT (resource) DO UPDATE SET
	token = CASE WHEN l.owner = excluded.owner AND l.expires_at > clock_timestamp() THEN l.token ELSE l.token + 1 END,
	granted_at = CASE WHEN l.owner = excluded.owner AND l.expires_at > clock_timestamp() THEN l.granted_at ELSE clock_timestamp() END,
	owner = excluded.owner,
	ttl_ms = excluded.ttl_ms,
	expires_at = clock_timestamp() + %[2]s
WHERE l.owner IS NULL OR l.expires_at <= clock_timestamp() OR l.owner = excluded.owner
RETURNING token`, t, ms)
	s.sql.holder = fmt.Sprintf(`SELECT owner, token, ttl_ms, floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
FROM %s WHERE resource = $1 AND owner IS NOT NULL AND expires_at > clock_timestamp()`, t)
	s.sql.renew = fmt.Sprintf(`UPDATE %[1]s SET ttl_ms = $4, expires_at = clock_timestamp() + ($4::bigint * interval '1 millisecond')
WHERE resource = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()`, t)
	// Release and its notification are one statement: NOTIFY is delivered
	// when, and only if, the release commits.
	s.sql.release = fmt.Sprintf(`WITH r AS (
	UPDATE %[1]s SET owner = NULL, ttl_ms = NULL, expires_at = NULL, granted_at = NULL
	WHERE resource = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
	RETURNING resource
)
SELECT pg_notify($4, resource) FROM r`, t)
	s.sql.list = fmt.Sprintf(`SELECT resource, owner, token, ttl_ms, floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
FROM %s WHERE resource >= $1 AND starts_with(resource, $1) AND owner IS NOT NULL AND expires_at > clock_timestamp()
ORDER BY resource`, t)
}

// failed wraps an error of a statement that was not applied, or of a read.
func (s *Store) failed(op, resource string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01": // undefined_table
			return fmt.Errorf("postgres store: %s %q: %w: %w", op, resource, ErrNoSchema, err)
		case "42703": // undefined_column: a table of the same name, not tenure's
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
	if errors.Is(err, errNoConn) {
		return err
	}
	if errors.As(err, &pgErr) || pgconn.SafeToRetry(err) {
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

// with runs f on a connection from the pool, again on another connection
// when the first one turned out to be dead before the statement ran (see
// retryable). Errors from taking a connection are definite: nothing was
// sent.
func (s *Store) with(ctx context.Context, op, resource string, f func(c *pgxpool.Conn) error) error {
	var err error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		var c *pgxpool.Conn
		c, err = s.pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("postgres store: %s %q: %w: %w", op, resource, errNoConn, err)
		}
		err = f(c)
		c.Release()
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// Acquire implements driver.Store. The TTL is rounded up to whole
// milliseconds; TTLs below 1 ms or above MaxTTL return ErrInvalidTTL before
// any I/O. It returns a *driver.HeldError naming the holder, with the time
// left on the database's clock, when another owner holds the resource.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	msTTL := driver.Milliseconds(ttl)
	var rec driver.Record
	err := s.with(ctx, "acquire", resource, func(c *pgxpool.Conn) error {
		// A held resource may be freed between the statement that found it
		// held and the read of its holder; then acquiring again is the right
		// answer.
		for attempt := 0; ; attempt++ {
			var token int64
			err := c.QueryRow(ctx, s.sql.acquire, resource, owner, msTTL).Scan(&token)
			if err == nil {
				rec = driver.Record{Resource: resource, Owner: owner, Token: uint64(token), TTL: ttl,
					Remaining: time.Duration(msTTL) * time.Millisecond}
				return nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			// Not applied: another owner holds a live lease.
			holder, err := s.get(ctx, c, resource)
			if err == nil {
				return &driver.HeldError{Holder: holder}
			}
			if !errors.Is(err, driver.ErrNotHeld) {
				return err
			}
			if attempt >= 10 {
				return fmt.Errorf("held, but the holder could not be read after %d attempts", attempt+1)
			}
		}
	})
	var held *driver.HeldError
	switch {
	case err == nil:
		return rec, nil
	case errors.As(err, &held):
		return driver.Record{}, held
	default:
		return driver.Record{}, s.writeErr("acquire", resource, err)
	}
}

// Renew implements driver.Store: it extends the live lease with this owner
// and token to ttl from now on the database's clock, or returns an error
// wrapping driver.ErrLeaseLost and changes nothing.
func (s *Store) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	var tag pgconn.CommandTag
	err := s.with(ctx, "renew", resource, func(c *pgxpool.Conn) (err error) {
		tag, err = c.Exec(ctx, s.sql.renew, resource, owner, int64(token), driver.Milliseconds(ttl))
		return err
	})
	if err != nil {
		return s.writeErr("renew", resource, err)
	}
	return changedOne(tag, "renew", resource)
}

// Release implements driver.Store: it frees the live lease with this owner
// and token and notifies waiters, or returns an error wrapping
// driver.ErrLeaseLost and changes nothing. The row and its token stay.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	var tag pgconn.CommandTag
	err := s.with(ctx, "release", resource, func(c *pgxpool.Conn) (err error) {
		tag, err = c.Exec(ctx, s.sql.release, resource, owner, int64(token), s.channel)
		return err
	})
	if err != nil {
		return s.writeErr("release", resource, err)
	}
	return changedOne(tag, "release", resource)
}

func changedOne(tag pgconn.CommandTag, op, resource string) error {
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("postgres store: %s %q: no live lease with this owner and token: %w", op, resource, driver.ErrLeaseLost)
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
	err := q.QueryRow(ctx, s.sql.holder, resource).Scan(&owner, &token, &ttlMs, &remainMs)
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.Record{}, fmt.Errorf("postgres store: %q: %w", resource, driver.ErrNotHeld)
	}
	if err != nil {
		return driver.Record{}, s.failed("get", resource, err)
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
	return rec, err
}

// List implements driver.Store: the live leases whose resource starts with
// prefix, in byte order of the resource.
func (s *Store) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.sql.list, prefix)
	if err != nil {
		return nil, s.failed("list", prefix, err)
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
			return nil, s.failed("list", prefix, err)
		}
		rec.Token = uint64(token)
		rec.TTL = time.Duration(ttlMs) * time.Millisecond
		rec.Remaining = time.Duration(max(remainMs, 0)) * time.Millisecond
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, s.failed("list", prefix, err)
	}
	return out, nil
}
