package sqlite_test

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// alternating sends each call to the next of several store handles on one
// database file.
type alternating struct {
	stores []driver.Store
	n      atomic.Uint64
}

func (a *alternating) next() driver.Store { return a.stores[a.n.Add(1)%uint64(len(a.stores))] }

func (a *alternating) Acquire(ctx context.Context, r, o string, ttl time.Duration) (tenure.Record, error) {
	return a.next().Acquire(ctx, r, o, ttl)
}
func (a *alternating) Renew(ctx context.Context, r, o string, tok uint64, ttl time.Duration) error {
	return a.next().Renew(ctx, r, o, tok, ttl)
}
func (a *alternating) Keep(ctx context.Context, r, o string, tok uint64, keeper string, ttl time.Duration) error {
	return a.next().(driver.Keeper).Keep(ctx, r, o, tok, keeper, ttl)
}
func (a *alternating) Release(ctx context.Context, r, o string, tok uint64) error {
	return a.next().Release(ctx, r, o, tok)
}
func (a *alternating) Get(ctx context.Context, r string) (tenure.Record, error) {
	return a.next().Get(ctx, r)
}
func (a *alternating) List(ctx context.Context, p string) ([]tenure.Record, error) {
	return a.next().List(ctx, p)
}

// Close closes every handle (each is closed again, harmlessly, by its
// test's clean-up).
func (a *alternating) Close() error {
	var first error
	for _, s := range a.stores {
		if err := s.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
