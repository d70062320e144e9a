package tenure_test

// The examples run on the SQLite store, in a file in a temporary directory,
// as a program on one host would; across hosts the store is
// store/postgres, store/etcd, store/redis or store/cassandra, and nothing
// else changes. Fencing tokens are large numbers (every store floors them
// at the clock in microseconds), so the examples print how they compare,
// never their values.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/sqlite"
)

// openStore opens a SQLite store in a new temporary directory and returns
// it with a function that closes it and removes the directory.
func openStore() (*sqlite.Store, func()) {
	dir, err := os.MkdirTemp("", "tenure-example")
	if err != nil {
		log.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(dir, "leases.db")})
	if err != nil {
		log.Fatal(err)
	}
	return st, func() { st.Close(); os.RemoveAll(dir) }
}

// A complete program: one Locker, one lease, work under it, release.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tenure-example") // in production: a directory of your own
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "leases.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	lk, err := tenure.New(st, tenure.WithOwnerID("indexer@web-3"))
	if err != nil {
		log.Fatal(err)
	}
	defer lk.Close(ctx) // releases whatever lk still holds

	lease, err := lk.Acquire(ctx, "index-cleaner", 30*time.Second) // waits while another owner holds it
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.WithoutCancel(ctx))

	// Work with lease.Context(), which ends the moment the lease can no
	// longer be trusted, and hand lease.Token() to what the work writes to.
	fmt.Println("holding", lease.Resource(), "for", lease.TTL())
	fmt.Println("trusted now:", lease.Context().Err() == nil)
	// Output:
	// holding index-cleaner for 30s
	// trusted now: true
}

// TryAcquire makes one attempt; a second Locker is told who holds the
// resource, with the holder's fencing token.
func ExampleLocker_TryAcquire() {
	ctx := context.Background()
	st, done := openStore()
	defer done()
	a, _ := tenure.New(st, tenure.WithOwnerID("indexer-a"))
	b, _ := tenure.New(st, tenure.WithOwnerID("indexer-b"))
	defer a.Close(ctx)
	defer b.Close(ctx)

	lease, err := a.TryAcquire(ctx, "index-cleaner", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	_, err = b.TryAcquire(ctx, "index-cleaner", 30*time.Second)
	var held *tenure.HeldError
	if errors.As(err, &held) {
		fmt.Println("b: held by", tenure.OwnerID(held.Holder.Owner))
		fmt.Println("b: the holder's token is a's:", held.Holder.Token == lease.Token())
	}
	// Output:
	// b: held by indexer-a
	// b: the holder's token is a's: true
}

// Acquire waits until the holder releases the lease. The next grant's
// fencing token is larger than every earlier one, so what the lease
// protects can turn away a late write of the earlier holder.
func ExampleLocker_Acquire() {
	ctx := context.Background()
	st, done := openStore()
	defer done()
	a, _ := tenure.New(st)
	b, _ := tenure.New(st)
	defer a.Close(ctx)
	defer b.Close(ctx)

	first, err := a.TryAcquire(ctx, "compaction", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond) // a's work
		first.Release(ctx)
	}()

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second) // give up after 10s
	defer cancel()
	second, err := b.Acquire(wctx, "compaction", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release(ctx)
	fmt.Println("b holds it after a released it")
	fmt.Println("b's token > a's token:", second.Token() > first.Token())
	// Output:
	// b holds it after a released it
	// b's token > a's token: true
}

// Do acquires the lease, runs the function under it and releases it, also
// when the function panics. The function's context ends if the lease is
// lost; LeaseFromContext gives it the lease's fencing token.
func ExampleLocker_Do() {
	ctx := context.Background()
	st, done := openStore()
	defer done()
	lk, _ := tenure.New(st)
	defer lk.Close(ctx)

	err := lk.Do(ctx, "nightly-report", time.Minute, func(ctx context.Context) error {
		lease := tenure.LeaseFromContext(ctx)
		fmt.Println("writing the report with a fencing token:", lease.Token() > 0)
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// writing the report with a fencing token: true
	// done: <nil>
}

// ReleaseAfter ends the holder's work but leaves the resource held for a
// while: a job that cron starts on several hosts, whose clocks differ by a
// few seconds, runs once per tick.
func ExampleLease_ReleaseAfter() {
	ctx := context.Background()
	st, done := openStore()
	defer done()
	web1, _ := tenure.New(st, tenure.WithOwnerID("web-1"))
	web2, _ := tenure.New(st, tenure.WithOwnerID("web-2"))
	defer web1.Close(ctx)
	defer web2.Close(ctx)

	lease, err := web1.TryAcquire(ctx, "minutely-report", 2*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	// The report took a second; keep the tick for 50s from now.
	if err := lease.ReleaseAfter(ctx, 50*time.Second); err != nil {
		log.Fatal(err)
	}
	fmt.Println("web-1's lease ended:", lease.Err() != nil)

	// web-2's cron starts the job a few seconds later: skip this tick.
	_, err = web2.TryAcquire(ctx, "minutely-report", 2*time.Minute)
	fmt.Println("web-2 finds it held:", errors.Is(err, tenure.ErrHeld))
	// Output:
	// web-1's lease ended: true
	// web-2 finds it held: true
}

// A semaphore lets at most N holders run at once across every process that
// shares the store; each slot is a lease with fencing tokens of its own.
func ExampleLocker_Semaphore() {
	ctx := context.Background()
	st, done := openStore()
	defer done()
	var held []*tenure.SlotLease
	for _, host := range []string{"backup-1", "backup-2", "backup-3"} {
		lk, _ := tenure.New(st, tenure.WithOwnerID(host))
		defer lk.Close(ctx)
		sem, err := lk.Semaphore("nightly-backup", 2) // at most two backups at once
		if err != nil {
			log.Fatal(err)
		}
		slot, err := sem.TryAcquire(ctx, time.Minute)
		var full *tenure.SlotsHeldError
		if errors.As(err, &full) {
			fmt.Println(host, "waits:", len(full.Holders), "of", full.Slots, "slots held")
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(host, "runs in a slot from 1 to 2:", slot.Slot >= 1 && slot.Slot <= 2)
		held = append(held, slot)
	}
	for _, slot := range held {
		slot.Release(ctx)
	}
	// Output:
	// backup-1 runs in a slot from 1 to 2: true
	// backup-2 runs in a slot from 1 to 2: true
	// backup-3 waits: 2 of 2 slots held
}

// A shared/exclusive lock: readers hold the report shared, together; the
// writer's exclusive request finds them and is refused (TryAcquireExclusive
// names them), and is granted once they have released. Every grant's
// fencing token is larger than those of the grants before it, in either
// mode.
func ExampleLocker_RWLock() {
	ctx := context.Background()
	st, done := openStore()
	defer done()
	var readers []*tenure.Lease
	var last uint64
	for _, host := range []string{"reader-1", "reader-2"} {
		lk, _ := tenure.New(st, tenure.WithOwnerID(host))
		defer lk.Close(ctx)
		rw, err := lk.RWLock("daily-report")
		if err != nil {
			log.Fatal(err)
		}
		lease, err := rw.TryAcquireShared(ctx, time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(host, "reads; token grows:", lease.Token() > last)
		last = lease.Token()
		readers = append(readers, lease)
	}
	w, _ := tenure.New(st, tenure.WithOwnerID("writer"))
	defer w.Close(ctx)
	rw, err := w.RWLock("daily-report")
	if err != nil {
		log.Fatal(err)
	}
	_, err = rw.TryAcquireExclusive(ctx, time.Minute)
	var shared *tenure.SharedHeldError
	if errors.As(err, &shared) {
		fmt.Println("writer waits for", len(shared.Holders), "shared holders")
	}
	for _, lease := range readers {
		lease.Release(ctx)
	}
	lease, err := rw.AcquireExclusive(ctx, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("writer writes; token grows:", lease.Token() > last)
	lease.Release(ctx)
	// Output:
	// reader-1 reads; token grows: true
	// reader-2 reads; token grows: true
	// writer waits for 2 shared holders
	// writer writes; token grows: true
}

// A lease's end has a cause. Released by its holder, the cause is
// ErrReleased; lost, it is a *LostError: ErrNotHolder when the store says
// this grant no longer holds it (an operator freed it, another owner took
// it), ErrLeaseExpired when no renewal was confirmed before the deadline.
// Test ErrReleased first, so that a clean release is never taken for a
// loss, whichever way ErrReleased relates to ErrLeaseLost.
func ExampleLostError() {
	ctx := context.Background()
	st, done := openStore()
	defer done()
	a, _ := tenure.New(st, tenure.WithOwnerID("report-a"))
	b, _ := tenure.New(st, tenure.WithOwnerID("report-b"))
	defer a.Close(ctx)
	defer b.Close(ctx)
	why := func(lease *tenure.Lease) string {
		cause := context.Cause(lease.Context())
		var held *tenure.HeldError
		switch {
		case cause == nil:
			return "still held"
		case errors.Is(cause, tenure.ErrReleased):
			return "released by its holder"
		case errors.Is(cause, tenure.ErrNotHolder) && errors.As(cause, &held):
			return "lost: taken by " + tenure.OwnerID(held.Holder.Owner)
		case errors.Is(cause, tenure.ErrNotHolder):
			return "lost: freed by someone else"
		case errors.Is(cause, tenure.ErrLeaseExpired):
			return "lost: no renewal confirmed in time"
		}
		return "lost"
	}

	daily, _ := a.TryAcquire(ctx, "daily-report", time.Minute)
	daily.Release(ctx)
	fmt.Println("daily-report:", why(daily))

	// An operator frees a's lease, as "tenure release --force" does from
	// another process (here: another handle on the same file), and b takes
	// the resource.
	hourly, _ := a.TryAcquire(ctx, "hourly-report", time.Minute)
	operator, err := sqlite.Open(ctx, sqlite.Config{Path: st.Path(), MustExist: true})
	if err != nil {
		log.Fatal(err)
	}
	rec, _ := operator.Get(ctx, "hourly-report")
	if err := operator.Release(ctx, rec.Resource, rec.Owner, rec.Token); err != nil {
		log.Fatal(err)
	}
	operator.Close()
	b.TryAcquire(ctx, "hourly-report", time.Minute)

	// a learns it at its next renewal (with PostgreSQL, Redis and etcd
	// and WithReleaseWatch, from the store's notification at once); here
	// it renews now.
	err = hourly.Renew(ctx)
	fmt.Println("hourly-report:", why(hourly))
	fmt.Println("Renew says the same:", errors.Is(err, tenure.ErrNotHolder))
	// Output:
	// daily-report: released by its holder
	// hourly-report: lost: taken by report-b
	// Renew says the same: true
}
