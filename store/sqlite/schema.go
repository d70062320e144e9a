package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tenure-go/tenure/driver"
)

// schemaVersion is the format of the file this package writes: 2 since the
// fencing tokens come from one counter per file (tenure_meta) and the rows
// of released and expired leases are deleted. Version 1 (no tenure_meta)
// kept a token per row forever; Open upgrades it.
const schemaVersion = 2

// The tables. tenure_leases is the same table as in version 1, so that a
// program of an older version that has the file open keeps reading it; in
// version 2 a row exists only while its lease may be live.
const (
	createLeases = `CREATE TABLE IF NOT EXISTS tenure_leases (
	resource   TEXT PRIMARY KEY NOT NULL,
	owner      TEXT,              -- the holder's owner string
	token      INTEGER NOT NULL,  -- the lease's fencing token
	ttl_ms     INTEGER,           -- the TTL last written, in milliseconds
	epoch      TEXT,              -- boot id of the clock that expires_ms counts on
	expires_ms INTEGER,           -- CLOCK_BOOTTIME milliseconds at which the lease expires
	granted_at TEXT               -- wall-clock time of the grant, for display only
) WITHOUT ROWID`
	// createWaiting: one reservation per resource (driver.Reserver), live
	// while expires_ms is ahead of the clock of its epoch. Programs of
	// versions without it ignore it (they do not honour reservations).
	createWaiting = `CREATE TABLE IF NOT EXISTS tenure_waiting (
	resource   TEXT PRIMARY KEY NOT NULL,
	waiter     TEXT NOT NULL,     -- the blocking acquire that reserved it
	epoch      TEXT NOT NULL,     -- boot id of the clock that expires_ms counts on
	expires_ms INTEGER NOT NULL   -- CLOCK_BOOTTIME milliseconds at which the reservation lapses
) WITHOUT ROWID`
	createMeta = `CREATE TABLE IF NOT EXISTS tenure_meta (
	name  TEXT PRIMARY KEY NOT NULL, -- 'schema': the file's format; 'token': the last fencing token granted
	value INTEGER
) WITHOUT ROWID`
)

// The triggers keep the token floor against other writers: a program of an
// older version (which computed a token from the row alone, and would start
// again at 1 on a name whose row was deleted) and tools. A grant must carry
// a token above the counter, and the counter never goes back or away.
var triggers = []string{
	`CREATE TRIGGER IF NOT EXISTS tenure_token_insert BEFORE INSERT ON tenure_leases
	WHEN NEW.token <= (SELECT value FROM tenure_meta WHERE name = 'token' AND typeof(value) = 'integer')
	BEGIN SELECT RAISE(ABORT, '` + errTokenBelowCounter + `'); END`,
	`CREATE TRIGGER IF NOT EXISTS tenure_token_update BEFORE UPDATE OF token ON tenure_leases
	WHEN NEW.token IS NOT OLD.token
		AND NEW.token <= (SELECT value FROM tenure_meta WHERE name = 'token' AND typeof(value) = 'integer')
	BEGIN SELECT RAISE(ABORT, '` + errTokenBelowCounter + `'); END`,
	`CREATE TRIGGER IF NOT EXISTS tenure_counter_update BEFORE UPDATE ON tenure_meta
	WHEN OLD.name = 'token' AND typeof(OLD.value) = 'integer'
		AND (NEW.name IS NOT 'token' OR typeof(NEW.value) <> 'integer' OR NEW.value < OLD.value)
	BEGIN SELECT RAISE(ABORT, '` + errCounterBack + `'); END`,
	`CREATE TRIGGER IF NOT EXISTS tenure_counter_delete BEFORE DELETE ON tenure_meta
	WHEN OLD.name IN ('token', 'schema')
	BEGIN SELECT RAISE(ABORT, '` + errCounterBack + `'); END`,
}

const (
	errTokenBelowCounter = `tenure: a fencing token must be above every token granted before (the counter in tenure_meta); ` +
		`programs of a tenure version that keeps tokens per row cannot grant leases in this file: upgrade them`
	errCounterBack = `tenure: the fencing token counter and the schema version in tenure_meta never go back and are never deleted`
)

// columns are the columns of tenure_leases, in order; metaColumns those of
// tenure_meta.
var (
	columns     = []string{"resource", "owner", "token", "ttl_ms", "epoch", "expires_ms", "granted_at"}
	metaColumns = []string{"name", "value"}
)

// tableColumns returns the columns of table, in order; none when it does
// not exist.
func tableColumns(ctx context.Context, q querier, path, table string) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, table)
	if err != nil {
		if code(err) == sqliteNotADB {
			return nil, notStore(path, "is not a SQLite database")
		}
		return nil, fmt.Errorf("sqlite store: read the schema of %s: %w", path, err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("sqlite store: read the schema of %s: %w", path, err)
		}
		got = append(got, name)
	}
	if err := rows.Err(); err != nil {
		if code(err) == sqliteNotADB {
			return nil, notStore(path, "is not a SQLite database")
		}
		return nil, fmt.Errorf("sqlite store: read the schema of %s: %w", path, err)
	}
	return got, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readSchema checks that the file holds tenure's tables and returns its
// format version: 0 when there is no tenure_meta (a file of version 1, or
// one whose tables are not made yet), else the version recorded there.
func readSchema(ctx context.Context, q querier, path string) (int64, error) {
	got, err := tableColumns(ctx, q, path, "tenure_leases")
	if err != nil {
		return 0, err
	}
	switch {
	case len(got) == 0:
		return 0, notStore(path, "is a SQLite database without tenure's table tenure_leases")
	case !slices.Equal(got, columns):
		return 0, notStore(path, fmt.Sprintf("has a table tenure_leases that is not tenure's (columns %s)", strings.Join(got, ", ")))
	}
	meta, err := tableColumns(ctx, q, path, "tenure_meta")
	if err != nil {
		return 0, err
	}
	switch {
	case len(meta) == 0:
		return 0, nil
	case !slices.Equal(meta, metaColumns):
		return 0, notStore(path, fmt.Sprintf("has a table tenure_meta that is not tenure's (columns %s)", strings.Join(meta, ", ")))
	}
	var v any
	err = q.QueryRowContext(ctx, `SELECT value FROM tenure_meta WHERE name = 'schema'`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite store: read the schema version of %s: %w", path, err)
	}
	n, ok := v.(int64)
	if !ok || n < 1 {
		return 0, fmt.Errorf("sqlite store: %s: the schema version in tenure_meta is %v, not a version number; "+
			"set it back (UPDATE tenure_meta SET value = %d WHERE name = 'schema') or remove the row: %w", path, v, schemaVersion, driver.ErrNotStore)
	}
	if n > schemaVersion {
		return 0, fmt.Errorf("sqlite store: %s is in the format of a newer tenure version (schema %d; this one knows %d): upgrade this program", path, n, schemaVersion)
	}
	return n, nil
}

// setup creates the tables when they are missing, upgrades a file of an
// older format, and (re)creates the triggers, in one transaction on conn.
func setup(ctx context.Context, conn *sql.Conn, path string, epoch string, nowMs int64) (err error) {
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			conn.ExecContext(context.Background(), `ROLLBACK`)
		}
	}()
	for _, ddl := range []string{createLeases, createMeta, createWaiting} {
		if _, err := conn.ExecContext(ctx, ddl); err != nil {
			return err
		}
	}
	version, err := readSchema(ctx, conn, path)
	if err != nil {
		return err
	}
	if version < schemaVersion {
		if err := migrate(ctx, conn, path, epoch, nowMs); err != nil {
			return err
		}
	}
	for _, ddl := range triggers {
		if _, err := conn.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("sqlite store: create the triggers in %s: %w", path, err)
		}
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		return err
	}
	return nil
}

// migrate turns a file of version 1 (a token kept per row, free rows kept
// forever) into version 2: the counter starts at the largest token stored,
// so the next grant is above every token granted before, and the rows that
// hold no live lease are deleted. Live leases stay as they are; their
// holders (of any version) keep renewing them.
func migrate(ctx context.Context, conn *sql.Conn, path, epoch string, nowMs int64) error {
	fail := func(err error) error {
		return fmt.Errorf("sqlite store: upgrade %s to schema %d: %w", path, schemaVersion, err)
	}
	var stored sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT max(token) FROM tenure_leases WHERE typeof(token) = 'integer'`).Scan(&stored); err != nil {
		return fail(err)
	}
	var counter any
	err := conn.QueryRowContext(ctx, `SELECT value FROM tenure_meta WHERE name = 'token'`).Scan(&counter)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fail(err)
	}
	floor := max(stored.Int64, 0)
	if c, ok := counter.(int64); ok {
		floor = max(floor, c)
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO tenure_meta (name, value) VALUES ('token', ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, floor); err != nil {
		return fail(err)
	}
	if _, err := conn.ExecContext(ctx, `DELETE FROM tenure_leases WHERE NOT `+liveSQL, epoch, nowMs); err != nil {
		return fail(err)
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO tenure_meta (name, value) VALUES ('schema', ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, schemaVersion); err != nil {
		return fail(err)
	}
	return nil
}

// Init creates the database file and its tables if they do not exist, or
// upgrades a file of an earlier tenure version, as Open does, and closes
// it: for programs that prepare a store before its users run.
func Init(ctx context.Context, cfg Config) error {
	cfg.MustExist = false
	s, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	return s.Close()
}
