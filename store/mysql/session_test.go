package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/mysql"
)

// TestSessionSettingsInDSN: a DSN (or Config.MySQL) that sets one of the
// session variables the store's statements rely on is refused before any
// I/O: autocommit=0 would leave every grant uncommitted (see
// TestServerSessionDefaults).
func TestSessionSettingsInDSN(t *testing.T) {
	for _, p := range []string{"autocommit=0", "autocommit=1", "AUTOCOMMIT=false",
		"sql_safe_updates=1", "sql_select_limit=1", "sql_big_selects=0", "max_join_size=1", "@@autocommit=0", "@@session.autocommit=0"} {
		// 127.0.0.1:1: nothing listens there; the error must come first.
		_, err := mysql.Open(context.Background(), mysql.Config{DSN: "u:pw@tcp(127.0.0.1:1)/db?" + p})
		name := strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(strings.Split(p, "=")[0], "@@"), "session."))
		if err == nil || !strings.Contains(err.Error(), name) || strings.Contains(err.Error(), "dial") {
			t.Errorf("Open with %s: %v; want an error naming %s, before connecting", p, err, name)
		}
	}
}

// TestServerSessionDefaults (TENURE_SERVER_FAULTS=1: it changes the
// server's global settings for its duration): the server's defaults for
// new sessions (my.cnf, SET GLOBAL, init_connect) do not change what the
// store's statements do. Each case sets the server's default, then checks
// the store:
//
//   - autocommit=0: every statement of a session would run in one
//     transaction that nothing commits. A grant is then visible to nobody
//     but its session, and when that session ends (KILL, wait_timeout, a
//     proxy restart) it is rolled back: another owner is granted the
//     resource while the first still holds it. And the release poll of a
//     store would read the same old snapshot for ever, so that waiters
//     in other processes were never woken.
//   - completion_type=CHAIN: a COMMIT would start a new transaction on
//     its connection, with the same effect for every later statement of
//     that connection; the store sends none, the sweep included.
//   - sql_safe_updates=1, sql_select_limit=1, max_join_size=1: renewals
//     of many leases in one statement would fail or report renewed leases
//     lost, List would show one lease, the sweep would fail.
func TestServerSessionDefaults(t *testing.T) {
	if os.Getenv("TENURE_SERVER_FAULTS") != "1" {
		t.Skip("set TENURE_SERVER_FAULTS=1 to run tests that change the server's global settings")
	}
	admin := open(t)
	globals := func(t *testing.T, set map[string]string) {
		t.Helper()
		ctx := testserver.Ctx(t)
		for k, v := range set {
			var old string
			if err := admin.DB().QueryRowContext(ctx, "SELECT @@GLOBAL."+k).Scan(&old); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.DB().ExecContext(ctx, fmt.Sprintf("SET GLOBAL %s = %s", k, v)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				v := old
				if strings.Trim(old, "0123456789") != "" {
					v = "'" + old + "'"
				}
				if _, err := admin.DB().ExecContext(context.Background(), fmt.Sprintf("SET GLOBAL %s = %s", k, v)); err != nil {
					t.Errorf("restoring the server's %s: %v", k, err)
				}
			})
		}
	}
	// grantSurvivesSessionEnd: a grant of holder is seen by another store
	// and outlives the end of holder's sessions.
	grantSurvivesSessionEnd := func(t *testing.T, tb table, holder *mysql.Store) {
		t.Helper()
		ctx := testserver.Ctx(t)
		other := open(t, tb.cfg)
		a, b := owner(t, "a"), owner(t, "b")
		ra := mustAcquire(ctx, t, holder, "r", a)
		if rec, err := other.Get(ctx, "r"); err != nil || rec.Token != ra.Token {
			t.Errorf("another store reads %+v, %v; want the lease granted to A", rec, err)
		}
		kill(t, admin, connIDs(t, holder, 1))
		if rb, err := other.Acquire(ctx, "r", b, time.Minute); !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("B's acquire while A holds r (A's session ended): %+v, %v; want ErrHeld", rb, err)
		}
		if err := holder.Renew(ctx, "r", a, ra.Token, time.Minute); err != nil {
			t.Fatalf("A's renewal: %v", err)
		}
	}
	t.Run("autocommit=0", func(t *testing.T) {
		tb := newTable(t)
		globals(t, map[string]string{"autocommit": "0"})
		grantSurvivesSessionEnd(t, tb, open(t, tb.cfg, withConns(1)))
		// A waiter on another store, whose backoff is an hour, learns of
		// the release from its store's poll, which must not read an old
		// snapshot.
		d := testserver.WakeOnce(t, open(t, tb.cfg), open(t, tb.cfg, withConns(1)), "w")
		t.Logf("waiter granted %v after the release", d)
	})
	t.Run("completion_type=CHAIN", func(t *testing.T) {
		tb := newTable(t)
		globals(t, map[string]string{"completion_type": "'CHAIN'"})
		holder := open(t, tb.cfg, withConns(1), func(c *mysql.Config) { c.SweepInterval = -1 })
		// A row the sweep deletes at once (no owner, no time): the sweep
		// runs its transaction.
		tb.sql(t, holder, `INSERT INTO %[1]s (resource, token) VALUES ('partial', 1)`)
		if n, err := holder.Sweep(testserver.Ctx(t)); err != nil || n != 1 {
			t.Fatalf("Sweep: %d, %v; want 1 row", n, err)
		}
		grantSurvivesSessionEnd(t, tb, holder)
	})
	t.Run("limits", func(t *testing.T) {
		tb := newTable(t)
		globals(t, map[string]string{"sql_safe_updates": "1", "sql_select_limit": "1", "max_join_size": "1"})
		ctx := testserver.Ctx(t)
		s := open(t, tb.cfg)
		a := owner(t, "a")
		var leases []driver.Renewal
		for _, r := range []string{"l/1", "l/2", "l/3"} {
			rec := mustAcquire(ctx, t, s, r, a)
			leases = append(leases, driver.Renewal{Resource: r, Owner: a, Token: rec.Token, TTL: time.Minute})
		}
		gone := driver.Renewal{Resource: "l/4", Owner: a, Token: 1, TTL: time.Minute}
		errs := s.RenewBatch(ctx, append(leases, gone))
		for i, err := range errs[:3] {
			if err != nil {
				t.Errorf("renewal of the live lease %s: %v", leases[i].Resource, err)
			}
		}
		lostTo(t, "renewal of a lease that does not exist", errs[3], "", 0)
		if recs, err := s.List(ctx, "l/"); err != nil || len(recs) != 3 {
			t.Errorf("List: %d leases, %v; want 3", len(recs), err)
		}
		tb.sql(t, s, `INSERT INTO %[1]s (resource, token) VALUES ('partial', 1), ('partial2', 1)`)
		if n, err := s.Sweep(ctx); err != nil || n != 2 {
			t.Errorf("Sweep: %d, %v; want 2 rows", n, err)
		}
	})
}
