package mysql

import (
	"context"
	"database/sql"
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
	waits := slices.Clone(parts)
	waits[len(waits)-1] += "_waits"
	s.table, s.floor, s.waits, s.regName = quote(parts), quote(floor), quote(waits), table
}

// ddl is the schema: the leases table, the token table and its one row,
// and the reservations table (driver.Reserver), which programs of earlier
// versions ignore (they honour no reservations).
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
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n"+
			"  resource   VARBINARY(256) NOT NULL COMMENT 'the resource name, compared byte for byte',\n"+
			"  waiter     VARBINARY(256) NOT NULL COMMENT 'the blocking acquire it is reserved for',\n"+
			"  token      BIGINT UNSIGNED NOT NULL COMMENT 'the fencing token of the lease it waits behind: only the release of that lease is reserved',\n"+
			"  expires_at DATETIME(6) NOT NULL COMMENT 'UTC, on the database clock: when the reservation lapses',\n"+
			"  PRIMARY KEY (resource)\n"+
			") ENGINE=InnoDB COMMENT='tenure: freed resources of %s reserved for a waiting acquire (swept a minute after they lapse)'",
			s.waits, strings.ReplaceAll(s.table, "`", "")),
	}
}

// Init connects to the database (as Open does) and creates the leases table,
// its token table and its reservations table if they do not exist (on a
// schema of an earlier version, only the reservations table is new), and raises the token floor to
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
	if _, _, err := s.checkTables(ctx, c); err != nil {
		return fmt.Errorf("mysql store: init: %w", err)
	}
	for i, q := range s.ddl() {
		if _, err := c.ExecContext(ctx, q); err != nil {
			what := []string{"create table " + s.regName, "create its token table", "raise the token floor", "create its reservations table"}[i]
			return fmt.Errorf("mysql store: init: %s: %w", what, err)
		}
	}
	if _, _, err := s.checkTables(ctx, c); err != nil {
		return fmt.Errorf("mysql store: init: %w", err)
	}
	return nil
}

// column is what a column of tenure's tables must be, as
// information_schema.COLUMNS describes it.
type column struct {
	name      string
	types     []string // DATA_TYPE, one of these
	unsigned  bool     // COLUMN_TYPE says unsigned
	minLength int64    // CHARACTER_MAXIMUM_LENGTH, at least (binary strings)
	precision int64    // DATETIME_PRECISION, exactly (datetime)
	nullable  bool     // IS_NULLABLE: the store writes NULL into it
	ddl       string   // tenure's definition, for messages
}

// The columns of the leases table, of its reservations table and of its
// token table. What the
// statements rely on: resource and owner are binary strings (compared
// byte for byte, no collation, no trailing-space padding) long enough for
// every valid name and owner string; token holds every uint64; expires_at
// keeps microseconds (a DATETIME with fewer digits cuts every expiry short:
// MariaDB truncates, MySQL rounds); the columns that a release clears take
// NULL.
var (
	leaseColumns = []column{
		{name: "resource", types: []string{"varbinary"}, minLength: driver.MaxResourceLen, ddl: "VARBINARY(256) NOT NULL"},
		{name: "owner", types: []string{"varbinary"}, minLength: driver.MaxOwnerLen, nullable: true, ddl: "VARBINARY(256) NULL"},
		{name: "token", types: []string{"bigint"}, unsigned: true, ddl: "BIGINT UNSIGNED NOT NULL"},
		{name: "ttl_us", types: []string{"bigint"}, nullable: true, ddl: "BIGINT NULL"},
		{name: "expires_at", types: []string{"datetime"}, precision: 6, nullable: true, ddl: "DATETIME(6) NULL"},
		{name: "granted_at", types: []string{"datetime"}, precision: 6, nullable: true, ddl: "DATETIME(6) NULL"},
	}
	waitColumns = []column{
		{name: "resource", types: []string{"varbinary"}, minLength: driver.MaxResourceLen, ddl: "VARBINARY(256) NOT NULL"},
		{name: "waiter", types: []string{"varbinary"}, minLength: driver.MaxOwnerLen, ddl: "VARBINARY(256) NOT NULL"},
		{name: "token", types: []string{"bigint"}, unsigned: true, ddl: "BIGINT UNSIGNED NOT NULL"},
		{name: "expires_at", types: []string{"datetime"}, precision: 6, ddl: "DATETIME(6) NOT NULL"},
	}
	floorColumns = []column{
		{name: "id", types: []string{"tinyint", "smallint", "mediumint", "int", "bigint"}, ddl: "TINYINT UNSIGNED NOT NULL"},
		{name: "top", types: []string{"bigint"}, unsigned: true, ddl: "BIGINT UNSIGNED NOT NULL"},
	}
)

// columnInfo is a column as information_schema describes it.
type columnInfo struct {
	dataType, columnType, nullable string
	length, precision              sql.NullInt64
}

func (ci columnInfo) String() string {
	s := ci.columnType
	if ci.dataType == "datetime" && ci.precision.Valid && !strings.Contains(s, "(") {
		s = fmt.Sprintf("%s(%d)", s, ci.precision.Int64)
	}
	if strings.EqualFold(ci.nullable, "NO") {
		return s + " NOT NULL"
	}
	return s + " NULL"
}

// mismatch returns what is wrong with ci for want, or "".
func (want column) mismatch(ci columnInfo) string {
	switch {
	case !slices.Contains(want.types, strings.ToLower(ci.dataType)),
		want.unsigned && !strings.Contains(strings.ToLower(ci.columnType), "unsigned"),
		want.minLength > 0 && (!ci.length.Valid || ci.length.Int64 < want.minLength),
		want.precision > 0 && (!ci.precision.Valid || ci.precision.Int64 != want.precision),
		want.nullable && !strings.EqualFold(ci.nullable, "YES"):
		return fmt.Sprintf("column %s is %s, tenure's is %s", want.name, ci, want.ddl)
	}
	return ""
}

// checkTables checks the leases table and its token table where they
// exist: InnoDB (row locks, crash recovery, and the engine Galera
// replicates), tenure's columns with the
// types the statements rely on (see leaseColumns), and the primary key as
// the only unique key (the acquire's INSERT ... ON DUPLICATE KEY UPDATE
// finds a resource's row by it: without it every acquire inserts a row of
// its own and two owners hold a resource at once; with another unique
// key an acquire can update another resource's row), and the reservations
// table likewise where it exists (the same types; its primary key finds a
// resource's reservation). It returns an error wrapping
// driver.ErrNotStore, saying what differs, when one is not tenure's,
// whether the leases and token tables both exist, and whether the
// reservations table exists (a schema of an earlier version has none).
// Two round trips.
func (s *Store) checkTables(ctx context.Context, c *sql.Conn) (exist, reservations bool, err error) {
	tables := s.checkedTables()
	cols, err := queryColumns(ctx, c, tables)
	if err != nil {
		return false, false, err
	}
	keys, err := queryUniqueKeys(ctx, c, tables)
	if err != nil {
		return false, false, err
	}
	exist = true
	for i, t := range tables {
		t.take(cols, keys)
		if len(t.found) == 0 {
			// exist says both the leases and token tables (the first
			// two) exist; the reservations table may be missing alone.
			if i < 2 {
				exist = false
			}
			continue
		}
		if i == 2 {
			reservations = true
		}
		if err := t.check(); err != nil {
			return false, false, err
		}
	}
	return exist, reservations, nil
}

// checkedTable is one of tenure's tables as checkTables finds it.
type checkedTable struct {
	quoted, db, name string
	cols             []column
	key              string
	found            map[string]columnInfo
	engine           string
	unique           map[string][]string // unique index -> its columns
}

// checkedTables returns the tables checkTables checks, in this order: the
// leases table, its token table and its reservations table.
func (s *Store) checkedTables() []*checkedTable {
	tables := []*checkedTable{{quoted: s.table, cols: leaseColumns, key: "resource"}, {quoted: s.floor, cols: floorColumns, key: "id"},
		{quoted: s.waits, cols: waitColumns, key: "resource"}}
	for _, t := range tables {
		t.name = strings.Trim(t.quoted, "`")
		if d, n, ok := strings.Cut(t.quoted, "."); ok {
			t.db, t.name = strings.Trim(d, "`"), strings.Trim(n, "`")
		}
		t.found, t.unique = map[string]columnInfo{}, map[string][]string{}
	}
	return tables
}

// tableArgs returns the database and name of each of the three tables, the
// arguments of the information_schema queries.
func tableArgs(tables []*checkedTable) []any {
	in := func(t *checkedTable) []any { return []any{t.db, t.name} }
	return slices.Concat(in(tables[0]), in(tables[1]), in(tables[2]))
}

// schemaColumn is a row of information_schema.COLUMNS with its table's engine.
type schemaColumn struct {
	table, engine, name string
	info                columnInfo
}

// queryColumns reads the columns of the three tables, and their engines.
func queryColumns(ctx context.Context, c *sql.Conn, tables []*checkedTable) ([]schemaColumn, error) {
	rows, err := c.QueryContext(ctx, `SELECT c.TABLE_NAME, COALESCE(t.ENGINE, ''), c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE, c.IS_NULLABLE,
	c.CHARACTER_MAXIMUM_LENGTH, c.DATETIME_PRECISION
FROM information_schema.COLUMNS c JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME
WHERE (c.TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND c.TABLE_NAME = ?)
   OR (c.TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND c.TABLE_NAME = ?)
   OR (c.TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND c.TABLE_NAME = ?)`, tableArgs(tables)...)
	if err != nil {
		return nil, err
	}
	var cols []schemaColumn
	for rows.Next() {
		var r schemaColumn
		if err := rows.Scan(&r.table, &r.engine, &r.name, &r.info.dataType, &r.info.columnType, &r.info.nullable, &r.info.length, &r.info.precision); err != nil {
			rows.Close()
			return nil, err
		}
		cols = append(cols, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return cols, nil
}

// schemaKey is a column of a unique index, from information_schema.STATISTICS.
type schemaKey struct{ table, index, column string }

// queryUniqueKeys reads the columns of the unique indexes of the three
// tables, each index's columns in their order in it.
func queryUniqueKeys(ctx context.Context, c *sql.Conn, tables []*checkedTable) ([]schemaKey, error) {
	rows, err := c.QueryContext(ctx, `SELECT TABLE_NAME, INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
WHERE NON_UNIQUE = 0 AND ((TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?)
   OR (TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?)
   OR (TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?))
ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX`, tableArgs(tables)...)
	if err != nil {
		return nil, err
	}
	var keys []schemaKey
	for rows.Next() {
		var k schemaKey
		if err := rows.Scan(&k.table, &k.index, &k.column); err != nil {
			rows.Close()
			return nil, err
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return keys, nil
}

// take keeps the columns, engine and unique keys of t from what the queries
// returned. information_schema compares names without regard to case: a
// row counts only for the table of exactly this name, unless the server
// folds names itself (lower_case_table_names) and reports one table.
func (t *checkedTable) take(cols []schemaColumn, keys []schemaKey) {
	names := map[string]int{}
	for _, r := range cols {
		if strings.EqualFold(r.table, t.name) {
			names[r.table]++
		}
	}
	name := t.name
	if _, ok := names[name]; !ok && len(names) == 1 {
		for n := range names {
			name = n
		}
	}
	for _, r := range cols {
		if r.table == name {
			t.engine = r.engine
			t.found[strings.ToLower(r.name)] = r.info
		}
	}
	for _, k := range keys {
		if k.table == name {
			t.unique[k.index] = append(t.unique[k.index], strings.ToLower(k.column))
		}
	}
}

// check returns an error wrapping driver.ErrNotStore when the table t,
// which exists, is not tenure's: its engine, then its column names, then
// their types, then its unique keys.
func (t *checkedTable) check() error {
	what := strings.ReplaceAll(t.quoted, "`", "")
	if !strings.EqualFold(t.engine, "InnoDB") {
		return fmt.Errorf("the table %s exists with engine %s, not InnoDB: it is not tenure's: %w", what, t.engine, driver.ErrNotStore)
	}
	var have, want []string
	for n := range t.found {
		have = append(have, n)
	}
	for _, col := range t.cols {
		want = append(want, col.name)
	}
	slices.Sort(have)
	slices.Sort(want)
	if !slices.Equal(have, want) {
		return fmt.Errorf("the table %s exists with the columns (%s), not tenure's (%s): %w",
			what, strings.Join(have, ", "), strings.Join(want, ", "), driver.ErrNotStore)
	}
	for _, col := range t.cols {
		if m := col.mismatch(t.found[col.name]); m != "" {
			return fmt.Errorf("the table %s is not tenure's: %s: %w", what, m, driver.ErrNotStore)
		}
	}
	if len(t.unique) != 1 || !slices.Equal(t.unique["PRIMARY"], []string{t.key}) {
		return fmt.Errorf("the table %s is not tenure's: its unique keys are %s; tenure's table has one, the primary key (%s): %w",
			what, t.uniqueKeys(), t.key, driver.ErrNotStore)
	}
	return nil
}

// uniqueKeys describes t's unique keys for a message, sorted, or "none".
func (t *checkedTable) uniqueKeys() string {
	var ks []string
	for idx, cs := range t.unique {
		ks = append(ks, fmt.Sprintf("%s (%s)", idx, strings.Join(cs, ", ")))
	}
	slices.Sort(ks)
	if len(ks) == 0 {
		ks = []string{"none"}
	}
	return strings.Join(ks, ", ")
}
