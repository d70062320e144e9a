package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

// Benchmarks runs, as sub-benchmarks of b, the Go benchmarks that every
// store shares, on store s:
//
//	StoreAcquireRelease   Store.Acquire then Store.Release of one resource
//	StoreRenew            Store.Renew of one held lease
//	LockerCycle           Locker.TryAcquire, Lease.Renew, Lease.Release
//	LockerCycleTimeout    the same, each call on a context with a timeout
//	LockerCycleParallel   the same with GOMAXPROCS goroutines (b.RunParallel),
//	                      each with its own Locker and resource
//
// Each iteration is one acquire+release, renewal or cycle. When count is
// not nil it returns the store requests of kind unit sent so far (a Meter's
// count, a test's LWT counter), and each benchmark reports unit/op.
func Benchmarks(b *testing.B, s driver.Store, prefix string, unit string, count func() int64) {
	const ttl = 30 * time.Second
	report := func(b *testing.B, before int64) {
		if count != nil && b.N > 0 {
			b.ReportMetric(float64(count()-before)/float64(b.N), unit+"/op")
		}
	}
	start := func() int64 {
		if count == nil {
			return 0
		}
		return count()
	}
	ctx := context.Background()
	b.Run("StoreAcquireRelease", func(b *testing.B) {
		owner, _ := naming.NewOwner("bench")
		r := prefix + "/store-acquire-release"
		before := start()
		for b.Loop() {
			rec, err := s.Acquire(ctx, r, owner, ttl)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Release(ctx, r, owner, rec.Token); err != nil {
				b.Fatal(err)
			}
		}
		report(b, before)
	})
	b.Run("StoreRenew", func(b *testing.B) {
		owner, _ := naming.NewOwner("bench")
		r := prefix + "/store-renew"
		rec, err := s.Acquire(ctx, r, owner, ttl)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Release(ctx, r, owner, rec.Token)
		before := start()
		for b.Loop() {
			if err := s.Renew(ctx, r, owner, rec.Token, ttl); err != nil {
				b.Fatal(err)
			}
		}
		report(b, before)
	})
	cycle := func(lk *tenure.Locker, r string) error {
		l, err := lk.TryAcquire(ctx, r, ttl)
		if err != nil {
			return err
		}
		if err := l.Renew(ctx); err != nil {
			return err
		}
		return l.Release(ctx)
	}
	// timed runs op on a context of its own with a timeout, as services
	// call libraries (and as the peers benchmark does).
	timed := func(op func(context.Context) error) error {
		octx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return op(octx)
	}
	cycleTimed := func(lk *tenure.Locker, r string) error {
		var l *tenure.Lease
		if err := timed(func(ctx context.Context) (err error) { l, err = lk.TryAcquire(ctx, r, ttl); return err }); err != nil {
			return err
		}
		if err := timed(l.Renew); err != nil {
			return err
		}
		return timed(l.Release)
	}
	b.Run("LockerCycle", func(b *testing.B) {
		lk, err := tenure.New(s, tenure.WithOwnerID("bench"))
		if err != nil {
			b.Fatal(err)
		}
		defer lk.Close(ctx)
		r := prefix + "/locker-cycle"
		before := start()
		for b.Loop() {
			if err := cycle(lk, r); err != nil {
				b.Fatal(err)
			}
		}
		report(b, before)
	})
	b.Run("LockerCycleTimeout", func(b *testing.B) {
		lk, err := tenure.New(s, tenure.WithOwnerID("bench"))
		if err != nil {
			b.Fatal(err)
		}
		defer lk.Close(ctx)
		r := prefix + "/locker-cycle-timeout"
		before := start()
		for b.Loop() {
			if err := cycleTimed(lk, r); err != nil {
				b.Fatal(err)
			}
		}
		report(b, before)
	})
	b.Run("LockerCycleParallel", func(b *testing.B) {
		var n atomic.Int64
		before := start()
		b.RunParallel(func(pb *testing.PB) {
			lk, err := tenure.New(s, tenure.WithOwnerID("bench"))
			if err != nil {
				b.Error(err)
				return
			}
			defer lk.Close(ctx)
			r := fmt.Sprintf("%s/locker-cycle-parallel/%d", prefix, n.Add(1))
			for pb.Next() {
				if err := cycle(lk, r); err != nil {
					b.Error(err) // not Fatal: this is not the benchmark's goroutine
					return
				}
			}
		})
		report(b, before)
	})
}
