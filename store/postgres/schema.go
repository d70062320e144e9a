package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

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
