package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/store/sqlite"
)

// raw opens path with SQLite directly, as another tool would.
func raw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// counter reads the token counter of the file.
func counter(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var v int64
	if err := db.QueryRow(`SELECT value FROM tenure_meta WHERE name = 'token'`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// rowCount counts the rows of tenure_leases.
func rowCount(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM tenure_leases`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// wallAt is a wall clock the test sets.
type wallAt struct{ t time.Time }

func (w *wallAt) now() time.Time { return w.t }

// Tokens are max(counter + 1, wall clock in µs): they follow the wall
// clock, never go back when it does, and one counter serves every
// resource. Released leases leave no row.
func TestTokenPolicy(t *testing.T) {
	ctx := context.Background()
	wall := &wallAt{time.Unix(1_800_000_000, 0)}
	_, path := open(t)
	s := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, nil, wall.now))
	a, _ := naming.NewOwner("a")
	rec, err := s.Acquire(ctx, "r", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(wall.t.UnixMicro()); rec.Token != want {
		t.Fatalf("first token %d; want the wall clock in µs, %d", rec.Token, want)
	}
	// The same microsecond: the counter goes on.
	rec2, err := s.Acquire(ctx, "other", a, time.Minute)
	if err != nil || rec2.Token != rec.Token+1 {
		t.Fatalf("second grant in the same µs: %+v, %v; want token %d", rec2, err, rec.Token+1)
	}
	// The wall clock goes back an hour: tokens still increase.
	wall.t = wall.t.Add(-time.Hour)
	if err := s.Release(ctx, "r", a, rec.Token); err != nil {
		t.Fatal(err)
	}
	rec3, err := s.Acquire(ctx, "r", a, time.Minute)
	if err != nil || rec3.Token != rec2.Token+1 {
		t.Fatalf("after the wall clock went back: %+v, %v; want token %d", rec3, err, rec2.Token+1)
	}
	// Forward again: the clock is the floor.
	wall.t = wall.t.Add(2 * time.Hour)
	if err := s.Release(ctx, "r", a, rec3.Token); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "other", a, rec2.Token); err != nil {
		t.Fatal(err)
	}
	db := raw(t, path)
	if n := rowCount(t, db); n != 0 {
		t.Fatalf("%d rows left after every lease was released; want none", n)
	}
	rec4, err := s.Acquire(ctx, "r", a, time.Minute)
	if err != nil || rec4.Token != uint64(wall.t.UnixMicro()) {
		t.Fatalf("after the clock moved on: %+v, %v; want token %d", rec4, err, wall.t.UnixMicro())
	}
	if c := counter(t, db); c != int64(rec4.Token) {
		t.Fatalf("counter %d; want the last token, %d", c, rec4.Token)
	}
}

// A lost file (deleted, or replaced by an older copy while no process had
// it open) does not make tokens go back: the new counter starts at the wall
// clock, which has moved on since the tokens of the lost file were granted.
func TestTokenFloorSurvivesLostFile(t *testing.T) {
	ctx := context.Background()
	wall := &wallAt{time.Unix(1_800_000_000, 0)}
	dir := t.TempDir()
	path := filepath.Join(dir, "leases.db")
	cfg := sqlite.WithClocks(sqlite.Config{Path: path}, nil, wall.now)
	a, _ := naming.NewOwner("a")
	grant := func(s *sqlite.Store, resource string) uint64 {
		t.Helper()
		wall.t = wall.t.Add(time.Millisecond)
		rec, err := s.Acquire(ctx, resource, a, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, resource, a, rec.Token); err != nil {
			t.Fatal(err)
		}
		return rec.Token
	}
	s, err := sqlite.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	grant(s, "r")
	s.Close() // the last handle: the file is whole, without -wal
	backup := filepath.Join(dir, "backup.db")
	copyFile(t, path, backup)
	s, err = sqlite.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := 0; i < 5; i++ {
		last = grant(s, "r")
	}
	s.Close()

	// Restored from the backup: its counter is older than the last token.
	if err := os.Rename(backup, path); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tok := grant(s, "r"); tok <= last {
		t.Fatalf("token %d after restoring a backup; the last token granted was %d", tok, last)
	} else {
		last = tok
	}
	s.Close()

	// Deleted: a new file.
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		os.Remove(p)
	}
	s, err = sqlite.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if tok := grant(s, "r"); tok <= last {
		t.Fatalf("token %d in a new file; the last token granted was %d", tok, last)
	}
}

// v1Schema is the table of the first version of this store: a token per
// row, kept after release, and no tenure_meta.
const v1Schema = `CREATE TABLE tenure_leases (
	resource   TEXT PRIMARY KEY NOT NULL,
	owner      TEXT,
	token      INTEGER NOT NULL,
	ttl_ms     INTEGER,
	epoch      TEXT,
	expires_ms INTEGER,
	granted_at TEXT
) WITHOUT ROWID`

// makeV1 writes a file of the first version: a live lease on "held" (token
// 7, owner), a released resource "free" (token 57, the largest), and an
// expired lease "expired" (token 3).
func makeV1(t *testing.T, path string, clock *fakeHostClock, owner string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	epoch, now, _ := clock.read()
	ms := now.Milliseconds()
	mustExec(t, db, v1Schema)
	mustExec(t, db, `INSERT INTO tenure_leases VALUES ('held', ?, 7, 60000, ?, ?, 'x')`, owner, epoch, ms+60000)
	mustExec(t, db, `INSERT INTO tenure_leases VALUES ('free', NULL, 57, NULL, NULL, NULL, NULL)`)
	mustExec(t, db, `INSERT INTO tenure_leases VALUES ('expired', 'gone#1.1', 3, 1000, ?, ?, 'x')`, epoch, ms-1)
}

// A file of the first version is upgraded by Open: the counter starts at
// the largest token stored, live leases stay (their holders renew and
// release them), the other rows go, and programs of the first version can
// no longer grant in the file (the trigger refuses tokens at or below the
// counter). Opening it for inspection changes nothing and refuses writes.
func TestUpgradeFromVersion1(t *testing.T) {
	ctx := context.Background()
	clock := newFakeHostClock()
	path := filepath.Join(t.TempDir(), "leases.db")
	a, _ := naming.NewOwner("a")
	b, _ := naming.NewOwner("b")
	makeV1(t, path, clock, a)

	// Inspection: reads work, writes say how to upgrade, nothing changes.
	ins, err := sqlite.Open(ctx, sqlite.WithClocks(sqlite.Config{Path: path, MustExist: true}, clock.read, nil))
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := ins.Get(ctx, "held"); err != nil || rec.Token != 7 || rec.Owner != a {
		t.Fatalf("Get on a version-1 file: %+v, %v", rec, err)
	}
	if recs, err := ins.List(ctx, ""); err != nil || len(recs) != 1 {
		t.Fatalf("List on a version-1 file: %+v, %v; want the one live lease", recs, err)
	}
	if err := ins.Release(ctx, "held", a, 7); err == nil || !strings.Contains(err.Error(), "earlier tenure version") {
		t.Fatalf("Release through an inspecting store on a version-1 file: %v; want an error saying to upgrade", err)
	}
	ins.Close()
	db := raw(t, path)
	var tables int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'tenure_meta'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("inspection created tenure_meta (%d, %v)", tables, err)
	}

	s := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, clock.read, nil))
	if c := counter(t, db); c != 57 {
		t.Fatalf("counter after the upgrade %d; want 57, the largest token stored", c)
	}
	if n := rowCount(t, db); n != 1 {
		t.Fatalf("%d rows after the upgrade; want only the live lease", n)
	}
	// The live lease is intact: its holder renews it; others are refused.
	if err := s.Renew(ctx, "held", a, 7, time.Minute); err != nil {
		t.Fatalf("renewal of a lease granted before the upgrade: %v", err)
	}
	if _, err := s.Acquire(ctx, "held", b, time.Minute); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("acquire of a lease granted before the upgrade: %v; want ErrHeld", err)
	}
	for _, r := range []string{"free", "expired", "new"} {
		rec, err := s.Acquire(ctx, r, b, time.Minute)
		if err != nil || rec.Token <= 57 {
			t.Fatalf("acquire %q after the upgrade: %+v, %v; want a token above 57", r, rec, err)
		}
	}
	// What the first version's Acquire would write, on a row that is gone
	// and on a row that is there: refused by the trigger.
	epoch, now, _ := clock.read()
	for _, q := range []string{
		`INSERT INTO tenure_leases VALUES ('free2', 'old#1.1', 1, 1000, ?1, ?2, 'x')`,
		`INSERT INTO tenure_leases VALUES ('held', 'old#1.1', 8, 1000, ?1, ?2, 'x')
			ON CONFLICT (resource) DO UPDATE SET owner = excluded.owner, token = excluded.token`,
	} {
		_, err := db.Exec(q, epoch, now.Milliseconds()+1000)
		if err == nil || !strings.Contains(err.Error(), "fencing token must be above") {
			t.Fatalf("a first-version grant after the upgrade: %v; want the trigger's refusal", err)
		}
	}
	if err := s.Release(ctx, "held", a, 7); err != nil {
		t.Fatalf("release of a lease granted before the upgrade: %v", err)
	}
	// Opening again changes nothing.
	c := counter(t, db)
	reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, clock.read, nil))
	if c2 := counter(t, db); c2 != c {
		t.Fatalf("counter %d -> %d after opening again", c, c2)
	}
}

// Rows that another tool left in a state tenure never writes are free, and
// a grant over them keeps the token floor (above the counter and above the
// row's own token); they never block the resource, and Get and List do not
// show them. A NULL token is refused by the table itself, a token beyond
// what tenure hands out is refused with a sentence that says what to do,
// and the counter cannot be set back or deleted.
func TestPartialRows(t *testing.T) {
	ctx := context.Background()
	clock := newFakeHostClock()
	_, path := open(t)
	s := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, clock.read, nil))
	db := raw(t, path)
	epoch, now, _ := clock.read()
	ms := now.Milliseconds()
	a, _ := naming.NewOwner("a")
	b, _ := naming.NewOwner("b")
	// Raise the counter with a grant, so that every case checks both
	// floors.
	first, err := s.Acquire(ctx, "first", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	big := int64(first.Token) + 1_000_000
	// A tool that writes such rows has dropped the triggers first (they
	// refuse a token at or below the counter); Open puts them back.
	mustExec(t, db, `DROP TRIGGER tenure_token_insert`)
	mustExec(t, db, `DROP TRIGGER tenure_token_update`)
	cases := []struct {
		name  string
		row   []any // owner, token, ttl_ms, epoch, expires_ms
		floor int64 // the row's token counts when it is a valid one
	}{
		{"owner without expiry", []any{a, 5, 60000, epoch, nil}, 0},
		{"owner without epoch", []any{a, 5, 60000, nil, ms + 60000}, 0},
		{"owner without TTL", []any{a, 5, nil, epoch, ms + 60000}, 0},
		{"expiry without owner", []any{nil, 5, 60000, epoch, ms + 60000}, 0},
		{"empty owner", []any{"", 5, 60000, epoch, ms + 60000}, 0},
		{"text token", []any{a, "abc", 60000, epoch, ms + 60000}, 0},
		{"zero token", []any{a, 0, 60000, epoch, ms + 60000}, 0},
		{"negative token", []any{a, -5, 60000, epoch, ms + 60000}, 0},
		{"real token", []any{a, 1.5, 60000, epoch, ms + 60000}, 0},
		{"token above the counter", []any{nil, big, nil, nil, nil}, big},
		{"another boot", []any{a, 5, 60000, "boot-0", ms + 60000}, 0},
		{"expiry as text", []any{a, 5, 60000, epoch, "tomorrow"}, 0},
		{"expiry further than its TTL", []any{a, 5, 60000, epoch, ms + 10*365*24*3600*1000}, 0},
		{"negative TTL", []any{a, 5, -60000, epoch, ms + 60000}, 0},
		{"owner as a blob", []any{[]byte(a), 5, 60000, epoch, ms + 60000}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := "partial/" + c.name
			if _, err := db.Exec(`INSERT INTO tenure_leases (resource, owner, token, ttl_ms, epoch, expires_ms, granted_at)
				VALUES (?, ?, ?, ?, ?, ?, 'tool')`, append([]any{r}, c.row...)...); err != nil {
				t.Fatalf("writing the row: %v", err)
			}
			if _, err := s.Get(ctx, r); !errors.Is(err, tenure.ErrNotHeld) {
				t.Errorf("Get: %v; want ErrNotHeld", err)
			}
			if recs, err := s.List(ctx, r); err != nil || len(recs) != 0 {
				t.Errorf("List: %+v, %v; want nothing", recs, err)
			}
			if err := s.Renew(ctx, r, a, 5, time.Minute); !errors.Is(err, tenure.ErrLeaseLost) {
				t.Errorf("Renew of the row as if it were a's lease: %v; want ErrLeaseLost", err)
			}
			before := counter(t, db)
			rec, err := s.Acquire(ctx, r, b, time.Minute)
			if err != nil {
				t.Fatalf("Acquire over the row: %v", err)
			}
			if int64(rec.Token) <= before || int64(rec.Token) <= c.floor {
				t.Fatalf("token %d; want above the counter %d and the row's token %d", rec.Token, before, c.floor)
			}
			if got, err := s.Get(ctx, r); err != nil || got.Owner != b || got.Token != rec.Token {
				t.Fatalf("Get after the grant: %+v, %v", got, err)
			}
		})
	}
	t.Run("NULL token", func(t *testing.T) {
		_, err := db.Exec(`INSERT INTO tenure_leases (resource, owner, token) VALUES ('partial/null', ?, NULL)`, a)
		if err == nil || !strings.Contains(err.Error(), "NOT NULL") {
			t.Fatalf("a row with a NULL token: %v; want the table's NOT NULL refusal", err)
		}
	})
	t.Run("token beyond 2^62", func(t *testing.T) {
		mustExec(t, db, `INSERT INTO tenure_leases (resource, token) VALUES ('partial/huge', ?)`, int64(1)<<62)
		_, err := s.Acquire(ctx, "partial/huge", b, time.Minute)
		if err == nil || !strings.Contains(err.Error(), "beyond the largest") || !strings.Contains(err.Error(), "DELETE FROM tenure_leases") {
			t.Fatalf("Acquire over a row with token 2^62: %v; want an error saying what to do", err)
		}
		// Other resources are not affected.
		if _, err := s.Acquire(ctx, "partial/after-huge", b, time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("counter", func(t *testing.T) {
		reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, clock.read, nil)) // puts the triggers back
		for _, q := range []string{
			`UPDATE tenure_meta SET value = 0 WHERE name = 'token'`,
			`UPDATE tenure_meta SET value = 'x' WHERE name = 'token'`,
			`DELETE FROM tenure_meta WHERE name = 'token'`,
			`DELETE FROM tenure_meta`,
		} {
			if _, err := db.Exec(q); err == nil || !strings.Contains(err.Error(), "never go back") {
				t.Errorf("%s: %v; want the trigger's refusal", q, err)
			}
		}
		// A grant at or below the counter by another program is refused.
		_, err := db.Exec(`INSERT INTO tenure_leases (resource, owner, token, ttl_ms, epoch, expires_ms) VALUES ('partial/low', 'x', 2, 1, 'e', 1)`)
		if err == nil || !strings.Contains(err.Error(), "fencing token must be above") {
			t.Errorf("a low token written by a tool: %v; want the trigger's refusal", err)
		}
	})
}

// Rows of leases that expired are deleted by the sweep; live ones stay, and
// the counter stays above the tokens of the rows it deleted.
func TestSweepDeletesExpiredRows(t *testing.T) {
	ctx := context.Background()
	clock := newFakeHostClock()
	_, path := open(t)
	s := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, clock.read, nil))
	db := raw(t, path)
	a, _ := naming.NewOwner("a")
	for i := 0; i < 5; i++ {
		ttl := time.Second
		if i == 0 {
			ttl = time.Hour
		}
		if _, err := s.Acquire(ctx, fmt.Sprintf("r%d", i), a, ttl); err != nil {
			t.Fatal(err)
		}
	}
	big := counter(t, db) + 1000
	mustExec(t, db, `INSERT INTO tenure_leases (resource, token) VALUES ('tool', ?)`, big)
	clock.now.Add(int64(2 * time.Second))
	n, err := sqlite.SweepNow(ctx, s)
	if err != nil || n != 5 {
		t.Fatalf("sweep: %d, %v; want 5 rows deleted", n, err)
	}
	if rows := rowCount(t, db); rows != 1 {
		t.Fatalf("%d rows after the sweep; want the live lease only", rows)
	}
	if c := counter(t, db); c < big {
		t.Fatalf("counter %d after sweeping a row with token %d", c, big)
	}
	if _, err := s.Get(ctx, "r0"); err != nil {
		t.Fatalf("the live lease after the sweep: %v", err)
	}
}

// Rule 8: a renewal or release of a grant that no longer holds the
// resource says who holds it now (a *HeldError under ErrLeaseLost), or
// that nobody does.
func TestNotHolderNamesTheHolder(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	a, _ := naming.NewOwner("a")
	b, _ := naming.NewOwner("b")
	ra, err := s.Acquire(ctx, "r", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "r", a, ra.Token); err != nil {
		t.Fatal(err)
	}
	rb, err := s.Acquire(ctx, "r", b, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"renew":   s.Renew(ctx, "r", a, ra.Token, time.Minute),
		"release": s.Release(ctx, "r", a, ra.Token),
		"batch":   s.RenewBatch(ctx, []driver.Renewal{{Resource: "r", Owner: a, Token: ra.Token, TTL: time.Minute}})[0],
	} {
		var held *tenure.HeldError
		if !errors.Is(err, tenure.ErrLeaseLost) || !errors.As(err, &held) || held.Holder.Owner != b || held.Holder.Token != rb.Token {
			t.Errorf("%s of a's grant while b holds: %v; want ErrLeaseLost and a HeldError naming b", name, err)
		}
	}
	if err := s.Release(ctx, "r", b, rb.Token); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"renew":   s.Renew(ctx, "r", a, ra.Token, time.Minute),
		"release": s.Release(ctx, "r", b, rb.Token),
	} {
		var held *tenure.HeldError
		if !errors.Is(err, tenure.ErrLeaseLost) || errors.As(err, &held) {
			t.Errorf("%s when nobody holds: %v; want ErrLeaseLost without a holder", name, err)
		}
	}
}
