package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/memory"
)

// TryAcquire makes one attempt: the second Locker is told who holds the
// resource.
func ExampleLocker_TryAcquire() {
	ctx := context.Background()
	store := memory.New() // store/sqlite or store/cassandra in production
	a, _ := tenure.New(store, tenure.WithOwnerID("indexer-a"))
	b, _ := tenure.New(store, tenure.WithOwnerID("indexer-b"))

	lease, err := a.TryAcquire(ctx, "index-cleaner", 30*time.Second)
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	fmt.Println("a holds it with fencing token", lease.Token())

	_, err = b.TryAcquire(ctx, "index-cleaner", 30*time.Second)
	var held *tenure.HeldError
	if errors.As(err, &held) {
		fmt.Println("b: held by", tenure.OwnerID(held.Holder.Owner), "with token", held.Holder.Token)
	}
	// Output:
	// a holds it with fencing token 1
	// b: held by indexer-a with token 1
}

// Acquire waits until the holder releases the lease, then works under it;
// the work stops when the lease's context ends.
func ExampleLocker_Acquire() {
	ctx := context.Background()
	store := memory.New()
	a, _ := tenure.New(store)
	b, _ := tenure.New(store)

	first, _ := a.TryAcquire(ctx, "compaction", 10*time.Second)
	go func() {
		time.Sleep(10 * time.Millisecond) // a's work
		first.Release(ctx)
	}()

	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lease, err := b.Acquire(wctx, "compaction", 10*time.Second)
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer lease.Release(ctx)
	fmt.Println("b acquired it after a released; token", lease.Token())
	// Pass lease.Context() to the work, and lease.Token() to whatever the
	// work writes to, so it can reject writes of an older holder.
	select {
	case <-lease.Context().Done():
		fmt.Println("lost:", context.Cause(lease.Context()))
	default:
		fmt.Println("still held")
	}
	// Output:
	// b acquired it after a released; token 2
	// still held
}

// Do acquires, runs the function with the lease's context and releases.
func ExampleLocker_Do() {
	ctx := context.Background()
	lk, _ := tenure.New(memory.New())
	err := lk.Do(ctx, "nightly-report", time.Minute, func(ctx context.Context) error {
		fmt.Println("writing the report while holding the lease")
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// writing the report while holding the lease
	// done: <nil>
}

// A semaphore lets at most N holders run at once across every process that
// shares the store; each slot has fencing tokens of its own.
func ExampleLocker_Semaphore() {
	ctx := context.Background()
	store := memory.New()
	var held []*tenure.SlotLease
	for _, host := range []string{"backup-1", "backup-2", "backup-3"} {
		lk, _ := tenure.New(store, tenure.WithOwnerID(host))
		sem, _ := lk.Semaphore("nightly-backup", 2) // at most two backups at once
		l, err := sem.TryAcquire(ctx, time.Minute)
		var full *tenure.SlotsHeldError
		if errors.As(err, &full) {
			fmt.Println(host, "waits:", len(full.Holders), "of", full.Slots, "slots held")
			continue
		}
		fmt.Println(host, "runs in a slot, token", l.Token())
		held = append(held, l)
	}
	for _, l := range held {
		l.Release(ctx)
	}
	// Output:
	// backup-1 runs in a slot, token 1
	// backup-2 runs in a slot, token 1
	// backup-3 waits: 2 of 2 slots held
}

// A lost lease says why: its deadline passed without a confirmed renewal
// (ErrLeaseExpired, wrapping the last store error), or the store says that
// another owner holds it now (ErrNotHolder, with a *HeldError naming it).
func ExampleLostError() {
	ctx := context.Background()
	store := memory.New()
	a, _ := tenure.New(store, tenure.WithOwnerID("a"))
	lease, _ := a.TryAcquire(ctx, "report", time.Minute)

	// An operator frees the lease, and b takes it.
	store.Release(ctx, "report", lease.Owner(), lease.Token())
	b, _ := tenure.New(store, tenure.WithOwnerID("b"))
	b.TryAcquire(ctx, "report", time.Minute)

	err := lease.Renew(ctx)
	var held *tenure.HeldError
	switch {
	case errors.Is(err, tenure.ErrNotHolder) && errors.As(err, &held):
		fmt.Println("lost to", tenure.OwnerID(held.Holder.Owner))
	case errors.Is(err, tenure.ErrLeaseExpired):
		fmt.Println("lost to an outage:", err)
	}
	fmt.Println("context cancelled:", lease.Context().Err() != nil)
	// Output:
	// lost to b
	// context cancelled: true
}
