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
