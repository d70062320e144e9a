package memory_test

import (
	"testing"

	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

// BenchmarkMemory: go test -run '^$' -bench . -benchmem ./store/memory/
func BenchmarkMemory(b *testing.B) {
	s := memory.New()
	defer s.Close()
	storetest.Benchmarks(b, s, "bench", "", nil)
}
