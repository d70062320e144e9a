package etcd_test

import (
	"context"
	"testing"

	"github.com/tenure-go/tenure/internal/bench"
)

// BenchmarkEtcdStore measures the store and a Locker on it, counting the
// requests the client sends (needs the server; see docs/stores.md):
//
//	go test -run '^$' -bench EtcdStore -benchtime 500x ./store/etcd/
func BenchmarkEtcdStore(b *testing.B) {
	t, err := bench.Open(context.Background(), url(b))
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	bench.GoBenchmarks(b, t.Store, resource(b), bench.KindRPC, func() int64 { return t.Meter.Snapshot()[bench.KindRPC] })
}
