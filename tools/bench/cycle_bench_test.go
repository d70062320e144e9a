package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/tenure-go/tenure/internal/storeclient"
	"github.com/tenure-go/tenure/store/etcd"
	"github.com/tenure-go/tenure/store/redis"
)

// BenchmarkRedisCycle and BenchmarkEtcdCycle run the peers phase's cycle
// (acquire a free lock with TTL 10 s, renew once, release; each call on a
// context with a timeout of its own) with b.RunParallel, one sub-benchmark
// per system: tenure through a Locker, tenure's store called directly, and
// the peer (bsm/redislock; etcd's concurrency Mutex on one shared session).
// Besides ns/op they report the process's CPU time per cycle (user +
// system, getrusage: the client's cost, GC included), which is what the
// client spends whatever the machine's load. One system at a time, so a CPU
// profile of one sub-benchmark is that system's:
//
//	cd tools && TENURE_REDIS=redis://127.0.0.1:56379/0 go test -run '^$' -bench RedisCycle -cpu 8 ./bench/
//	cd tools && TENURE_REDIS=... go test -run '^$' -bench 'RedisCycle/tenure-locker' -cpuprofile /tmp/locker.prof ./bench/
//
// -cpu sets GOMAXPROCS and so the number of goroutines (RunParallel runs
// GOMAXPROCS of them).
func BenchmarkRedisCycle(b *testing.B) {
	target := openEnvTarget(b, "TENURE_REDIS", "")
	rs := target.Store.(*redis.Store)
	opts := *storeclient.Of[*goredis.Client](rs).Options()
	opts.MaxRetries = -1
	peerCli := goredis.NewClient(&opts)
	peerCli.AddHook(redisHook{target.Meter})
	defer peerCli.Close()
	cycleBenchmarks(b, target, target.Tenure(), &rpStoreSystem{store: target.Store}, &rpRedislock{cli: peerCli})
}

// BenchmarkEtcdCycle: see BenchmarkRedisCycle.
func BenchmarkEtcdCycle(b *testing.B) {
	target := openEnvTarget(b, "TENURE_ETCD", "etcd://")
	es := target.Store.(*etcd.Store)
	cycleBenchmarks(b, target, target.Tenure(), &rpStoreSystem{store: target.Store}, &etcdMutexSystem{cli: storeclient.Of[*clientv3.Client](es), shared: true})
}

// contextSwitches returns the process's voluntary and involuntary context
// switches so far (getrusage): threads parked and woken, which cost the
// client CPU beyond its own code.
func contextSwitches() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw + ru.Nivcsw
}

// openEnvTarget opens the bench target named by the environment variable,
// with scheme prepended when it lacks one, or skips.
func openEnvTarget(b *testing.B, name, scheme string) *Target {
	u := os.Getenv(name)
	if u == "" {
		b.Skipf("%s is not set: this benchmark needs the server (see scripts/test)", name)
	}
	if !strings.Contains(u, "://") {
		u = scheme + u
	}
	target, err := Open(context.Background(), u)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { target.Close() })
	return target
}

func cycleBenchmarks(b *testing.B, target *Target, systems ...System) {
	prefix := fmt.Sprintf("cycle-%d", time.Now().UnixNano())
	for _, sys := range systems {
		b.Run(sys.Name(), func(b *testing.B) {
			var n atomic.Int64
			timed := func(op func(context.Context) error) error {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				return op(ctx)
			}
			cpu0, sw0 := processCPU(), contextSwitches()
			b.RunParallel(func(pb *testing.PB) {
				id := n.Add(1)
				c, err := sys.NewClient(fmt.Sprintf("c%d", id))
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				resource := fmt.Sprintf("%s/%s/%d", prefix, sys.Name(), id)
				for pb.Next() {
					if err := timed(func(ctx context.Context) error { return c.Acquire(ctx, resource, 10*time.Second) }); err != nil {
						b.Error(err)
						return
					}
					if err := timed(c.Renew); err != nil {
						b.Error(err)
						return
					}
					if err := timed(c.Release); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/cycle")
			b.ReportMetric(float64(contextSwitches()-sw0)/float64(b.N), "ctxsw/cycle")
		})
	}
}
