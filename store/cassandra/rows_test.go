package cassandra_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/cassandra"
)

// tableStore creates a native table of its own in the run's keyspace (its
// CQL from cassandra.Schema), runs the extra statements on it (ALTER TABLE
// ... with the table's name in place of %s), and opens a store on it.
func tableStore(t *testing.T, table string, alter ...string) *cassandra.Store {
	t.Helper()
	stores(t)
	ctx := testCtx(t)
	cfg := baseConfig(t, cassandra.ModeNative)
	cfg.Table = table
	if err := cassandra.Init(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, cassandra.ModeNative, func(c *cassandra.Config) { c.Table = table })
	for _, a := range alter {
		if err := s.Session().Query(a).Consistency(gocql.All).WithContext(ctx).Exec(); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
	}
	return s
}

// tokenTTL reads TTL(fencing_token) of a row: 0 when the cell has none.
func tokenTTL(t *testing.T, s *cassandra.Store, res string) (token int64, ttl int, found bool) {
	t.Helper()
	var tok, secs *int64
	err := s.Session().Query(`SELECT fencing_token, TTL(fencing_token) FROM `+runKeyspace+`.`+s.Table()+` WHERE resource = ?`, res).
		Consistency(gocql.Serial).Scan(&tok, &secs)
	if errors.Is(err, gocql.ErrNotFound) {
		return 0, 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if tok != nil {
		token = *tok
	}
	if secs != nil {
		ttl = int(*secs)
	}
	return token, ttl, true
}

// TestTokenIgnoresDefaultTTL: an operator may create or alter the lease
// table with default_time_to_live. Fencing tokens are written with an
// explicit USING TTL 0 (inside the grant's conditional batch, which applies
// each statement's own TTL), so they never expire: after the table's
// default TTL has passed, the row still has the token, and the next grant
// continues above it, from a store that has no cached view. The owner keeps
// the lease's own TTL, not the table's.
func TestTokenIgnoresDefaultTTL(t *testing.T) {
	s := tableStore(t, "leases_default_ttl", `ALTER TABLE `+runKeyspace+`.leases_default_ttl WITH default_time_to_live = 2`)
	ctx := testCtx(t)
	newRes, usedRes := resource(t, "new"), resource(t, "used")
	a := owner(t, "a")

	// usedRes goes through both grant statements: the batch that creates the
	// row, then (after a release) the batch that grants a free row.
	first, err := s.Acquire(ctx, usedRes, a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, usedRes, a, first.Token); err != nil {
		t.Fatal(err)
	}
	second, err := s.Acquire(ctx, usedRes, owner(t, "a"), 10*time.Second)
	if err != nil || second.Token <= first.Token {
		t.Fatalf("second grant %+v, %v; want a token above %d", second, err, first.Token)
	}
	if got := serialRow(t, s.Session(), s.Table(), usedRes); got.remaining < 9 {
		t.Fatalf("TTL(owner) = %d after a grant with TTL 10 s; want the lease's TTL, not the table's default", got.remaining)
	}
	if err := s.Release(ctx, usedRes, second.Owner, second.Token); err != nil {
		t.Fatal(err)
	}
	fresh, err := s.Acquire(ctx, newRes, a, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		res   string
		token uint64
	}{{usedRes, second.Token}, {newRes, fresh.Token}} {
		if tok, ttl, found := tokenTTL(t, s, c.res); !found || uint64(tok) != c.token || ttl != 0 {
			t.Fatalf("%s: token %d with TTL %d (found %v); want token %d without TTL", c.res, tok, ttl, found, c.token)
		}
	}
	time.Sleep(3500 * time.Millisecond) // past the table's default TTL and newRes's lease
	other := openStore(t, cassandra.ModeNative, func(c *cassandra.Config) { c.Table = s.Table() })
	for _, c := range []struct {
		res   string
		token uint64
	}{{usedRes, second.Token}, {newRes, fresh.Token}} {
		if tok, _, found := tokenTTL(t, s, c.res); !found || uint64(tok) != c.token {
			t.Fatalf("%s after the default TTL: token %d (row found: %v); want %d", c.res, tok, found, c.token)
		}
		next, err := other.Acquire(ctx, c.res, owner(t, "b"), time.Minute)
		if err != nil || next.Token <= c.token {
			t.Fatalf("%s: grant after the default TTL %+v, %v; want a token above %d", c.res, next, err, c.token)
		}
	}
}

// TestOpenTableWithDefaultTTL: Open accepts a lease table with
// default_time_to_live (every write names its TTL, so the default never
// applies), and the store works on it.
func TestOpenTableWithDefaultTTL(t *testing.T) {
	s := tableStore(t, "leases_default_ttl2", `ALTER TABLE `+runKeyspace+`.leases_default_ttl2 WITH default_time_to_live = 60`)
	ctx := testCtx(t)
	r := resource(t, "r")
	rec, err := s.Acquire(ctx, r, owner(t, "a"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, ttl, _ := tokenTTL(t, s, r); ttl != 0 {
		t.Fatalf("token written with TTL %d; want none", ttl)
	}
	if err := s.Release(ctx, r, rec.Owner, rec.Token); err != nil {
		t.Fatal(err)
	}
}

// plainExec runs a plain (not conditional) statement on the run's native table,
// as another tool or an operator would.
func plainExec(t *testing.T, s *cassandra.Store, stmt string, args ...any) {
	t.Helper()
	stmt = strings.ReplaceAll(stmt, "T.", runKeyspace+"."+s.Table())
	if err := s.Session().Query(stmt, args...).Consistency(gocql.Quorum).Exec(); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// TestPartialRows: rows left half-written by another tool neither block
// the resource forever nor reset its token. A free row without a valid
// token is granted (above the clock floor); a row whose owner expires is
// held until then; one whose owner never expires is refused with an error
// that says how to repair it, and granted once repaired.
func TestPartialRows(t *testing.T) {
	ctx := testCtx(t)
	s, _ := stores(t)
	start := uint64(time.Now().UnixMicro())
	grant := func(t *testing.T, s *cassandra.Store, r string, above uint64) driver.Record {
		t.Helper()
		rec, err := s.Acquire(ctx, r, owner(t, "b"), time.Minute)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if rec.Token <= above || rec.Token < start {
			t.Fatalf("token %d; want above %d and the clock floor %d", rec.Token, above, start)
		}
		if row := serialRow(t, s.Session(), s.Table(), r); row.owner != rec.Owner || uint64(row.token) != rec.Token {
			t.Fatalf("row after the grant: %+v; want %+v", row, rec)
		}
		return rec
	}
	for _, c := range []struct {
		name, stmt string
		args       []any
		above      uint64
	}{
		{"TokenWithoutOwner", `INSERT INTO T. (resource, fencing_token) VALUES (?, 42)`, nil, 42},
		{"NoTokenNoOwner", `INSERT INTO T. (resource, ttl_ms) VALUES (?, 5000)`, nil, 0},
		{"NegativeToken", `INSERT INTO T. (resource, fencing_token) VALUES (?, -5)`, nil, 0},
		{"ZeroToken", `INSERT INTO T. (resource, fencing_token, write_id) VALUES (?, 0, 1)`, nil, 0},
		{"HugeTokenWithoutOwner", `INSERT INTO T. (resource, fencing_token) VALUES (?, 4000000000000000)`, nil, 4_000_000_000_000_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := resource(t, "r")
			plainExec(t, s, c.stmt, r)
			grant(t, s, r, c.above)                          // a store whose view is empty
			fresh := openStore(t, cassandra.ModeNative, nil) // and one more, after the repair
			next, err := fresh.Acquire(ctx, r, owner(t, "c"), time.Minute)
			if !errors.Is(err, tenure.ErrHeld) || next.Token != 0 {
				t.Fatalf("second acquire: %+v, %v; want held", next, err)
			}
		})
	}

	t.Run("OwnerWithoutTokenExpires", func(t *testing.T) {
		r := resource(t, "r")
		plainExec(t, s, `INSERT INTO T. (resource, owner) VALUES (?, 'other-tool') USING TTL 2`, r)
		_, err := s.Acquire(ctx, r, owner(t, "b"), time.Minute)
		var held *tenure.HeldError
		if !errors.As(err, &held) || held.Holder.Owner != "other-tool" || held.Holder.Token != 0 || held.Holder.Remaining <= 0 {
			t.Fatalf("acquire of a row held without a token: %v; want a HeldError naming other-tool, token 0, with the time left", err)
		}
		waitUntil(t, 5*time.Second, func() bool { _, err := s.Get(ctx, r); return errors.Is(err, tenure.ErrNotHeld) })
		grant(t, s, r, 0)
	})

	// A holder whose owner cell never expires: with no valid token it is
	// refused at once; with one, once this store has seen it hold for
	// heldCheckAfter (a clock of the test's). The error says how to repair;
	// after the repair the next grant continues above the row's token.
	for _, c := range []struct {
		name, stmt string
		token      uint64
	}{
		{"OwnerWithoutTTL", `INSERT INTO T. (resource, owner, fencing_token, ttl_ms) VALUES (?, 'forever', 7, 1000)`, 7},
		{"OwnerWithoutTTLOrToken", `INSERT INTO T. (resource, owner) VALUES (?, 'forever')`, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := resource(t, "r")
			plainExec(t, s, c.stmt, r)
			st := openStore(t, cassandra.ModeNative, nil)
			var mu sync.Mutex
			now := time.Now()
			cassandra.SetClock(st, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
			_, err := st.Acquire(ctx, r, owner(t, "b"), time.Minute)
			var held *tenure.HeldError
			if c.token > 0 {
				if !errors.As(err, &held) || held.Holder.Owner != "forever" || held.Holder.Token != c.token {
					t.Fatalf("first acquire: %v; want a HeldError naming the holder", err)
				}
				mu.Lock()
				now = now.Add(31 * time.Second)
				mu.Unlock()
				_, err = st.Acquire(ctx, r, owner(t, "b"), time.Minute)
			}
			if !errors.Is(err, cassandra.ErrForeignRow) || !errors.Is(err, tenure.ErrHeld) || errors.As(err, &held) ||
				!strings.Contains(err.Error(), "SET owner = null") {
				t.Fatalf("acquire of a row whose owner never expires: %v; want ErrForeignRow (and ErrHeld, no HeldError) saying how to repair", err)
			}
			t.Logf("%v", err)
			// Refused from then on without another read, until the row changes.
			if _, err := st.Acquire(ctx, r, owner(t, "b"), time.Minute); !errors.Is(err, cassandra.ErrForeignRow) {
				t.Fatalf("acquire again: %v", err)
			}
			if err := s.Session().Query(`UPDATE `+runKeyspace+`.`+s.Table()+` SET owner = null, ttl_ms = null WHERE resource = ? IF owner = 'forever'`, r).Exec(); err != nil {
				t.Fatal(err)
			}
			grant(t, st, r, c.token)
		})
	}

	// A row deleted by hand (the token starts over, from the row's point
	// of view): a store with no cached view grants above the clock floor,
	// so the token does not go back; the holder of the deleted lease is
	// told who holds the resource now.
	t.Run("RowDeleted", func(t *testing.T) {
		r := resource(t, "r")
		first, err := s.Acquire(ctx, r, owner(t, "a"), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		plainExec(t, s, `DELETE FROM T. WHERE resource = ?`, r)
		other := openStore(t, cassandra.ModeNative, nil)
		rec := grant(t, other, r, first.Token)
		err = s.Renew(ctx, r, first.Owner, first.Token, time.Minute)
		var held *tenure.HeldError
		if !errors.Is(err, tenure.ErrLeaseLost) || !errors.As(err, &held) || held.Holder.Owner != rec.Owner || held.Holder.Token != rec.Token {
			t.Fatalf("renewal of the deleted lease: %v; want ErrLeaseLost naming %s", err, rec.Owner)
		}
	})
}

// TestNotHolderNamesHolder: a renewal or release of a grant that no longer
// holds returns ErrLeaseLost and, when another grant holds the resource, a
// *HeldError naming it, from the not-applied result (1 LWT, no read); with
// no holder, no HeldError.
func TestNotHolderNamesHolder(t *testing.T) {
	ctx := testCtx(t)
	native, jaeger := stores(t)
	for _, c := range []struct {
		name    string
		s       *cassandra.Store
		forceFn string
	}{
		{"Native", native, `UPDATE %s SET owner = null, ttl_ms = null WHERE resource = ? IF owner = ?`},
		{"Jaeger", jaeger, `DELETE FROM %s WHERE name = ? IF owner = ?`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.s
			r := resource(t, "r")
			a, b := owner(t, "a"), owner(t, "b")
			first, err := s.Acquire(ctx, r, a, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			// An operator frees it; b takes it.
			force := fmt.Sprintf(c.forceFn, runKeyspace+"."+s.Table())
			if err := s.Session().Query(force, r, a).Exec(); err != nil {
				t.Fatal(err)
			}
			second, err := s.Acquire(ctx, r, b, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range []struct {
				name string
				f    func() error
			}{
				{"Renew", func() error { return s.Renew(ctx, r, a, first.Token, time.Minute) }},
				{"Release", func() error { return s.Release(ctx, r, a, first.Token) }},
			} {
				err := op.f()
				var held *tenure.HeldError
				if !errors.Is(err, tenure.ErrLeaseLost) || !errors.As(err, &held) || held.Holder.Owner != b || held.Holder.Token != second.Token {
					t.Fatalf("%s of the replaced grant: %v; want ErrLeaseLost with a HeldError naming %s, token %d", op.name, err, b, second.Token)
				}
			}
			if err := s.Release(ctx, r, b, second.Token); err != nil {
				t.Fatal(err)
			}
			err = s.Renew(ctx, r, a, first.Token, time.Minute)
			var held *tenure.HeldError
			if !errors.Is(err, tenure.ErrLeaseLost) || errors.As(err, &held) {
				t.Fatalf("renewal with no holder: %v; want ErrLeaseLost without a HeldError", err)
			}
		})
	}
}
