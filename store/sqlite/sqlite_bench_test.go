package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tenure-go/tenure/internal/bench"
)

// BenchmarkSQLite measures the SQLite store on a file in a temporary
// directory, counting the statements it runs (SQLite's authorizer):
//
//	go test -run '^$' -bench SQLite -benchmem ./store/sqlite/
func BenchmarkSQLite(b *testing.B) {
	t, err := bench.Open(context.Background(), "sqlite:"+filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	bench.GoBenchmarks(b, t.Store, "bench", bench.KindStatement, func() int64 { return t.Meter.Snapshot()[bench.KindStatement] })
}
