package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/postgres"
)

// A lease that expires between a read's snapshot and the statement's
// reading of the clock, renewed by another session meanwhile, never reads
// as free: it never was. The test holds the read's snapshot open (a
// repeatable-read transaction) while the renewal commits and the old
// expiry passes, which is what a statement descheduled between its
// snapshot and its clock reading sees.
func TestReadRacingRenewalSeesTheLease(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	s := open(t, tb.cfg)
	o := owner(t, "reader-race") + ".1"
	const ttl = 300 * time.Millisecond
	rec, err := s.Acquire(ctx, "race", o, ttl)
	if err != nil {
		t.Fatal(err)
	}
	expiry := dbMicros(t, s) + uint64(ttl.Microseconds())
	tx, err := s.Pool().BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM "+tb.name); err != nil { // the snapshot
		t.Fatal(err)
	}
	if err := s.Renew(ctx, "race", o, rec.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	// Wait on the database's clock until the snapshot's expiry has passed.
	for start := time.Now(); dbMicros(t, s) < expiry; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > time.Minute {
			t.Fatal("the database's clock did not pass the lease's first expiry")
		}
	}
	got, err := postgres.GetIn(ctx, s, tx, "race")
	if err != nil || got.Owner != o {
		t.Fatalf("Get with the snapshot of before the renewal, after the old expiry: %+v, %v; want the holder", got, err)
	}
	list, err := postgres.ListIn(ctx, s, tx, "race")
	if err != nil || len(list) != 1 || list[0].Owner != o {
		t.Fatalf("List likewise: %+v, %v; want the holder", list, err)
	}
}
