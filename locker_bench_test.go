package tenure_test

import (
	"testing"

	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

// BenchmarkCore measures the core (Locker and Lease) on the in-memory
// store, where the store costs almost nothing:
//
//	go test -run '^$' -bench Core -benchmem .
func BenchmarkCore(b *testing.B) {
	s := memory.New()
	defer s.Close()
	storetest.Benchmarks(b, s, "bench", "", nil)
}
