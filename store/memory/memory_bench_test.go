package memory_test

import (
	"testing"

	"github.com/tenure-go/tenure/internal/bench"
	"github.com/tenure-go/tenure/store/memory"
)

// BenchmarkMemory: go test -run '^$' -bench . -benchmem ./store/memory/
func BenchmarkMemory(b *testing.B) {
	s := memory.New()
	defer s.Close()
	bench.GoBenchmarks(b, s, "bench", "", nil)
}
