package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/postgres"
)

// table is a leases table of the test's own, created with Init and dropped
// (with its sequence) at the end of the test.
type table struct {
	name string
	cfg  func(*postgres.Config)
}

func newTable(t *testing.T) table {
	t.Helper()
	tb := table{name: fmt.Sprintf("tenure_t_%d", time.Now().UnixNano())}
	tb.cfg = func(c *postgres.Config) { c.Table = tb.name }
	if err := postgres.Init(testserver.Ctx(t), config(t, tb.cfg)); err != nil {
		t.Fatal(err)
	}
	admin := open(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = admin.Pool().Exec(ctx, "DROP TABLE IF EXISTS "+tb.name)
		_, _ = admin.Pool().Exec(ctx, "DROP SEQUENCE IF EXISTS "+tb.name+"_token_seq")
	})
	return tb
}

// sql runs statements as an operator would, on the test's table (%[1]s)
// and its sequence (%[2]s).
func (tb table) sql(t *testing.T, s *postgres.Store, stmt string, args ...any) {
	t.Helper()
	if _, err := s.Pool().Exec(testserver.Ctx(t), fmt.Sprintf(stmt, tb.name, tb.name+"_token_seq"), args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// dbMicros is the database's clock in microseconds since the Unix epoch.
func dbMicros(t *testing.T, s *postgres.Store) uint64 {
	t.Helper()
	var us int64
	if err := s.Pool().QueryRow(testserver.Ctx(t), `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`).Scan(&us); err != nil {
		t.Fatal(err)
	}
	return uint64(us)
}

func owner(t *testing.T, id string) string {
	t.Helper()
	o, err := naming.NewOwner(id)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func mustAcquire(ctx context.Context, t *testing.T, s *postgres.Store, r, o string) driver.Record {
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
// microseconds, and tokens of one table strictly increase across
// resources and grants.
func TestTokensClockFloor(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg)
	a := owner(t, "a")
	before := dbMicros(t, s)
	var last uint64
	for i := range 5 {
		r := fmt.Sprintf("r%d", i%2)
		rec := mustAcquire(ctx, t, s, r, a+fmt.Sprint(i))
		if rec.Token < before || rec.Token <= last {
			t.Fatalf("grant %d: token %d; want >= the clock %d and > the previous token %d", i, rec.Token, before, last)
		}
		last = rec.Token
		if err := s.Release(ctx, r, rec.Owner, rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	// The sequence carries the floor: its last value is the last token.
	var seq int64
	if err := s.Pool().QueryRow(ctx, fmt.Sprintf(`SELECT last_value FROM %s_token_seq`, tb.name)).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if uint64(seq) < last {
		t.Fatalf("sequence at %d, below the last token %d", seq, last)
	}
	// The released rows are kept (SweepGrace) and hold no lease.
	if recs, err := s.List(ctx, ""); err != nil || len(recs) != 0 {
		t.Fatalf("List after every lease was released: %+v, %v", recs, err)
	}
}

// TestTokensSequenceAheadOfClock: a sequence set ahead of the clock (tokens
// granted while the clock was ahead, which then stepped back) still gives
// greater tokens.
func TestTokensSequenceAheadOfClock(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg)
	ahead := dbMicros(t, s) + uint64(time.Hour/time.Microsecond)
	tb.sql(t, s, `SELECT setval('%[2]s', $1)`, int64(ahead))
	rec := mustAcquire(ctx, t, s, "r", owner(t, "a"))
	if rec.Token != ahead+1 {
		t.Fatalf("token %d; want the sequence's next value %d", rec.Token, ahead+1)
	}
}

// TestRowDeletedWhileHeld: an operator deletes the row of a live lease. The
// holder's renewal and release say it is gone (ErrLeaseLost, nobody named);
// the next grant has a greater token; after that, the old holder is told
// who holds it now.
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
	if got, err := s.Get(ctx, "r"); err != nil || got.Owner != b || got.Token != rb.Token {
		t.Fatalf("Get after A's attempts: %+v, %v; want B's lease", got, err)
	}
}

// TestLostLeaseSaysWhy: through a Locker, a lease whose row was deleted and
// then granted to B is lost with a LostError naming B (design rule 8).
func TestLostLeaseSaysWhy(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg)
	a, b := testserver.Locker(t, s), testserver.Locker(t, s)
	la, err := a.TryAcquire(ctx, "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tb.sql(t, s, `DELETE FROM %[1]s WHERE resource = 'r'`)
	lb, err := b.TryAcquire(ctx, "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	err = la.Renew(ctx)
	var held *tenure.HeldError
	if !errors.Is(err, tenure.ErrNotHolder) || !errors.As(err, &held) || held.Holder.Owner != lb.Owner() || held.Holder.Token != lb.Token() {
		t.Fatalf("A's renewal: %v; want ErrNotHolder naming B (%s, token %d)", err, lb.Owner(), lb.Token())
	}
}

// TestTableDroppedAndRecreated: the table is dropped under a holder and
// re-created with Init. The holder's renewal says the lease is gone, and
// the next grant's token is above the old one: from the sequence when only
// the table was dropped, from the clock when the sequence was dropped too.
func TestTableDroppedAndRecreated(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg)
	a, b := owner(t, "a"), owner(t, "b")
	ra := mustAcquire(ctx, t, s, "r", a)
	tb.sql(t, s, `DROP TABLE %[1]s`)
	if err := s.Renew(ctx, "r", a, ra.Token, time.Minute); !errors.Is(err, postgres.ErrNoSchema) {
		t.Fatalf("renewal without the table: %v; want ErrNoSchema", err)
	}
	if err := postgres.Init(ctx, config(t, tb.cfg)); err != nil {
		t.Fatal(err)
	}
	lostTo(t, "A's renewal on the re-created table", s.Renew(ctx, "r", a, ra.Token, time.Minute), "", 0)
	rb := mustAcquire(ctx, t, s, "r", b)
	if rb.Token <= ra.Token {
		t.Fatalf("token %d after the table was re-created; the old one was %d", rb.Token, ra.Token)
	}
	// Table and sequence both gone: the clock floor.
	tb.sql(t, s, `DROP TABLE %[1]s`)
	tb.sql(t, s, `DROP SEQUENCE %[2]s`)
	if err := postgres.Init(ctx, config(t, tb.cfg)); err != nil {
		t.Fatal(err)
	}
	rc := mustAcquire(ctx, t, s, "r", a+"2")
	if rc.Token <= rb.Token {
		t.Fatalf("token %d after table and sequence were re-created; the old one was %d", rc.Token, rb.Token)
	}
}

// TestPartialRows: rows that another tool left in a partial state (owner
// without expiry, expiry without owner, no token, a token of 0, no
// waiters flag) hold nothing: Get and List do not show them, and the
// resource is granted with a token above the row's (the floor kept), and
// every later grant too. The table's constraints are dropped first, as a
// hand-made table would lack them.
func TestPartialRows(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg)
	var checks []string
	rows, err := s.Pool().Query(ctx, `SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'c'`, tb.name)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		checks = append(checks, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		tb.sql(t, s, `ALTER TABLE %[1]s DROP CONSTRAINT `+pgx.Identifier{c}.Sanitize())
	}
	tb.sql(t, s, `ALTER TABLE %[1]s ALTER COLUMN token DROP NOT NULL, ALTER COLUMN waiters DROP NOT NULL`)
	// Tokens an hour of microseconds ahead of the clock: the grant must go
	// above them, not only above the clock.
	big := int64(dbMicros(t, s) + uint64(time.Hour/time.Microsecond))
	cases := []struct{ name, insert string }{
		{"owner without expiry", `INSERT INTO %[1]s (resource, owner, token, waiters) VALUES ('p1', 'x', $1, false)`},
		{"expiry without owner", `INSERT INTO %[1]s (resource, token, expires_at, waiters) VALUES ('p2', $1, now() + interval '1 hour', false)`},
		{"no token", `INSERT INTO %[1]s (resource, owner, expires_at, waiters) SELECT 'p3', 'x', now() + interval '1 hour', false WHERE $1::bigint > 0`},
		{"token 0", `INSERT INTO %[1]s (resource, owner, token, expires_at, waiters) VALUES ('p4', 'x', 0 * $1::bigint, now() + interval '1 hour', false)`},
		{"no waiters flag", `INSERT INTO %[1]s (resource, token) VALUES ('p5', $1)`},
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
			if int64(rec.Token) <= big {
				t.Fatalf("token %d over a partial row with token %d", rec.Token, big)
			}
			big = int64(rec.Token)
			if err := s.Release(ctx, r, o, rec.Token); err != nil {
				t.Fatal(err)
			}
			rec = mustAcquire(ctx, t, s, r, o+"2")
			if int64(rec.Token) <= big {
				t.Fatalf("token %d of the next grant, after %d", rec.Token, big)
			}
			big = int64(rec.Token)
		})
	}
}

// oldSchema is the table of the previous tenure (a token counter per row,
// rows kept after release).
const oldSchema = `CREATE TABLE %[1]s (
	resource   text COLLATE "C" PRIMARY KEY,
	owner      text,
	token      bigint NOT NULL CHECK (token > 0),
	ttl_ms     bigint,
	expires_at timestamptz,
	granted_at timestamptz,
	CHECK ((owner IS NULL) = (expires_at IS NULL))
)`

// oldAcquire is the previous tenure's acquire statement.
const oldAcquire = `INSERT INTO %[1]s AS l (resource, owner, token, ttl_ms, expires_at, granted_at)
VALUES ($1, $2, 1, $3, clock_timestamp() + ($3::bigint * interval '1 millisecond'), clock_timestamp())
ON CONFLICT (resource) DO UPDATE SET
	token = CASE WHEN l.owner = excluded.owner AND l.expires_at > clock_timestamp() THEN l.token ELSE l.token + 1 END,
	owner = excluded.owner, ttl_ms = excluded.ttl_ms, expires_at = clock_timestamp() + ($3::bigint * interval '1 millisecond')
WHERE l.owner IS NULL OR l.expires_at <= clock_timestamp() OR l.owner = excluded.owner
RETURNING token`

// TestInitMigratesOlderTable: Init on a table of the previous tenure adds
// what the store needs; a lease granted before is still renewed and
// released by its holder; a free row's name is granted above its old
// token; and the older clients' acquire fails instead of granting a token
// from a per-row counter.
func TestInitMigratesOlderTable(t *testing.T) {
	ctx := testserver.Ctx(t)
	admin := open(t)
	name := fmt.Sprintf("tenure_old_%d", time.Now().UnixNano())
	withTable := func(c *postgres.Config) { c.Table = name }
	t.Cleanup(func() {
		_, _ = admin.Pool().Exec(context.Background(), "DROP TABLE IF EXISTS "+name)
		_, _ = admin.Pool().Exec(context.Background(), "DROP SEQUENCE IF EXISTS "+name+"_token_seq")
	})
	exec := func(stmt string, args ...any) {
		t.Helper()
		if _, err := admin.Pool().Exec(ctx, fmt.Sprintf(stmt, name), args...); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	exec(oldSchema)
	holder := owner(t, "old")
	exec(`INSERT INTO %[1]s VALUES ('held', $1, 3, 60000, now() + interval '1 minute', now()), ('free', NULL, 7, NULL, NULL, NULL)`, holder)
	s := open(t, withTable)
	if _, err := s.Acquire(ctx, "x", owner(t, "a"), time.Minute); !errors.Is(err, postgres.ErrNoSchema) {
		t.Fatalf("Acquire on an unmigrated table: %v; want ErrNoSchema (run tenure init)", err)
	}
	if err := postgres.Init(ctx, config(t, withTable)); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Init(ctx, config(t, withTable)); err != nil {
		t.Fatalf("Init again: %v", err)
	}
	if rec, err := s.Get(ctx, "held"); err != nil || rec.Owner != holder || rec.Token != 3 {
		t.Fatalf("Get of the lease granted before the migration: %+v, %v", rec, err)
	}
	if err := s.Renew(ctx, "held", holder, 3, time.Minute); err != nil {
		t.Fatalf("renewal of the lease granted before the migration: %v", err)
	}
	a := owner(t, "a")
	if _, err := s.Acquire(ctx, "held", a, time.Minute); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Acquire of the held name: %v; want ErrHeld", err)
	}
	rec := mustAcquire(ctx, t, s, "free", a)
	if rec.Token <= 7 {
		t.Fatalf("token %d on the free row whose token was 7", rec.Token)
	}
	if err := s.Release(ctx, "held", holder, 3); err != nil {
		t.Fatalf("release of the lease granted before the migration: %v", err)
	}
	var seq int64
	if err := admin.Pool().QueryRow(ctx, fmt.Sprintf(`SELECT last_value FROM %s_token_seq`, name)).Scan(&seq); err != nil || seq < 7 {
		t.Fatalf("sequence at %d (%v); want at least the table's largest token 7", seq, err)
	}
	// An older client cannot grant any more.
	_, err := admin.Pool().Exec(ctx, fmt.Sprintf(oldAcquire, name), "new-name", "old-client", 60000)
	if err == nil {
		t.Fatal("the older tenure's acquire still works on the migrated table")
	}
	_, err = admin.Pool().Exec(ctx, fmt.Sprintf(oldAcquire, name), "free", "old-client", 60000)
	if err == nil {
		t.Fatal("the older tenure's acquire of an existing row still works on the migrated table")
	}
}

// TestSweep: the rows of leases that expired or were released more than
// SweepGrace ago, and rows that are neither, are deleted; live leases and
// leases that just expired or were just released are kept. A name whose
// row was swept is granted again with a greater token.
func TestSweep(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg, func(c *postgres.Config) { c.SweepInterval = -1 })
	a := owner(t, "a")
	live := mustAcquire(ctx, t, s, "live", a)
	freed := mustAcquire(ctx, t, s, "freed", a)
	if err := s.Release(ctx, "freed", a, freed.Token); err != nil {
		t.Fatal(err)
	}
	tb.sql(t, s, `INSERT INTO %[1]s (resource, owner, token, ttl_ms, expires_at, granted_at, waiters) VALUES
		('expired-long-ago', 'x', 5, 1000, clock_timestamp() - interval '2 minutes', clock_timestamp() - interval '3 minutes', true),
		('expired-just-now', 'x', 6, 1000, clock_timestamp() - interval '1 second', clock_timestamp() - interval '2 seconds', false),
		('released-long-ago', NULL, 7, NULL, NULL, clock_timestamp() - interval '2 minutes', false),
		('released-by-old-tenure', NULL, 8, NULL, NULL, NULL, false)`)
	n, err := s.Sweep(ctx)
	if err != nil || n != 3 {
		t.Fatalf("Sweep: %d, %v; want 3 rows deleted", n, err)
	}
	rows, err := s.Pool().Query(ctx, "SELECT resource FROM "+tb.name+" ORDER BY resource")
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || fmt.Sprint(left) != "[expired-just-now freed live]" {
		t.Fatalf("rows left: %v, %v; want [expired-just-now freed live]", left, err)
	}
	if err := s.Renew(ctx, "live", a, live.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if rec := mustAcquire(ctx, t, s, "released-long-ago", a+"2"); rec.Token <= freed.Token {
		t.Fatalf("token %d of a name whose row was swept; an earlier grant had %d", rec.Token, freed.Token)
	}
}

// A sweep raises the sequence above the tokens of the rows it deletes, so
// that a resource's next grant after its row is gone is above its last
// token even when the database's clock has stepped back. Concurrent grants
// each set the sequence to their own clock reading, in no order, and can
// leave it below a token already granted (adversarial review: by 0.1–1 ms
// of microseconds, in most runs of 24 grants at once); that deficit is made
// here by hand. The database's clock is simulated with a clock_timestamp()
// that shadows pg_catalog's on the search path of a second Store.
func TestSweepRaisesTheSequenceAboveSweptTokens(t *testing.T) {
	tb := newTable(t)
	ctx := testserver.Ctx(t)
	s := open(t, tb.cfg, func(c *postgres.Config) { c.SweepInterval = -1 })
	schema := tb.name + "_clock"
	for _, q := range []string{
		`CREATE SCHEMA ` + schema,
		`CREATE TABLE ` + schema + `.off (o interval NOT NULL)`,
		`INSERT INTO ` + schema + `.off VALUES ('0')`,
		`CREATE FUNCTION ` + schema + `.clock_timestamp() RETURNS timestamptz VOLATILE LANGUAGE sql AS
			$$ SELECT pg_catalog.clock_timestamp() + (SELECT o FROM ` + schema + `.off) $$`,
	} {
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}
	t.Cleanup(func() { _, _ = s.Pool().Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	setClock := func(o string) {
		if _, err := s.Pool().Exec(ctx, `UPDATE `+schema+`.off SET o = $1::interval`, o); err != nil {
			t.Fatal(err)
		}
	}
	o := owner(t, "a")
	rec := mustAcquire(ctx, t, s, "r", o)
	// The sequence left below r's token, as two racing grants leave it.
	tb.sql(t, s, `SELECT setval('%[2]s', $1)`, int64(rec.Token)-100)
	if err := s.Release(ctx, "r", o, rec.Token); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, tb.cfg, func(c *postgres.Config) {
		c.SweepInterval = -1
		c.Pool.ConnConfig.RuntimeParams["search_path"] = schema + ", public, pg_catalog"
	})
	setClock("2 minutes") // past SweepGrace: r's row is swept
	if n, err := s2.Sweep(ctx); err != nil || n == 0 {
		t.Fatalf("sweep: %d rows, %v", n, err)
	}
	setClock("-1 hour") // the database's clock steps back
	next, err := s2.Acquire(ctx, "r", owner(t, "b"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token <= rec.Token {
		t.Fatalf("r: token %d granted after token %d, once its row was swept: the fencing token went back", next.Token, rec.Token)
	}
}
