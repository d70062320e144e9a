package redis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/testserver"
)

// BenchmarkRenewBatch: one RenewBatch call of 1,000 leases (the core's
// largest batch); ns/op is per call.
func BenchmarkRenewBatch(b *testing.B) {
	s := open(b)
	ctx := testserver.Ctx(b)
	base := "tenuretest/BenchmarkRenewBatch/" + fmt.Sprint(time.Now().UnixNano())
	owner, _ := naming.NewOwner("batch")
	batch := make([]driver.Renewal, 1000)
	for i := range batch {
		r := fmt.Sprintf("%s/%d", base, i)
		rec, err := s.Acquire(ctx, r, owner+".1", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		batch[i] = driver.Renewal{Resource: r, Owner: owner + ".1", Token: rec.Token, TTL: time.Minute}
	}
	b.Cleanup(func() {
		for _, r := range batch {
			_ = s.Release(ctx, r.Resource, r.Owner, r.Token)
		}
	})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, err := range s.RenewBatch(ctx, batch) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkList: List of a prefix that holds n live leases, in a database
// whose other keys are only these (SCAN walks every key of the database:
// a List costs one round trip per thousand keys of the whole database, and
// one script call per thousand leases found). The leases are written with
// a pipeline of SETs in the store's layout, under a prefix of their own,
// and expire a minute later. ns/op is per List.
func BenchmarkList(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s, prefix := prefixed(b)
			ctx := testserver.Ctx(b)
			c := s.Client()
			for i := 0; i < n; i += 1000 {
				p := c.Pipeline()
				for j := i; j < min(i+1000, n); j++ {
					p.Set(ctx, fmt.Sprintf("%slease:r/%06d", prefix, j), fmt.Sprintf("%d:owner#1.1:60000", 1e15+j), time.Minute)
				}
				if _, err := p.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				recs, err := s.List(ctx, "r/")
				if err != nil {
					b.Fatal(err)
				}
				if len(recs) != n {
					b.Fatalf("List: %d leases, want %d", len(recs), n)
				}
			}
		})
	}
}
