package bench_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/storeclient"
	"github.com/tenure-go/tenure/store/etcd"
	"github.com/tenure-go/tenure/tools/bench"
)

// BenchmarkEtcdVsMutex measures tenure on etcd against etcd's own
// concurrency.Mutex with one Session per client (shared by the client's
// locks), in the operations phase's cycle (acquire a free lock with TTL
// 10 s, renew once, release) at 1, 8 and 32 clients on distinct names,
// rounds of the two systems alternating, and logs each operation's p50 and
// the ratio tenure/Mutex, with the gRPC calls per cycle. The Mutex's
// acquire is TryLock, its renewal a KeepAliveOnce of the session's lease,
// its release Unlock. Run it once:
//
//	cd tools && TENURE_ETCD=127.0.0.1:2379 go test -run '^$' -bench EtcdVsMutex -benchtime 1x ./bench/
//
// TENURE_BENCH_SECONDS (default 8) is the measured time per system and
// level, in 4 rounds. With TENURE_ETCD_PID (the server's process id: a
// server of one's own, such as scripts/etcd's with another TENURE_RUN_DIR),
// it also measures the server's CPU time per cycle (user + system, from
// /proc) at 8 clients, each system alone for 3 rounds of 2 s, alternating,
// and logs the medians.
func BenchmarkEtcdVsMutex(b *testing.B) {
	t := etcdTarget(b, env(b, "TENURE_ETCD"))
	secs := 8
	if v, err := strconv.Atoi(os.Getenv("TENURE_BENCH_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	ctx := context.Background()
	systems := []bench.System{t.Tenure(), &mutexSystem{store: t.Store.(*etcd.Store)}, &driverSystem{store: t.Store.(*etcd.Store)}}
	prefix := fmt.Sprintf("bench-mutex/%d", time.Now().UnixNano())
	for i := 0; i < b.N; i++ {
		if pid := os.Getenv("TENURE_ETCD_PID"); pid != "" {
			serverCPU(b, t, systems, pid, prefix)
		}
		for _, clients := range []int{1, 8, 32} {
			res, err := bench.RunOps(ctx, t, systems, bench.OpsConfig{
				Mode: bench.ModeDistinct, Clients: clients, Duration: time.Duration(secs) * time.Second / 4, Rounds: 4,
				Warmup: time.Second, TTL: 10 * time.Second, Prefix: prefix,
			})
			if err != nil {
				b.Fatal(err)
			}
			byName := map[string]*bench.OpsResult{}
			for _, r := range res {
				byName[r.System] = r
				if r.Errors > 0 {
					b.Errorf("%s, %d clients: %d errors, first: %s", r.System, clients, r.Errors, r.FirstError)
				}
			}
			tr, mr, dr := byName["tenure"], byName["etcd-mutex"], byName["etcd-driver"]
			line := fmt.Sprintf("%2d clients:", clients)
			for _, op := range []string{bench.OpAcquire, bench.OpRenew, bench.OpRelease} {
				tp, mp := tr.Ops[op].P50Ms, mr.Ops[op].P50Ms
				line += fmt.Sprintf("  %s %.3f/%.3f ms = %.2f", op, tp, mp, tp/mp)
				b.ReportMetric(tp/mp, fmt.Sprintf("%s-ratio-c%d", op, clients))
			}
			line += fmt.Sprintf("  | RPCs/cycle %.2f vs %.2f, cycles/s %.0f vs %.0f, client CPU/op %.0f vs %.0f µs", tr.PerCycle, mr.PerCycle,
				float64(tr.Cycles)/tr.ElapsedS, float64(mr.Cycles)/mr.ElapsedS, tr.ClientCPUUsPerOp, mr.ClientCPUUsPerOp)
			b.Log(line)
			line = "    the store alone (no Locker):"
			for _, op := range []string{bench.OpAcquire, bench.OpRenew, bench.OpRelease} {
				line += fmt.Sprintf("  %s %.3f ms = %.2f", op, dr.Ops[op].P50Ms, dr.Ops[op].P50Ms/mr.Ops[op].P50Ms)
			}
			line += fmt.Sprintf("  | client CPU/op %.0f µs", dr.ClientCPUUsPerOp)
			b.Log(line)
		}
	}
}

// mutexSystem is concurrency.Mutex with one Session per client.
type mutexSystem struct{ store *etcd.Store }

func (s *mutexSystem) Name() string { return "etcd-mutex" }
func (s *mutexSystem) Ops() []string {
	return []string{bench.OpAcquire, bench.OpRenew, bench.OpRelease}
}

func (s *mutexSystem) NewClient(id string) (bench.Client, error) {
	sess, err := concurrency.NewSession(storeclient.Of[*clientv3.Client](s.store), concurrency.WithTTL(10))
	if err != nil {
		return nil, err
	}
	return &mutexClient{sess: sess}, nil
}

type mutexClient struct {
	sess *concurrency.Session
	mu   *concurrency.Mutex
	once sync.Once
}

func (c *mutexClient) Acquire(ctx context.Context, resource string, ttl time.Duration) error {
	m := concurrency.NewMutex(c.sess, "/bench-mutex/"+resource)
	if err := m.TryLock(ctx); err != nil {
		if err == concurrency.ErrLocked {
			return fmt.Errorf("%w: %v", tenure.ErrHeld, err)
		}
		return err
	}
	c.mu = m
	return nil
}

func (c *mutexClient) Renew(ctx context.Context) error {
	_, err := c.sess.Client().KeepAliveOnce(ctx, c.sess.Lease())
	return err
}

func (c *mutexClient) Release(ctx context.Context) error {
	err := c.mu.Unlock(ctx)
	c.mu = nil
	return err
}

func (c *mutexClient) Close() { c.once.Do(func() { _ = c.sess.Close() }) }

// driverSystem is the etcd store's own operations, without a Locker: what
// the driver costs apart from the core.
type driverSystem struct{ store *etcd.Store }

func (s *driverSystem) Name() string { return "etcd-driver" }
func (s *driverSystem) Ops() []string {
	return []string{bench.OpAcquire, bench.OpRenew, bench.OpRelease}
}

func (s *driverSystem) NewClient(id string) (bench.Client, error) {
	owner, err := naming.NewOwner(id)
	if err != nil {
		return nil, err
	}
	return &driverClient{store: s.store, owner: owner}, nil
}

type driverClient struct {
	store *etcd.Store
	owner string
	n     int
	rec   tenure.Record
	ttl   time.Duration
}

func (c *driverClient) Acquire(ctx context.Context, resource string, ttl time.Duration) error {
	c.n++
	rec, err := c.store.Acquire(ctx, resource, fmt.Sprintf("%s.%d", c.owner, c.n), ttl)
	c.rec, c.ttl = rec, ttl
	return err
}

func (c *driverClient) Renew(ctx context.Context) error {
	return c.store.Renew(ctx, c.rec.Resource, c.rec.Owner, c.rec.Token, c.ttl)
}

func (c *driverClient) Release(ctx context.Context) error {
	return c.store.Release(ctx, c.rec.Resource, c.rec.Owner, c.rec.Token)
}

func (c *driverClient) Close() {}

// serverCPU logs the etcd server's CPU time per cycle for each system, at 8
// clients: the median of 3 rounds of 2 s per system, alternating.
func serverCPU(b *testing.B, t *bench.Target, systems []bench.System, pid, prefix string) {
	per := map[string][]float64{}
	for round := 0; round < 3; round++ {
		for _, sys := range systems {
			before, err := procCPU(pid)
			if err != nil {
				b.Fatal(err)
			}
			res, err := bench.RunOps(context.Background(), t, []bench.System{sys}, bench.OpsConfig{
				Mode: bench.ModeDistinct, Clients: 8, Duration: 2 * time.Second, Rounds: 1,
				TTL: 10 * time.Second, Prefix: prefix + "/cpu",
			})
			if err != nil {
				b.Fatal(err)
			}
			after, err := procCPU(pid)
			if err != nil {
				b.Fatal(err)
			}
			per[sys.Name()] = append(per[sys.Name()], float64(after-before)/float64(res[0].Cycles))
		}
	}
	line := "etcd server CPU per cycle (8 clients, median of 3):"
	for _, sys := range systems {
		v := per[sys.Name()]
		slices.Sort(v)
		line += fmt.Sprintf("  %s %.0f µs", sys.Name(), v[len(v)/2])
	}
	b.Log(line)
}

// procCPU returns the user + system CPU time of process pid, in
// microseconds (from /proc/pid/stat, in clock ticks of 10 ms).
func procCPU(pid string) (int64, error) {
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%s/stat: %q", pid, s)
	}
	return (utime + stime) * 10_000, nil
}

// etcdTarget opens the benchmark's target on the etcd endpoint ep
// (host:port, or an etcd:// URL), closed when the test ends.
func etcdTarget(tb testing.TB, ep string) *bench.Target {
	tb.Helper()
	if !strings.HasPrefix(ep, "etcd://") {
		ep = "etcd://" + ep
	}
	t, err := bench.Open(context.Background(), ep)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { t.Close() })
	return t
}
