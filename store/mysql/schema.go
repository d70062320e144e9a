package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tenure-go/tenure/driver"
)

// Schema returns the statements that Init runs to create the tables of a
// store configured by cfg (its Table), for operators who create schemas by
// hand. It does no I/O.
func Schema(cfg Config) (string, error) {
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if !identRE.MatchString(cfg.Table) {
		return "", fmt.Errorf("mysql store: table name %q: use letters, digits and underscores (at most 57), optionally database.table", cfg.Table)
	}
	s := &Store{}
	s.setNames(cfg.Table)
	return strings.Join(s.ddl(), ";\n\n") + ";\n", nil
}

// setNames sets the quoted names of the leases table and its token table.
func (s *Store) setNames(table string) {
	parts := strings.Split(table, ".")
	quote := func(p []string) string {
		q := make([]string, len(p))
		for i, s := range p {
			q[i] = "`" + s + "`"
		}
		return strings.Join(q, ".")
	}
	floor := slices.Clone(parts)
	floor[len(floor)-1] += "_tokens"
	s.table, s.floor, s.regName = quote(parts), quote(floor), table
}

// ddl is the schema: the leases table, the token table and its one row.
func (s *Store) ddl() []string {
	return []string{
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n"+
			"  resource   VARBINARY(256) NOT NULL COMMENT 'the resource name, compared byte for byte',\n"+
			"  owner      VARBINARY(256) NULL COMMENT 'the owner string of the grant; NULL when released',\n"+
			"  token      BIGINT UNSIGNED NOT NULL COMMENT 'the fencing token of the grant (the last one, when released)',\n"+
			"  ttl_us     BIGINT NULL COMMENT 'the TTL last written, microseconds',\n"+
			"  expires_at DATETIME(6) NULL COMMENT 'UTC, on the database clock',\n"+
			"  granted_at DATETIME(6) NULL COMMENT 'UTC: when it was granted, or released',\n"+
			"  PRIMARY KEY (resource)\n"+
			") ENGINE=InnoDB COMMENT='tenure leases: one row per resource in use (swept a minute after release or expiry); "+
			"fencing tokens floored by %s and the clock (github.com/tenure-go/tenure/store/mysql)'",
			s.table, strings.ReplaceAll(s.floor, "`", "")),
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n"+
			"  id  TINYINT UNSIGNED NOT NULL,\n"+
			"  top BIGINT UNSIGNED NOT NULL COMMENT 'every fencing token granted from now on is above it: never set it lower',\n"+
			"  PRIMARY KEY (id)\n"+
			") ENGINE=InnoDB COMMENT='tenure: the floor of the fencing tokens of %s'",
			s.floor, strings.ReplaceAll(s.table, "`", "")),
		fmt.Sprintf("INSERT INTO %s (id, top) SELECT 1, COALESCE(MAX(token), 0) FROM %s\n"+
			"  ON DUPLICATE KEY UPDATE top = GREATEST(top, (SELECT COALESCE(MAX(token), 0) FROM %s))", s.floor, s.table, s.table),
	}
}

// columns are the leases table's columns, as Init checks them on a table
// that exists.
var columns = []string{"expires_at", "granted_at", "owner", "resource", "token", "ttl_us"}

// Init connects to the database (as Open does) and creates the leases table
// and its token table if they do not exist, and raises the token floor to
// the largest token in the leases table (so that a table whose token table
// was lost goes on above its own tokens). It is idempotent and safe to run
// from many processes at once. A table of the same name that is not
// tenure's (other columns, or not InnoDB) is refused with an error wrapping
// driver.ErrNotStore and left alone. The user needs CREATE on the database;
// the stores that only use the tables need SELECT, INSERT, UPDATE and
// DELETE on both.
func Init(ctx context.Context, cfg Config) error {
	s, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.init(ctx)
}

func (s *Store) init(ctx context.Context) error {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mysql store: init: %w", err)
	}
	defer c.Close()
	// The DDL is idempotent; the check of an existing table comes first
	// so that another application's table is never touched.
	if err := s.checkTables(ctx, c); err != nil {
		return err
	}
	for i, q := range s.ddl() {
		if _, err := c.ExecContext(ctx, q); err != nil {
			what := []string{"create table " + s.regName, "create its token table", "raise the token floor"}[i]
			return fmt.Errorf("mysql store: init: %s: %w", what, err)
		}
	}
	return s.checkTables(ctx, c)
}

// checkTables returns an error wrapping driver.ErrNotStore when the leases
// table or its token table exists but is not tenure's.
func (s *Store) checkTables(ctx context.Context, c *sql.Conn) error {
	for _, t := range []struct {
		quoted string
		cols   []string
	}{{s.table, columns}, {s.floor, []string{"id", "top"}}} {
		db, name := "", strings.Trim(t.quoted, "`")
		if d, n, ok := strings.Cut(t.quoted, "."); ok {
			db, name = strings.Trim(d, "`"), strings.Trim(n, "`")
		}
		var engine sql.NullString
		err := c.QueryRowContext(ctx, `SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?`,
			db, name).Scan(&engine)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return fmt.Errorf("mysql store: init: %w", err)
		}
		if !strings.EqualFold(engine.String, "InnoDB") {
			return fmt.Errorf("mysql store: init: the table %s exists with engine %s, not InnoDB: it is not tenure's: %w",
				strings.ReplaceAll(t.quoted, "`", ""), engine.String, driver.ErrNotStore)
		}
		rows, err := c.QueryContext(ctx, `SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?`,
			db, name)
		if err != nil {
			return fmt.Errorf("mysql store: init: %w", err)
		}
		var have []string
		for rows.Next() {
			var col string
			if err := rows.Scan(&col); err != nil {
				rows.Close()
				return fmt.Errorf("mysql store: init: %w", err)
			}
			have = append(have, strings.ToLower(col))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("mysql store: init: %w", err)
		}
		slices.Sort(have)
		if !slices.Equal(have, t.cols) {
			return fmt.Errorf("mysql store: init: the table %s exists with the columns (%s), not tenure's (%s): %w",
				strings.ReplaceAll(t.quoted, "`", ""), strings.Join(have, ", "), strings.Join(t.cols, ", "), driver.ErrNotStore)
		}
	}
	return nil
}
