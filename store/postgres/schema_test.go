package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/postgres"
)

// TestTableWithTenuresColumnsButNotItsTypes: a table made by hand with
// tenure's columns but other types is refused by Init and by every Store,
// which grants nothing on it. With expires_at a timestamp without time
// zone, each session writes and reads expiries in its own TimeZone: a
// lease written by a session in New York looks expired, five hours early,
// to a session in UTC (and any session misreads expiries across a change
// of daylight saving time), so two owners were granted the resource at
// once. A timestamptz with fewer than six fractional digits rounds every
// expiry (up to half a second early), and a text column with a
// nondeterministic collation makes "a" and "A" one resource.
func TestTableWithTenuresColumnsButNotItsTypes(t *testing.T) {
	ctx := testserver.Ctx(t)
	admin := open(t)
	const create = `CREATE TABLE %s (resource text %s PRIMARY KEY, owner text, token bigint NOT NULL, ttl_ms bigint,
		expires_at %s, granted_at timestamptz, waiters boolean NOT NULL)`
	if _, err := admin.Pool().Exec(ctx, `CREATE COLLATION IF NOT EXISTS tenure_test_nocase (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, collate, expires, why string
	}{
		{"timestamp without time zone", "", "timestamp", "expires_at"},
		{"whole seconds", "", "timestamptz(0)", "expires_at"},
		{"case-insensitive resource", `COLLATE tenure_test_nocase`, "timestamptz", "resource"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := fmt.Sprintf("tenure_hand_%d", time.Now().UnixNano())
			t.Cleanup(func() {
				_, _ = admin.Pool().Exec(context.Background(), "DROP TABLE IF EXISTS "+name)
				_, _ = admin.Pool().Exec(context.Background(), "DROP SEQUENCE IF EXISTS "+name+"_token_seq")
			})
			if _, err := admin.Pool().Exec(ctx, fmt.Sprintf(create, name, c.collate, c.expires)); err != nil {
				t.Fatal(err)
			}
			withTable := func(cf *postgres.Config) { cf.Table = name }
			if err := postgres.Init(ctx, config(t, withTable)); !errors.Is(err, driver.ErrNotStore) || !strings.Contains(err.Error(), c.why) {
				t.Errorf("Init: %v; want ErrNotStore naming %s", err, c.why)
			}
			// The sequence, as Init would have made it.
			if _, err := admin.Pool().Exec(ctx, "CREATE SEQUENCE IF NOT EXISTS "+name+"_token_seq AS bigint MINVALUE 1"); err != nil {
				t.Fatal(err)
			}
			zone := func(z string) func(*postgres.Config) {
				return func(cf *postgres.Config) { cf.Pool.ConnConfig.RuntimeParams["timezone"] = z }
			}
			ny := open(t, withTable, zone("America/New_York"))
			utc := open(t, withTable, zone("UTC"))
			ra, errA := ny.Acquire(ctx, "r", owner(t, "a"), time.Minute)
			rb, errB := utc.Acquire(ctx, "r", owner(t, "b"), time.Minute)
			if errA == nil && errB == nil {
				t.Fatalf("two owners granted r at once: %+v and %+v", ra, rb)
			}
			t.Log(errA)
			for _, err := range []error{errA, errB} {
				if !errors.Is(err, driver.ErrNotStore) || !strings.Contains(err.Error(), c.why) {
					t.Fatalf("Acquire: %v; want ErrNotStore naming %s", err, c.why)
				}
			}
			var n int
			if err := admin.Pool().QueryRow(ctx, "SELECT count(*) FROM "+name).Scan(&n); err != nil || n != 0 {
				t.Fatalf("%d rows in the table (%v); want it left alone", n, err)
			}
		})
	}
}
