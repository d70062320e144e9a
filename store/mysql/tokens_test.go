package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/mysql"
)

// table is a leases table of the test's own, created with Init and dropped
// (with its token table) at the end of the test.
type table struct {
	name string
	cfg  func(*mysql.Config)
}

func newTable(t *testing.T) table {
	t.Helper()
	tb := table{name: fmt.Sprintf("tenure_t_%d", time.Now().UnixNano())}
	tb.cfg = func(c *mysql.Config) { c.Table = tb.name }
	if err := mysql.Init(testserver.Ctx(t), config(t, tb.cfg)); err != nil {
		t.Fatal(err)
	}
	admin := open(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = admin.DB().ExecContext(ctx, "DROP TABLE IF EXISTS "+tb.name+", "+tb.name+"_tokens, "+tb.name+"_waits")
	})
	return tb
}

// sql runs a statement as an operator would, on the test's table (%[1]s)
// and its token table (%[2]s).
func (tb table) sql(t *testing.T, s *mysql.Store, stmt string, args ...any) {
	t.Helper()
	if _, err := s.DB().ExecContext(testserver.Ctx(t), fmt.Sprintf(stmt, tb.name, tb.name+"_tokens"), args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// floor reads the token floor.
func (tb table) floor(t *testing.T, s *mysql.Store) uint64 {
	t.Helper()
	var top uint64
	if err := s.DB().QueryRowContext(testserver.Ctx(t), "SELECT top FROM "+tb.name+"_tokens WHERE id = 1").Scan(&top); err != nil {
		t.Fatal(err)
	}
	return top
}

// dbMicros is the database's clock in microseconds since the Unix epoch.
func dbMicros(t *testing.T, s *mysql.Store) uint64 {
	t.Helper()
	var us uint64
	if err := s.DB().QueryRowContext(testserver.Ctx(t), `SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`).Scan(&us); err != nil {
		t.Fatal(err)
	}
	return us
}

// atClock sets the clock of a store's sessions (the session variable
// timestamp, which UTC_TIMESTAMP(6) reads) to the database's clock moved
// by d, frozen there: a database whose clock stepped.
func atClock(t *testing.T, s *mysql.Store, d time.Duration) func(*mysql.Config) {
	t.Helper()
	at := float64(dbMicros(t, s))/1e6 + d.Seconds()
	return func(c *mysql.Config) {
		c.MySQL.Params = map[string]string{"timestamp": fmt.Sprintf("%.6f", at)}
	}
}

func owner(t *testing.T, id string) string {
	t.Helper()
	o, err := naming.NewOwner(id)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func mustAcquire(ctx context.Context, t *testing.T, s *mysql.Store, r, o string) driver.Record {
	t.Helper()
	rec, err := s.Acquire(ctx, r, o, time.Minute)
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", r, o, err)
	}
	return rec
}

// lostTo checks that err is a loss (ErrLeaseLost) naming holder, or naming
// nobody when holder is empty.
func lostTo(t *testing.T, what string, err error, holder string, token uint64) {
	t.Helper()
	var held *driver.HeldError
	switch {
	case !errors.Is(err, driver.ErrLeaseLost):
		t.Fatalf("%s: %v; want ErrLeaseLost", what, err)
	case holder == "" && errors.As(err, &held):
		t.Fatalf("%s: %v; want no holder named", what, err)
	case holder != "" && (!errors.As(err, &held) || held.Holder.Owner != holder || held.Holder.Token != token):
		t.Fatalf("%s: %v; want a HeldError naming %s token %d", what, err, holder, token)
	}
}

// TestTokensClockFloor: a grant's token is at least the database's clock in
// microseconds, and strictly above the resource's previous one.
func TestTokensClockFloor(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg)
	a := owner(t, "a")
	before := dbMicros(t, s)
	last := map[string]uint64{}
	for i := range 6 {
		r := fmt.Sprintf("r%d", i%2)
		rec := mustAcquire(ctx, t, s, r, a+fmt.Sprint(i))
		if rec.Token < before || rec.Token <= last[r] {
			t.Fatalf("grant %d: token %d; want >= the clock %d and > the previous token %d", i, rec.Token, before, last[r])
		}
		last[r] = rec.Token
		if err := s.Release(ctx, r, rec.Owner, rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	// The released rows are kept (SweepGrace) and hold no lease.
	if recs, err := s.List(ctx, ""); err != nil || len(recs) != 0 {
		t.Fatalf("List after every lease was released: %+v, %v", recs, err)
	}
}

// TestTokensClockSteppedBack: the database's clock steps back an hour. A
// resource whose row is kept gets the row's token + 1; one whose row was
// swept gets the floor + 1, which the sweep raised to its token; a new
// name gets the floor + 1 too (tokens are per resource: it may be below
// another resource's). Tokens never go back.
func TestTokensClockSteppedBack(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg, func(c *mysql.Config) { c.SweepInterval = -1 })
	a := owner(t, "a")
	kept := mustAcquire(ctx, t, s, "kept", a)
	swept := mustAcquire(ctx, t, s, "swept", a)
	for _, r := range []driver.Record{kept, swept} {
		if err := s.Release(ctx, r.Resource, a, r.Token); err != nil {
			t.Fatal(err)
		}
	}
	// Two minutes on: swept's row is past SweepGrace (kept's too, but it
	// is taken again first, at the same clock, which keeps its row).
	later := open(t, tb.cfg, atClock(t, s, 2*time.Minute), func(c *mysql.Config) { c.SweepInterval = -1 })
	k2 := mustAcquire(ctx, t, later, "kept", a+"2")
	if n, err := later.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep: %d, %v; want swept's row deleted", n, err)
	}
	if f := tb.floor(t, s); f < swept.Token {
		t.Fatalf("floor %d after sweeping the row of token %d", f, swept.Token)
	}
	back := open(t, tb.cfg, atClock(t, s, -time.Hour), func(c *mysql.Config) { c.SweepInterval = -1 })
	if err := back.Release(ctx, "kept", a+"2", k2.Token); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r     string
		after uint64
	}{{"kept", k2.Token}, {"swept", swept.Token}, {"new", tb.floor(t, s)}} {
		rec := mustAcquire(ctx, t, back, c.r, a+"3")
		if rec.Token <= c.after {
			t.Fatalf("%s with the clock an hour back: token %d, not above %d", c.r, rec.Token, c.after)
		}
		if c.r != "kept" && rec.Token != tb.floor(t, s)+1 {
			t.Fatalf("%s with the clock back: token %d; want the floor + 1 = %d", c.r, rec.Token, tb.floor(t, s)+1)
		}
	}
}

// TestRowDeletedWhileHeld: an operator deletes the row of a live lease. The
// holder's renewal and release say it is gone (ErrLeaseLost, nobody named);
// the next grant has a greater token (the clock); after that, the old
// holder is told who holds it now.
func TestRowDeletedWhileHeld(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg)
	a, b := owner(t, "a"), owner(t, "b")
	ra := mustAcquire(ctx, t, s, "r", a)
	tb.sql(t, s, `DELETE FROM %[1]s WHERE resource = 'r'`)
	lostTo(t, "A's renewal after the row was deleted", s.Renew(ctx, "r", a, ra.Token, time.Minute), "", 0)
	rb := mustAcquire(ctx, t, s, "r", b)
	if rb.Token <= ra.Token {
		t.Fatalf("B's token %d after A's %d", rb.Token, ra.Token)
	}
	lostTo(t, "A's renewal after B's grant", s.Renew(ctx, "r", a, ra.Token, time.Minute), b, rb.Token)
	lostTo(t, "A's release after B's grant", s.Release(ctx, "r", a, ra.Token), b, rb.Token)
	lostTo(t, "A's keep after B's grant", s.Keep(ctx, "r", a, ra.Token, a+"k", time.Minute), b, rb.Token)
	if got, err := s.Get(ctx, "r"); err != nil || got.Owner != b || got.Token != rb.Token {
		t.Fatalf("Get after A's attempts: %+v, %v; want B's lease", got, err)
	}
}

// TestTablesDroppedAndRecreated: the tables are dropped under a holder and
// re-created with Init. The holder's renewal says the schema is missing,
// then that the lease is gone, and the next grant's token is above the old
// one: from the token floor when only the leases table was dropped, from
// the clock when both were.
func TestTablesDroppedAndRecreated(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg, func(c *mysql.Config) { c.SweepInterval = -1 })
	a, b := owner(t, "a"), owner(t, "b")
	ra := mustAcquire(ctx, t, s, "r", a)
	// The floor above the clock (tokens granted while the clock was
	// ahead): only the token table can keep the next token above it.
	ahead := dbMicros(t, s) + uint64(time.Hour/time.Microsecond)
	tb.sql(t, s, `UPDATE %[2]s SET top = ? WHERE id = 1`, ahead)
	tb.sql(t, s, `DROP TABLE %[1]s`)
	if err := s.Renew(ctx, "r", a, ra.Token, time.Minute); !errors.Is(err, mysql.ErrNoSchema) {
		t.Fatalf("renewal without the table: %v; want ErrNoSchema", err)
	}
	if err := mysql.Init(ctx, config(t, tb.cfg)); err != nil {
		t.Fatal(err)
	}
	lostTo(t, "A's renewal on the re-created table", s.Renew(ctx, "r", a, ra.Token, time.Minute), "", 0)
	rb := mustAcquire(ctx, t, s, "r", b)
	if rb.Token != ahead+1 {
		t.Fatalf("token %d after the leases table was re-created; want the floor + 1 = %d", rb.Token, ahead+1)
	}
	// Both tables gone: the clock floor.
	tb.sql(t, s, `DROP TABLE %[1]s, %[2]s`)
	if err := mysql.Init(ctx, config(t, tb.cfg)); err != nil {
		t.Fatal(err)
	}
	rc := mustAcquire(ctx, t, s, "r", a+"2")
	if rc.Token <= ra.Token {
		t.Fatalf("token %d after both tables were re-created; the first grant had %d", rc.Token, ra.Token)
	}
	// Init raises the floor to the table's tokens: a token table lost
	// alone goes on above the leases table's tokens.
	tb.sql(t, s, `UPDATE %[1]s SET token = ? WHERE resource = 'r'`, ahead+100)
	tb.sql(t, s, `DROP TABLE %[2]s`)
	if err := mysql.Init(ctx, config(t, tb.cfg)); err != nil {
		t.Fatal(err)
	}
	if f := tb.floor(t, s); f != ahead+100 {
		t.Fatalf("floor %d after Init on a table whose largest token is %d", f, ahead+100)
	}
}

// TestPartialRows: rows that another tool left in a partial state (owner
// without expiry, expiry without owner) hold nothing: Get and List do not
// show them, and the resource is granted with a token above the row's.
func TestPartialRows(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg)
	big := dbMicros(t, s) + uint64(time.Hour/time.Microsecond)
	cases := []struct{ name, insert string }{
		{"owner without expiry", `INSERT INTO %[1]s (resource, owner, token) VALUES ('p1', 'x', ?)`},
		{"expiry without owner", `INSERT INTO %[1]s (resource, token, expires_at) VALUES ('p2', ?, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)`},
		{"nothing but a token", `INSERT INTO %[1]s (resource, token) VALUES ('p3', ?)`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := fmt.Sprintf("p%d", i+1)
			tb.sql(t, s, c.insert, big)
			if rec, err := s.Get(ctx, r); !errors.Is(err, driver.ErrNotHeld) {
				t.Fatalf("Get of a partial row: %+v, %v; want ErrNotHeld", rec, err)
			}
			if recs, err := s.List(ctx, r); err != nil || len(recs) != 0 {
				t.Fatalf("List of a partial row: %+v, %v; want none", recs, err)
			}
			o := owner(t, "a")
			rec := mustAcquire(ctx, t, s, r, o)
			if rec.Token <= big {
				t.Fatalf("token %d over a partial row with token %d", rec.Token, big)
			}
			big = rec.Token
		})
	}
}

// TestSweep: the rows of leases that expired or were released more than
// SweepGrace ago, and rows that are neither, are deleted and the floor
// raised above their tokens; live leases and leases that just expired or
// were just released are kept.
func TestSweep(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg, func(c *mysql.Config) { c.SweepInterval = -1 })
	a := owner(t, "a")
	live := mustAcquire(ctx, t, s, "live", a)
	freed := mustAcquire(ctx, t, s, "freed", a)
	if err := s.Release(ctx, "freed", a, freed.Token); err != nil {
		t.Fatal(err)
	}
	tb.sql(t, s, `INSERT INTO %[1]s (resource, owner, token, ttl_us, expires_at, granted_at) VALUES
		('expired-long-ago', 'x', 5, 1000, UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE, UTC_TIMESTAMP(6) - INTERVAL 3 MINUTE),
		('expired-just-now', 'x', 6, 1000, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, UTC_TIMESTAMP(6) - INTERVAL 2 SECOND),
		('released-long-ago', NULL, 7, NULL, NULL, UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE),
		('partial', NULL, ?, NULL, NULL, NULL)`, live.Token+1000)
	n, err := s.Sweep(ctx)
	if err != nil || n != 3 {
		t.Fatalf("Sweep: %d, %v; want 3 rows deleted", n, err)
	}
	rows, err := s.DB().QueryContext(ctx, "SELECT resource FROM "+tb.name+" ORDER BY resource")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		left = append(left, r)
	}
	if fmt.Sprint(left) != "[expired-just-now freed live]" {
		t.Fatalf("rows left: %v; want [expired-just-now freed live]", left)
	}
	if f := tb.floor(t, s); f != live.Token+1000 {
		t.Fatalf("floor %d; want the largest swept token %d", f, live.Token+1000)
	}
	if err := s.Renew(ctx, "live", a, live.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if rec := mustAcquire(ctx, t, s, "released-long-ago", a+"2"); rec.Token <= live.Token+1000 {
		t.Fatalf("token %d of a name whose row was swept; the floor was %d", rec.Token, live.Token+1000)
	}
}

// TestNotTenuresTable: a table of the same name that is not tenure's is
// refused by Init, left alone, and a store on it says it is not tenure's.
func TestNotTenuresTable(t *testing.T) {
	ctx := testserver.Ctx(t)
	name := fmt.Sprintf("tenure_other_%d", time.Now().UnixNano())
	admin := open(t)
	t.Cleanup(func() {
		_, _ = admin.DB().ExecContext(context.Background(), "DROP TABLE IF EXISTS "+name+", "+name+"_tokens, "+name+"_waits")
	})
	if _, err := admin.DB().ExecContext(ctx, "CREATE TABLE "+name+" (resource VARCHAR(64) PRIMARY KEY, holder VARCHAR(64), until DATETIME) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.DB().ExecContext(ctx, "INSERT INTO "+name+" VALUES ('job', 'cron-1', NOW())"); err != nil {
		t.Fatal(err)
	}
	withTable := func(c *mysql.Config) { c.Table = name }
	err := mysql.Init(ctx, config(t, withTable))
	if !errors.Is(err, driver.ErrNotStore) || !strings.Contains(err.Error(), "not tenure's") {
		t.Fatalf("Init on another application's table: %v; want ErrNotStore saying so", err)
	}
	var n int
	if err := admin.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", name+"_tokens").Scan(&n); err != nil || n != 0 {
		t.Fatalf("Init created the token table beside another application's table (%d, %v)", n, err)
	}
	// A store opened on it anyway (the token table made by hand).
	if _, err := admin.DB().ExecContext(ctx, "CREATE TABLE "+name+"_tokens (id TINYINT UNSIGNED PRIMARY KEY, top BIGINT UNSIGNED NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	s := open(t, withTable)
	_, err = s.Acquire(ctx, "job", owner(t, "a"), time.Minute)
	if !errors.Is(err, driver.ErrNotStore) || !strings.Contains(err.Error(), "not tenure's") {
		t.Fatalf("Acquire on another application's table: %v; want ErrNotStore", err)
	}
	if _, err := s.Get(ctx, "job"); !errors.Is(err, driver.ErrNotStore) {
		t.Fatalf("Get on another application's table: %v; want ErrNotStore", err)
	}
	// A MyISAM table with tenure's columns is refused too.
	if _, err := admin.DB().ExecContext(ctx, "DROP TABLE "+name); err != nil {
		t.Fatal(err)
	}
	schema, err := mysql.Schema(config(t, withTable))
	if err != nil {
		t.Fatal(err)
	}
	create := strings.Replace(strings.Split(schema, ";\n")[0], "ENGINE=InnoDB", "ENGINE=MyISAM", 1)
	if _, err := admin.DB().ExecContext(ctx, create); err != nil {
		t.Fatal(err)
	}
	if err := mysql.Init(ctx, config(t, withTable)); !errors.Is(err, driver.ErrNotStore) || !strings.Contains(err.Error(), "MyISAM") {
		t.Fatalf("Init on a MyISAM table: %v; want ErrNotStore naming the engine", err)
	}
}
