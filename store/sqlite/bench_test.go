package sqlite_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

// BenchmarkRenewBatch renews 1,000 of 100,000 held leases per call, as a
// Locker holding them does: the time per lease.
func BenchmarkRenewBatch(b *testing.B) {
	ctx := context.Background()
	s, _ := open(&testing.T{})
	defer s.Close()
	owner, _ := naming.NewOwner("bench")
	const leases, batch = 100_000, 1000
	all := make([]driver.Renewal, leases)
	var wg sync.WaitGroup
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < leases; i += 64 {
				r := fmt.Sprintf("bench/scale/%d", i)
				rec, err := s.Acquire(ctx, r, owner, time.Hour)
				if err != nil {
					panic(err)
				}
				all[i] = driver.Renewal{Resource: r, Owner: owner, Token: rec.Token, TTL: time.Hour}
			}
		}()
	}
	wg.Wait()
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := (i * batch) % leases
		for _, err := range s.RenewBatch(ctx, all[start:start+batch]) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/lease")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*batch), "cpu-ns/lease")
}

// cpuTime is the CPU time this process used so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
