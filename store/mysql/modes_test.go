package mysql_test

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/mysql"
	"github.com/tenure-go/tenure/store/storetest"
)

// strictModes is every sql_mode flag of MySQL 8 and MariaDB that changes
// how a statement is parsed or evaluated, short of the compatibility modes
// that change the SQL dialect as a whole (ORACLE, MSSQL, DB2, ...):
// SIMULTANEOUS_ASSIGNMENT (MariaDB: the assignments of an UPDATE see the
// old row), EMPTY_STRING_IS_NULL (MariaDB: ” is NULL), ANSI_QUOTES,
// NO_BACKSLASH_ESCAPES, PIPES_AS_CONCAT, HIGH_NOT_PRECEDENCE, IGNORE_SPACE,
// ONLY_FULL_GROUP_BY, the strict modes and the date checks.
const strictModes = "REAL_AS_FLOAT,PIPES_AS_CONCAT,ANSI_QUOTES,IGNORE_SPACE,ONLY_FULL_GROUP_BY,NO_UNSIGNED_SUBTRACTION," +
	"NO_DIR_IN_CREATE,NO_AUTO_VALUE_ON_ZERO,NO_BACKSLASH_ESCAPES,STRICT_TRANS_TABLES,STRICT_ALL_TABLES,NO_ZERO_IN_DATE," +
	"NO_ZERO_DATE,ALLOW_INVALID_DATES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION,PAD_CHAR_TO_FULL_LENGTH," +
	"HIGH_NOT_PRECEDENCE,SIMULTANEOUS_ASSIGNMENT,EMPTY_STRING_IS_NULL"

// session returns a configuration change that sets session variables on
// every connection of a store (go-sql-driver sends SET for them).
func session(vars map[string]string) func(*mysql.Config) {
	return func(c *mysql.Config) {
		c.MySQL.Params = map[string]string{}
		for k, v := range vars {
			c.MySQL.Params[k] = v
		}
	}
}

// isolationVar is the server's name of the session's isolation level:
// transaction_isolation (MySQL 8, MariaDB 11.1) or tx_isolation.
func isolationVar(t *testing.T) string {
	t.Helper()
	s := open(t)
	var v sql.NullString
	if err := s.DB().QueryRowContext(testserver.Ctx(t), "SELECT @@session.transaction_isolation").Scan(&v); err == nil {
		return "transaction_isolation"
	}
	return "tx_isolation"
}

// TestConformanceModes runs the conformance suite with the strictest
// sql_mode, and at READ COMMITTED (the default is REPEATABLE READ): the
// statements mean the same in every mode, and no decision rests on a
// snapshot. Init runs in the strict mode too, on a table of its own.
func TestConformanceModes(t *testing.T) {
	dsn(t)
	iso := isolationVar(t)
	for _, m := range []struct {
		name string
		vars map[string]string
	}{
		{"StrictSQLMode", map[string]string{"sql_mode": "'" + strictModes + "'"}},
		{"ReadCommitted", map[string]string{iso: "'READ-COMMITTED'"}},
		{"ReadCommittedStrict", map[string]string{iso: "'READ-COMMITTED'", "sql_mode": "'" + strictModes + "'"}},
	} {
		t.Run(m.name, func(t *testing.T) {
			// Each mode on its own table, made by Init in that mode.
			name := fmt.Sprintf("tenure_mode_%d", time.Now().UnixNano())
			mod := []func(*mysql.Config){session(m.vars), func(c *mysql.Config) { c.Table = name }}
			ctx := testserver.Ctx(t)
			if err := mysql.Init(ctx, config(t, mod...)); err != nil {
				t.Fatal(err)
			}
			admin := open(t)
			t.Cleanup(func() {
				_, _ = admin.DB().ExecContext(context.Background(), "DROP TABLE IF EXISTS "+name+", "+name+"_tokens, "+name+"_waits")
			})
			s := open(t, mod...)
			var mode string
			if err := s.DB().QueryRowContext(ctx, "SELECT @@session.sql_mode").Scan(&mode); err != nil {
				t.Fatal(err)
			}
			t.Logf("sql_mode %s", mode)
			c := cfg
			c.New = func(t *testing.T) driver.Store { return open(t, mod...) }
			storetest.Run(t, c)
			// Sweep in the mode, and List with the empty prefix, which
			// EMPTY_STRING_IS_NULL turns into NULL.
			if _, err := s.Sweep(ctx); err != nil {
				t.Fatalf("Sweep: %v", err)
			}
			o := owner(t, "a")
			rec := mustAcquire(ctx, t, s, "listed", o)
			recs, err := s.List(ctx, "")
			if err != nil || !slices.ContainsFunc(recs, func(r driver.Record) bool { return r.Resource == "listed" && r.Token == rec.Token }) {
				t.Fatalf("List(\"\") = %+v, %v; want the lease on listed among them", recs, err)
			}
			// Names that need escaping, or that a collation would fold:
			// each is its own resource, byte for byte.
			names := []string{"q/it's", `q/back\slash`, "q/50%_x", "q/ü—😀", "q/a", "q/a ", "q/A", `q/"dq"`}
			for _, n := range names {
				rec := mustAcquire(ctx, t, s, n, o)
				if got, err := s.Get(ctx, n); err != nil || got.Resource != n || got.Token != rec.Token {
					t.Fatalf("Get(%q) = %+v, %v", n, got, err)
				}
			}
			recs, err = s.List(ctx, "q/")
			if err != nil || len(recs) != len(names) {
				t.Fatalf("List(q/) = %+v, %v; want %d leases", recs, err, len(names))
			}
			if recs, err := s.List(ctx, "q/5"); err != nil || len(recs) != 1 || recs[0].Resource != "q/50%_x" {
				t.Fatalf("List(q/5) = %+v, %v", recs, err)
			}
		})
	}
}

// counter counts what a store sends to the server: statements (each one
// round trip, since the store interpolates its arguments) and prepares
// (which would add one).
type counter struct {
	statements, prepares atomic.Int64
}

func (c *counter) wrap(conn sqldriver.Connector) sqldriver.Connector {
	return countingConnector{conn, c}
}

type countingConnector struct {
	sqldriver.Connector
	c *counter
}

func (cc countingConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	conn, err := cc.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: cc.c}, nil
}

type countingConn struct {
	sqldriver.Conn
	c *counter
}

func (c *countingConn) Prepare(q string) (sqldriver.Stmt, error) {
	c.c.prepares.Add(1)
	return c.Conn.Prepare(q)
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	c.c.statements.Add(1)
	return c.Conn.(sqldriver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	c.c.statements.Add(1)
	return c.Conn.(sqldriver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	return c.Conn.(sqldriver.SessionResetter).ResetSession(ctx)
}

func (c *countingConn) IsValid() bool { return c.Conn.(sqldriver.Validator).IsValid() }

// TestRoundTrips counts the statements each operation sends (each one a
// round trip: the arguments are interpolated, nothing is prepared): one
// for a grant, a renewal, a keep, a release, a Get, a List and a renewal
// of many leases; two when the statement did not apply and the holder is
// read.
func TestRoundTrips(t *testing.T) {
	ctx := testserver.Ctx(t)
	var n counter
	s := open(t, func(c *mysql.Config) { c.WrapConnector = n.wrap; c.SweepInterval = -1 })
	r := testserver.Resource(t)
	a, b := owner(t, "a"), owner(t, "b")
	_, _ = s.Get(ctx, r) // a connection, its session set up
	count := func(what string, want int64, op func() error) {
		t.Helper()
		before, prep := n.statements.Load(), n.prepares.Load()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got := n.statements.Load() - before
		t.Logf("%-34s %d statement(s)", what, got)
		if got != want || n.prepares.Load() != prep {
			t.Errorf("%s: %d statements (%d prepares); want %d and none", what, got, n.prepares.Load()-prep, want)
		}
	}
	var rec driver.Record
	count("Acquire (granted)", 1, func() (err error) { rec, err = s.Acquire(ctx, r, a, time.Minute); return err })
	count("Acquire (the same grant again)", 1, func() error { _, err := s.Acquire(ctx, r, a, time.Minute); return err })
	count("Acquire (held by another owner)", 2, func() error {
		if _, err := s.Acquire(ctx, r, b, time.Minute); !errors.Is(err, driver.ErrHeld) {
			return fmt.Errorf("%w; want ErrHeld", err)
		}
		return nil
	})
	count("Renew", 1, func() error { return s.Renew(ctx, r, a, rec.Token, time.Minute) })
	count("Renew (not the holder)", 2, func() error {
		if err := s.Renew(ctx, r, b, rec.Token, time.Minute); !errors.Is(err, driver.ErrLeaseLost) {
			return fmt.Errorf("%w; want ErrLeaseLost", err)
		}
		return nil
	})
	count("Get", 1, func() error { _, err := s.Get(ctx, r); return err })
	count("List", 1, func() error { _, err := s.List(ctx, r); return err })
	var leases []driver.Renewal
	for i := range 50 {
		ri := fmt.Sprintf("%s/%d", r, i)
		li, err := s.Acquire(ctx, ri, a, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, driver.Renewal{Resource: ri, Owner: a, Token: li.Token, TTL: time.Minute})
	}
	count("RenewBatch (50 leases)", 1, func() error { return errors.Join(s.RenewBatch(ctx, leases)...) })
	count("Keep", 1, func() error { return s.Keep(ctx, r, a, rec.Token, a+"k", time.Minute) })
	k, err := s.Get(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := s.Acquire(ctx, r+"/rel", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	count("Release", 1, func() error { return s.Release(ctx, r+"/rel", a, rel.Token) })
	if err := s.Release(ctx, r, a+"k", k.Token); err != nil {
		t.Fatal(err)
	}
}

// TestRenewBatchSettlesEachLease: a batch with live leases, a lost one
// (taken by another owner), one whose row is gone, a duplicate and an
// invalid one: each gets its own answer, in one statement plus one read.
func TestRenewBatchSettlesEachLease(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg)
	a, b := owner(t, "a"), owner(t, "b")
	l1 := mustAcquire(ctx, t, s, "one", a)
	l2 := mustAcquire(ctx, t, s, "two", a)
	gone := mustAcquire(ctx, t, s, "gone", a)
	taken, err := s.Acquire(ctx, "taken", a, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	other := mustAcquire(ctx, t, s, "taken", b)
	tb.sql(t, s, `DELETE FROM %[1]s WHERE resource = 'gone'`)
	errs := s.RenewBatch(ctx, []driver.Renewal{
		{Resource: "one", Owner: a, Token: l1.Token, TTL: time.Minute},
		{Resource: "taken", Owner: a, Token: taken.Token, TTL: time.Minute},
		{Resource: "gone", Owner: a, Token: gone.Token, TTL: time.Minute},
		{Resource: "two", Owner: a, Token: l2.Token, TTL: 2 * time.Minute},
		{Resource: "one", Owner: a, Token: l1.Token, TTL: time.Minute},
		{Resource: "", Owner: a, Token: 1, TTL: time.Minute},
	})
	if errs[0] != nil || errs[3] != nil || errs[4] != nil {
		t.Fatalf("live leases: %v, %v, %v", errs[0], errs[3], errs[4])
	}
	lostTo(t, "the taken lease", errs[1], b, other.Token)
	lostTo(t, "the lease whose row is gone", errs[2], "", 0)
	if !errors.Is(errs[5], driver.ErrInvalidResource) {
		t.Fatalf("the invalid lease: %v", errs[5])
	}
	if rec, err := s.Get(ctx, "two"); err != nil || rec.TTL != 2*time.Minute || rec.Remaining < time.Minute {
		t.Fatalf("Get(two) after the batch: %+v, %v; want it renewed for 2m", rec, err)
	}
}

// TestStatementBasedReplication: with the binary log in STATEMENT format
// (where the server has one), no statement of the store is unsafe to
// replicate (warning 1592): a replica replays it to the same row, with
// the same clock reading and the same token.
func TestStatementBasedReplication(t *testing.T) {
	ctx := testserver.Ctx(t)
	probe := open(t)
	var logBin int
	if err := probe.DB().QueryRowContext(ctx, "SELECT @@log_bin").Scan(&logBin); err != nil || logBin == 0 {
		t.Skipf("the server has no binary log (log_bin=%d, %v)", logBin, err)
	}
	tb := newTable(t)
	s := open(t, tb.cfg, session(map[string]string{"binlog_format": "'STATEMENT'"}), func(c *mysql.Config) { c.MaxConns = 1 })
	c, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var format string
	if err := c.QueryRowContext(ctx, "SELECT @@session.binlog_format").Scan(&format); err != nil || format != "STATEMENT" {
		t.Fatalf("binlog_format %q, %v", format, err)
	}
	c.Close()
	// Each operation on the store's one connection, then its warnings.
	check := func(what string) {
		t.Helper()
		c, err := s.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		rows, err := c.QueryContext(ctx, "SHOW WARNINGS")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var level, msg string
			var code int
			if err := rows.Scan(&level, &code, &msg); err != nil {
				t.Fatal(err)
			}
			t.Errorf("%s: warning %d: %s", what, code, msg)
		}
	}
	a, b := owner(t, "a"), owner(t, "b")
	rec := mustAcquire(ctx, t, s, "r", a)
	check("grant")
	if _, err := s.Acquire(ctx, "r", b, time.Minute); !errors.Is(err, driver.ErrHeld) {
		t.Fatal(err)
	}
	check("held")
	if err := s.Renew(ctx, "r", a, rec.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	check("renew")
	if errs := s.RenewBatch(ctx, []driver.Renewal{{Resource: "r", Owner: a, Token: rec.Token, TTL: time.Minute}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	check("batch renewal")
	if err := s.Release(ctx, "r", a, rec.Token); err != nil {
		t.Fatal(err)
	}
	check("release")
	tb.sql(t, s, `UPDATE %[1]s SET granted_at = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR`)
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	check("sweep")
}
