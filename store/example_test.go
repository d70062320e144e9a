package store_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store"
	_ "github.com/tenure-go/tenure/store/all" // every store's scheme; or import only those you use
)

// A program that takes its store from its configuration opens it from a
// URL; the store package checks the whole URL first, and a TTL against the
// store's limits, without any I/O.
func ExampleOpen() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tenure-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	raw := "sqlite:" + filepath.Join(dir, "leases.db") // in a program: os.Getenv("LEASE_STORE"), a flag, a file

	st, err := store.Open(ctx, raw) // "postgres://...", "etcd://...", "redis://...", "cassandra://..."
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	lk, err := tenure.New(st)
	if err != nil {
		log.Fatal(err)
	}
	defer lk.Close(ctx)
	lease, err := lk.TryAcquire(ctx, "nightly-report", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("holding", lease.Resource())
	// Output:
	// holding nightly-report
}

// Parse checks a URL without connecting, CheckTTL a TTL against what the
// store can keep, and errors and String never show a password.
func ExampleParse() {
	u, err := store.Parse("etcd://app:s3cret@10.0.0.1:2379,10.0.0.2:2379?prefix=/myapp/leases/")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(u)
	err = u.CheckTTL(500 * time.Millisecond) // etcd keeps whole seconds
	fmt.Println("500ms on etcd is refused:", errors.Is(err, tenure.ErrInvalidTTL))

	_, err = store.Parse("postgres://app:s3cret@db/locks?sslmode=verify-full&search_path=x")
	fmt.Println("a parameter the store does not take:", errors.Is(err, store.ErrBadURL))
	// Output:
	// etcd://app:xxxxx@10.0.0.1:2379,10.0.0.2:2379?prefix=/myapp/leases/
	// 500ms on etcd is refused: true
	// a parameter the store does not take: true
}
