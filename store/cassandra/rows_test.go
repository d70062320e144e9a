package cassandra_test

import (
	"context"
	"errors"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure"
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

var _ = context.Background
var _ = tenure.ErrHeld
