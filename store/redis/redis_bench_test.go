package redis_test

import (
	"context"
	"testing"

	"github.com/tenure-go/tenure/internal/bench"
)

// BenchmarkRedisStore measures the store and a Locker on it, counting the
// requests the client sends (needs the server; see docs/stores.md):
//
//	go test -run '^$' -bench RedisStore -benchtime 500x ./store/redis/
func BenchmarkRedisStore(b *testing.B) {
	t, err := bench.Open(context.Background(), addr(b))
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	bench.GoBenchmarks(b, t.Store, resource(b), bench.KindCommand, func() int64 { return t.Meter.Snapshot()[bench.KindCommand] })
}
