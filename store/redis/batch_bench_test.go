package redis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
)

// BenchmarkRenewBatch: one RenewBatch call of 1,000 leases (the core's
// largest batch); ns/op is per call.
func BenchmarkRenewBatch(b *testing.B) {
	s := open(b)
	ctx := testserver.Ctx(b)
	base := "tenuretest/BenchmarkRenewBatch/" + fmt.Sprint(time.Now().UnixNano())
	owner, _ := tenure.NewOwner("batch")
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
