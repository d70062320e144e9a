package cassandra_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/cassandra"
)

// TestFairnessAcrossProcesses: a process that takes the resource again as
// soon as it released it (Do in a loop, 50 ms of work) does not starve a
// waiter in another process. Cassandra sends no release notifications, so
// the waiter polls; its attempts reserve the resource (the waiter cell),
// and the holder's next acquire is refused until the waiter was granted.
func TestFairnessAcrossProcesses(t *testing.T) {
	needSingle(t)
	s := openStore(t, cassandra.ModeNative, nil)
	if !s.Reservations() {
		t.Fatal("the store keeps no reservations on a table that Init created")
	}
	testserver.Fairness(t, s, runKeyspace, 10, 30*time.Second)
}

// TestReservationsAfterUpgrade: a native table of an earlier version has
// no waiter column. A Store on it keeps no reservations (AcquireWaiting is
// Acquire) and works as before; Init adds the column, without touching the
// leases, and a Store opened after that keeps reservations.
func TestReservationsAfterUpgrade(t *testing.T) {
	ctx := testCtx(t)
	native, _ := stores(t)
	table := "old_" + randHex(4)
	if err := native.Session().Query(`CREATE TABLE ` + runKeyspace + `.` + table + ` (
		resource text PRIMARY KEY, owner text, fencing_token bigint, ttl_ms bigint, write_id bigint)`).WithContext(ctx).Exec(); err != nil {
		t.Fatal(err)
	}
	edit := func(c *cassandra.Config) { c.Table = table }
	old := openStore(t, cassandra.ModeNative, edit)
	if old.Reservations() {
		t.Fatal("a Store on a table without the waiter column says it keeps reservations")
	}
	r := resource(t, "r")
	a, w := owner(t, "a"), owner(t, "w")
	rec, err := old.Acquire(ctx, r, a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.AcquireWaiting(ctx, r, w, w+"/waiting", time.Minute, 2*time.Second); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("AcquireWaiting on the old table: %v; want ErrHeld", err)
	}
	if err := old.Unreserve(ctx, r, w+"/waiting"); err != nil {
		t.Fatalf("Unreserve on the old table: %v", err)
	}
	cfg := baseConfig(t, cassandra.ModeNative)
	edit(&cfg)
	if err := cassandra.Init(ctx, cfg); err != nil {
		t.Fatalf("Init on the old table: %v", err)
	}
	if err := cassandra.Init(ctx, cfg); err != nil {
		t.Fatalf("Init again: %v", err)
	}
	upgraded := openStore(t, cassandra.ModeNative, edit)
	if !upgraded.Reservations() {
		t.Fatal("a Store opened after Init keeps no reservations")
	}
	got, err := upgraded.Get(ctx, r)
	if err != nil || got.Owner != a || got.Token != rec.Token {
		t.Fatalf("the lease after Init: %+v, %v; want %s's with token %d", got, err, a, rec.Token)
	}
	// The waiter reserves it; the holder's next acquire is refused.
	if _, err := upgraded.AcquireWaiting(ctx, r, w+".1", w+"/waiting", time.Minute, 30*time.Second); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("AcquireWaiting: %v; want ErrHeld", err)
	}
	if err := upgraded.Release(ctx, r, a, rec.Token); err != nil {
		t.Fatal(err)
	}
	var held *tenure.HeldError
	if _, err := upgraded.Acquire(ctx, r, a+".2", time.Minute); !errors.As(err, &held) || !held.Reserved || held.Holder.Owner != w+"/waiting" {
		t.Fatalf("the holder acquiring again: %v; want reserved for the waiter", err)
	}
}
