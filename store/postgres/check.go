package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-go/tenure/driver"
)

// columnTypes are the types that the leases table's columns must have, as
// format_type names them. What the statements rely on: expiries are
// instants (timestamptz, not a timestamp without time zone, which each
// session would write and read in its own TimeZone, and which repeats an
// hour when daylight saving time ends) kept to the microsecond (fewer
// digits round every expiry, up to half a second early); names and owner
// strings are text compared byte for byte (a nondeterministic collation
// makes "a" and "A" one resource); tokens and TTLs are bigint.
var columnTypes = map[string][]string{
	"resource":   {"text"},
	"owner":      {"text"},
	"token":      {"bigint"},
	"ttl_ms":     {"bigint"},
	"expires_at": {"timestamp with time zone", "timestamp(6) with time zone"},
	"granted_at": {"timestamp with time zone", "timestamp(6) with time zone"},
	"waiters":    {"boolean"},
}

// checkTable returns an error wrapping driver.ErrNotStore, saying what
// differs, when the leases table exists and one of tenure's columns in it
// has another type, or a collation that is not deterministic; and whether
// the table exists. A column that is missing is left to the statements
// that use it (ErrNoSchema for an older tenure's table, ErrNotStore for
// another). One round trip.
func (s *Store) checkTable(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) (exists bool, err error) {
	rows, err := q.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), coalesce(c.collisdeterministic, true)
FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation
WHERE a.attrelid = to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped`, pgx.QueryExecModeExec, s.table)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var (
			name, typ     string
			deterministic bool
		)
		if err := rows.Scan(&name, &typ, &deterministic); err != nil {
			return false, err
		}
		exists = true
		want, ok := columnTypes[name]
		switch {
		case !ok:
		case !slices.Contains(want, typ):
			bad = append(bad, fmt.Sprintf("column %s is %s, tenure's is %s", name, typ, want[0]))
		case !deterministic:
			bad = append(bad, fmt.Sprintf("column %s has a nondeterministic collation, tenure's compares it byte for byte (COLLATE \"C\")", name))
		}
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return exists, fmt.Errorf("the table %s is not tenure's: %s: %w", s.regName, strings.Join(bad, "; "), driver.ErrNotStore)
	}
	return exists, nil
}

// checkErr marks an error of the table check that runs before an
// operation's first statement: nothing of the operation was sent.
type checkErr struct{ err error }

func (e checkErr) Error() string { return "checking the table: " + e.err.Error() }
func (e checkErr) Unwrap() error { return e.err }

// checkSchema runs checkTable on c until the table has been found once
// and found tenure's.
func (s *Store) checkSchema(ctx context.Context, c *pgxpool.Conn) error {
	if s.schemaOK.Load() {
		return nil
	}
	exists, err := s.checkTable(ctx, c)
	switch {
	case errors.Is(err, driver.ErrNotStore):
		return err
	case err != nil:
		return checkErr{err}
	case exists:
		s.schemaOK.Store(true)
	}
	return nil
}
