package bench_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenure-go/tenure/store/storetest"
	"github.com/tenure-go/tenure/tools/bench"
)

// The store benchmarks with request counts: each opens its store through
// bench.Open (the store registry, with the bench's counting hooks) and runs
// storetest.Benchmarks, reporting the requests of the store's primary kind
// per operation. The network stores need their server (the environment of
// scripts/test); each benchmark is skipped without it:
//
//	cd tools && go test -run '^$' -bench . -benchtime 500x ./bench/

func benchStore(b *testing.B, raw string) {
	t, err := bench.Open(context.Background(), raw)
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	kind := t.Meter.Primary()
	storetest.Benchmarks(b, t.Store, "bench/"+b.Name(), kind, func() int64 { return t.Meter.Snapshot()[kind] })
}

// env returns the value of the environment variable name, or skips.
func env(b *testing.B, name string) string {
	v := os.Getenv(name)
	if v == "" {
		b.Skipf("%s is not set: this benchmark needs the server (see scripts/test)", name)
	}
	return v
}

// BenchmarkSQLite: a file in a temporary directory; transactions counted by
// SQLite's commit and rollback hooks.
func BenchmarkSQLite(b *testing.B) {
	benchStore(b, "sqlite:"+filepath.Join(b.TempDir(), "bench.db"))
}

// BenchmarkPostgresStore: statements counted by pgx's tracer.
func BenchmarkPostgresStore(b *testing.B) { benchStore(b, env(b, "TENURE_POSTGRES")) }

// BenchmarkEtcdStore: gRPC calls counted by interceptors.
func BenchmarkEtcdStore(b *testing.B) {
	u := env(b, "TENURE_ETCD")
	if !strings.HasPrefix(u, "etcd://") {
		u = "etcd://" + u
	}
	benchStore(b, u)
}

// BenchmarkRedisStore: commands counted by a go-redis hook.
func BenchmarkRedisStore(b *testing.B) { benchStore(b, env(b, "TENURE_REDIS")) }
