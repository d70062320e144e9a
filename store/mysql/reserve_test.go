package mysql_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/mysql"
)

// TestMain lets the test binary act as the holder of
// testserver.Fairness.
func TestMain(m *testing.M) {
	testserver.FairHolderMain(func(ctx context.Context, url string) (driver.Store, error) {
		return mysql.OpenURL(ctx, url)
	})
	os.Exit(m.Run())
}

// TestFairnessAcrossProcesses: a process that takes the resource again as
// soon as it released it (Do in a loop, 50 ms of work) does not starve a
// waiter in another process. The waiter's poll sees the resource free
// only in the moment between the holder's release and its next acquire,
// so without reservations it would lose every race; its attempts reserve
// the resource (driver.Reserver), and the holder's next acquire is refused
// until the waiter was granted.
func TestFairnessAcrossProcesses(t *testing.T) {
	testserver.FairnessInTurn(t, open(t), dsn(t), 10, 20*time.Second, 3)
}

// TestGaleraFairnessAcrossProcesses: the same with the holder on one
// Galera node and the waiter on another: the reservation is certified
// by the cluster before the holder's next acquire reads it.
func TestGaleraFairnessAcrossProcesses(t *testing.T) {
	nodes := galeraNodes(t)
	s := openNode(t, 1)
	testserver.FairnessInTurn(t, s, "mysql://tenure@"+nodes[0]+"/tenure", 10, 20*time.Second, 3)
}

// TestReservationsAfterUpgrade: on the tables of an earlier version (no
// reservations table) a Store keeps no reservations: a waiting attempt
// reserves nothing, and the holder takes the resource again at once.
// Init creates the table beside them, and a Store opened then keeps
// them. A reservations table that is not tenure's is refused by Init and
// by every Store.
func TestReservationsAfterUpgrade(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	admin := open(t, tb.cfg)
	tb.sql(t, admin, `DROP TABLE %[1]s_waits`)
	a, w := owner(t, "a"), owner(t, "w")
	old := open(t, tb.cfg)
	rec := mustAcquire(ctx, t, old, "r", a)
	if !errors.Is(func() error {
		_, err := old.AcquireWaiting(ctx, "r", w, w+"/waiting", time.Minute, time.Minute)
		return err
	}(), driver.ErrHeld) {
		t.Fatal("AcquireWaiting on a held resource: not held")
	}
	if old.Reservations() {
		t.Fatal("Reservations() on tables without the reservations table")
	}
	if err := old.Release(ctx, "r", a, rec.Token); err != nil {
		t.Fatal(err)
	}
	rec = mustAcquire(ctx, t, old, "r", a) // no reservation kept it
	if err := mysql.Init(ctx, config(t, tb.cfg)); err != nil {
		t.Fatal(err)
	}
	s := open(t, tb.cfg)
	if _, err := s.AcquireWaiting(ctx, "r", w, w+"/waiting", time.Minute, time.Minute); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("AcquireWaiting on a held resource: %v", err)
	}
	if !s.Reservations() {
		t.Fatal("no reservations after Init created the table")
	}
	if err := s.Release(ctx, "r", a, rec.Token); err != nil {
		t.Fatal(err)
	}
	var held *driver.HeldError
	if _, err := s.Acquire(ctx, "r", a, time.Minute); !errors.As(err, &held) || !held.Reserved || held.Holder.Owner != w+"/waiting" {
		t.Fatalf("the holder's acquire after its release: %v; want reserved for the waiter", err)
	}
	// A reservations table that is not tenure's: the waiter compared
	// without regard to case.
	tb.sql(t, admin, `DROP TABLE %[1]s_waits`)
	tb.sql(t, admin, `CREATE TABLE %[1]s_waits (resource VARBINARY(256) NOT NULL PRIMARY KEY, waiter VARCHAR(256) COLLATE utf8mb4_general_ci NOT NULL,
		token BIGINT UNSIGNED NOT NULL, expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB`)
	if err := mysql.Init(ctx, config(t, tb.cfg)); !errors.Is(err, driver.ErrNotStore) || !strings.Contains(err.Error(), "waiter") {
		t.Fatalf("Init with another reservations table: %v; want ErrNotStore naming the waiter column", err)
	}
	if _, err := open(t, tb.cfg).Acquire(ctx, "r2", a, time.Minute); !errors.Is(err, driver.ErrNotStore) {
		t.Fatalf("Acquire with another reservations table: %v; want ErrNotStore", err)
	}
}
