package postgres_test

import (
	"context"
	"testing"

	"github.com/tenure-go/tenure/internal/bench"
)

// BenchmarkPostgresStore measures the store and a Locker on it, counting the
// requests the client sends (needs the server; see docs/stores.md):
//
//	go test -run '^$' -bench PostgresStore -benchtime 500x ./store/postgres/
func BenchmarkPostgresStore(b *testing.B) {
	t, err := bench.Open(context.Background(), dsn(b))
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	bench.GoBenchmarks(b, t.Store, resource(b), bench.KindStatement, func() int64 { return t.Meter.Snapshot()[bench.KindStatement] })
}
