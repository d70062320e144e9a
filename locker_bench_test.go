package tenure_test

import (
	"testing"

	"github.com/tenure-go/tenure/internal/bench"
	"github.com/tenure-go/tenure/store/memory"
)

// BenchmarkCore measures the core (Locker and Lease) on the in-memory
// store, where the store costs almost nothing:
//
//	go test -run '^$' -bench Core -benchmem .
func BenchmarkCore(b *testing.B) {
	s := memory.New()
	defer s.Close()
	bench.GoBenchmarks(b, s, "bench", "", nil)
}
