package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/storeclient"
	"github.com/tenure-go/tenure/store/redis"
)

// TestRedisPeers measures tenure on Redis next to github.com/bsm/redislock
// v0.9.4, the same cycle for each (acquire a free lock with TTL 10 s, renew
// once, release) at 1, 8 and 32 clients on distinct names, systems
// alternating round by round, and prints per operation the median over
// rounds of each round's p50, the median of the per-round ratios to
// redislock's p50, the Redis server's CPU per cycle (INFO cpu, so the
// server must serve nothing else), the client's (getrusage, the whole
// process), and the ratio of the cycle's CPU, client and server, to
// redislock's. It runs only when TENURE_REDIS_PEERS
// names a Redis URL:
//
//	TENURE_REDIS_PEERS=redis://127.0.0.1:56479/0 go test -run TestRedisPeers -v ./bench/
//
// TENURE_REDIS_PEERS_ROUNDS (default 9) and TENURE_REDIS_PEERS_ROUND
// (default 2s) size the rounds; TENURE_REDIS_PEERS_SYSTEMS (a comma list of
// system names) keeps only those, to profile one system at a time.
// TENURE_REDIS_PEERS_AUTOPIPELINE=1 adds redislock through go-redis's
// blocking AutoPipeline (commands of concurrent callers batched into
// pipelines), to weigh that design for the store: the same scripts, fewer
// system calls per command, each command waiting for the batch before it.
func TestRedisPeers(t *testing.T) {
	url := os.Getenv("TENURE_REDIS_PEERS")
	if url == "" {
		t.Skip("set TENURE_REDIS_PEERS to a Redis URL that serves nothing else")
	}
	rounds, round := 9, 2*time.Second
	if v := os.Getenv("TENURE_REDIS_PEERS_ROUNDS"); v != "" {
		rounds, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("TENURE_REDIS_PEERS_ROUND"); v != "" {
		round, _ = time.ParseDuration(v)
	}
	ctx := context.Background()
	target, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	rs := target.Store.(*redis.Store)
	opts := *storeclient.Of[*goredis.Client](rs).Options()
	opts.MaxRetries = -1
	peerCli := goredis.NewClient(&opts)
	peerCli.AddHook(redisHook{target.Meter})
	defer peerCli.Close()
	admin := goredis.NewClient(&opts)
	defer admin.Close()

	systems := []System{
		target.Tenure(),
		&rpStoreSystem{store: target.Store},
		&rpRedislock{cli: peerCli},
	}
	if os.Getenv("TENURE_REDIS_PEERS_AUTOPIPELINE") != "" {
		apCli := goredis.NewClient(&opts)
		defer apCli.Close()
		ap, err := apCli.AutoPipeline()
		if err != nil {
			t.Fatal(err)
		}
		systems = append(systems, &rpRedislock{cli: ap, name: "redislock-autopipeline"})
	}
	if v := os.Getenv("TENURE_REDIS_PEERS_SYSTEMS"); v != "" {
		// For profiling one system at a time; ratios need redislock in the list.
		keep := strings.Split(v, ",")
		systems = slices.DeleteFunc(systems, func(s System) bool { return !slices.Contains(keep, s.Name()) })
	}
	prefix := fmt.Sprintf("peers-%d", time.Now().UnixNano())
	levels := []int{1, 8, 32}
	if v := os.Getenv("TENURE_REDIS_PEERS_CLIENTS"); v != "" {
		levels = nil
		for _, f := range strings.Split(v, ",") {
			n, _ := strconv.Atoi(f)
			levels = append(levels, n)
		}
	}
	for _, clients := range levels {
		cfg := OpsConfig{Mode: ModeDistinct, Clients: clients, Duration: round, Rounds: 1, TTL: 10 * time.Second, Prefix: prefix}
		// Warm-up: one short round of each.
		for _, sys := range systems {
			w := cfg
			w.Duration = round / 4
			if _, err := RunOps(ctx, target, []System{sys}, w); err != nil {
				t.Fatal(err)
			}
		}
		p50 := map[string]map[string][]float64{} // system → op → per-round p50 (ms)
		cpu := map[string][]float64{}            // system → per-round server CPU µs per cycle
		cyc := map[string][]float64{}            // system → per-round cycles/s
		ccpu := map[string][]float64{}           // system → per-round client CPU µs per cycle
		reqs := map[string]float64{}
		for r := 0; r < rounds; r++ {
			// The order rotates, so no system always follows the same one
			// (its garbage, its connections' state).
			for k := range systems {
				sys := systems[(r+k)%len(systems)]
				runtime.GC() // the garbage of the system before is not this one's
				c0 := rpServerCPU(ctx, t, admin)
				res, err := RunOps(ctx, target, []System{sys}, cfg)
				if err != nil {
					t.Fatal(err)
				}
				c1 := rpServerCPU(ctx, t, admin)
				o := res[0]
				if o.Errors > 0 {
					t.Fatalf("%s: %d errors, first: %s", sys.Name(), o.Errors, o.FirstError)
				}
				if p50[sys.Name()] == nil {
					p50[sys.Name()] = map[string][]float64{}
				}
				for op, s := range o.Ops {
					p50[sys.Name()][op] = append(p50[sys.Name()][op], s.P50Ms)
				}
				cpu[sys.Name()] = append(cpu[sys.Name()], (c1-c0)*1e6/float64(o.Cycles))
				cyc[sys.Name()] = append(cyc[sys.Name()], float64(o.Cycles)/o.ElapsedS)
				ccpu[sys.Name()] = append(ccpu[sys.Name()], o.ClientCPUUsPerOp*float64(len(o.Ops)))
				reqs[sys.Name()] = o.PerCycle
				if os.Getenv("TENURE_REDIS_PEERS_DEBUG") != "" {
					t.Logf("round %d %s: acquire %.3f renew %.3f release %.3f", r, sys.Name(), o.Ops[OpAcquire].P50Ms, o.Ops[OpRenew].P50Ms, o.Ops[OpRelease].P50Ms)
				}
			}
		}
		t.Logf("%d clients, %d rounds of %v (medians over rounds):", clients, rounds, round)
		t.Logf("  %-14s %10s %10s %10s   %-26s %12s %12s %10s %10s %8s", "system", "acquire", "renew", "release", "ratio to redislock a/rn/rl", "server µs/cyc", "client µs/cyc", "CPU ratio", "cycles/s", "cmd/cyc")
		peer := p50[rpRedislockName]
		for _, sys := range systems {
			n := sys.Name()
			var ratios []string
			for _, op := range []string{OpAcquire, OpRenew, OpRelease} {
				var rr []float64
				for i, v := range p50[n][op] {
					if i < len(peer[op]) {
						rr = append(rr, v/peer[op][i])
					}
				}
				ratios = append(ratios, fmt.Sprintf("%.2f", rpMedian(rr)))
			}
			// CPU ratio: the cycle's CPU, client and server, over redislock's.
			// Client and server share two cores, so once they are busy the
			// latency ratio follows it.
			cpuRatio := 0.0
			if len(peer) > 0 {
				cpuRatio = (rpMedian(cpu[n]) + rpMedian(ccpu[n])) / (rpMedian(cpu[rpRedislockName]) + rpMedian(ccpu[rpRedislockName]))
			}
			t.Logf("  %-14s %8.3fms %8.3fms %8.3fms   %-26s %12.1f %12.1f %10.2f %10.0f %8.1f", n,
				rpMedian(p50[n][OpAcquire]), rpMedian(p50[n][OpRenew]), rpMedian(p50[n][OpRelease]),
				strings.Join(ratios, " · "), rpMedian(cpu[n]), rpMedian(ccpu[n]), cpuRatio, rpMedian(cyc[n]), reqs[n])
		}
	}
}

func rpMedian(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// serverCPU returns the Redis server's used_cpu_sys + used_cpu_user, in
// seconds.
func rpServerCPU(ctx context.Context, t *testing.T, c *goredis.Client) float64 {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// rpRedislockName names the redislock system in TestRedisPeers.
const rpRedislockName = "redislock"

// rpRedislock is github.com/bsm/redislock: Obtain (a script: SET NX PX),
// Lock.Refresh (a script: GET, PEXPIRE), Lock.Release (a script: GET, DEL).
// No fencing token. Obtain has no retry strategy: a held lock fails at once.
type rpRedislock struct {
	cli  redislock.RedisClient
	name string // rpRedislockName when empty
}

func (s *rpRedislock) Name() string {
	if s.name != "" {
		return s.name
	}
	return rpRedislockName
}
func (s *rpRedislock) Ops() []string { return []string{OpAcquire, OpRenew, OpRelease} }
func (s *rpRedislock) NewClient(string) (Client, error) {
	return &rpRedislockClient{locker: redislock.New(s.cli)}, nil
}

type rpRedislockClient struct {
	locker *redislock.Client
	lock   *redislock.Lock
	ttl    time.Duration
}

func (c *rpRedislockClient) Acquire(ctx context.Context, resource string, ttl time.Duration) error {
	l, err := c.locker.Obtain(ctx, resource, ttl, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return tenure.ErrHeld
	}
	if err != nil {
		return err
	}
	c.lock, c.ttl = l, ttl
	return nil
}

func (c *rpRedislockClient) Renew(ctx context.Context) error {
	return c.lock.Refresh(ctx, c.ttl, nil)
}

func (c *rpRedislockClient) Release(ctx context.Context) error {
	err := c.lock.Release(ctx)
	c.lock = nil
	return err
}

func (c *rpRedislockClient) Close() {}

// rpStoreSystem calls the driver directly (no Locker), to show what the
// Locker adds.
type rpStoreSystem struct{ store driver.Store }

func (s *rpStoreSystem) Name() string  { return "tenure-store" }
func (s *rpStoreSystem) Ops() []string { return []string{OpAcquire, OpRenew, OpRelease} }
func (s *rpStoreSystem) NewClient(id string) (Client, error) {
	return &rpStoreClient{store: s.store, owner: id + "#0123456789abcdef"}, nil
}

type rpStoreClient struct {
	store    driver.Store
	owner    string
	n        int
	resource string
	cur      string
	token    uint64
	ttl      time.Duration
}

func (c *rpStoreClient) Acquire(ctx context.Context, resource string, ttl time.Duration) error {
	c.n++
	c.cur = c.owner + "." + strconv.Itoa(c.n)
	rec, err := c.store.Acquire(ctx, resource, c.cur, ttl)
	if err != nil {
		return err
	}
	c.resource, c.token, c.ttl = resource, rec.Token, ttl
	return nil
}

func (c *rpStoreClient) Renew(ctx context.Context) error {
	return c.store.Renew(ctx, c.resource, c.cur, c.token, c.ttl)
}

func (c *rpStoreClient) Release(ctx context.Context) error {
	return c.store.Release(ctx, c.resource, c.cur, c.token)
}

func (c *rpStoreClient) Close() {}

// TestRedisScriptCost measures what each operation costs the Redis
// server: its CPU time (INFO cpu) per operation, phase by phase (2,000
// acquires of distinct names, then their renewals, then their releases,
// from 16 goroutines so that the server reads and writes in batches),
// systems alternating, 15 rounds; it prints the median per operation. The
// CPU includes the server's network reads and writes, the same for every
// system. TENURE_REDIS_PEERS names the server (it must serve nothing else
// while this runs).
func TestRedisScriptCost(t *testing.T) {
	url := os.Getenv("TENURE_REDIS_PEERS")
	if url == "" {
		t.Skip("set TENURE_REDIS_PEERS to a Redis URL that serves nothing else")
	}
	ctx := context.Background()
	target, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	rs := target.Store.(*redis.Store)
	opts := *storeclient.Of[*goredis.Client](rs).Options()
	peerCli := goredis.NewClient(&opts)
	defer peerCli.Close()
	admin := goredis.NewClient(&opts)
	defer admin.Close()
	systems := []System{&rpStoreSystem{store: target.Store}, &rpRedislock{cli: peerCli}}
	const n, workers = 2000, 16
	cost := map[string]map[string][]float64{}
	prefix := fmt.Sprintf("cost-%d", time.Now().UnixNano())
	for r := 0; r < 16; r++ {
		for k := range systems {
			sys := systems[(r+k)%len(systems)]
			clients := make([]Client, n)
			for i := range clients {
				clients[i], _ = sys.NewClient(fmt.Sprintf("c%d", i))
			}
			if cost[sys.Name()] == nil {
				cost[sys.Name()] = map[string][]float64{}
			}
			for _, op := range []string{OpAcquire, OpRenew, OpRelease} {
				c0 := rpServerCPU(ctx, t, admin)
				var wg sync.WaitGroup
				var failed atomic.Value
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := w; i < n; i += workers {
							c := clients[i]
							var err error
							switch op {
							case OpAcquire:
								err = c.Acquire(ctx, fmt.Sprintf("%s/%s/%d/%d", prefix, sys.Name(), r, i), 10*time.Second)
							case OpRenew:
								err = c.Renew(ctx)
							case OpRelease:
								err = c.Release(ctx)
							}
							if err != nil {
								failed.Store(err)
							}
						}
					}()
				}
				wg.Wait()
				if err, _ := failed.Load().(error); err != nil {
					t.Fatal(err)
				}
				c1 := rpServerCPU(ctx, t, admin)
				if r > 0 { // the first round loads the scripts
					cost[sys.Name()][op] = append(cost[sys.Name()][op], (c1-c0)*1e6/n)
				}
			}
		}
	}
	for _, sys := range systems {
		c := cost[sys.Name()]
		t.Logf("%-14s Redis CPU µs per operation: acquire %.2f  renew %.2f  release %.2f", sys.Name(),
			rpMedian(c[OpAcquire]), rpMedian(c[OpRenew]), rpMedian(c[OpRelease]))
	}
}

// TestRedisPeersFine is TestRedisPeers with fine-grained alternation, for
// a machine whose load changes faster than rounds of a second: the systems
// take turns in phases of TENURE_REDIS_PEERS_PHASE (default 25 ms), all
// clients switching together at a barrier, for TENURE_REDIS_PEERS_SECONDS
// (default 30) per client count; p50 per operation pooled over all
// phases. Same cycle, same names, same clients as TestRedisPeers.
func TestRedisPeersFine(t *testing.T) {
	url := os.Getenv("TENURE_REDIS_PEERS")
	if url == "" {
		t.Skip("set TENURE_REDIS_PEERS to a Redis URL that serves nothing else")
	}
	phase, total := 25*time.Millisecond, 30*time.Second
	if v := os.Getenv("TENURE_REDIS_PEERS_PHASE"); v != "" {
		phase, _ = time.ParseDuration(v)
	}
	if v := os.Getenv("TENURE_REDIS_PEERS_SECONDS"); v != "" {
		n, _ := strconv.Atoi(v)
		total = time.Duration(n) * time.Second
	}
	ctx := context.Background()
	target, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	rs := target.Store.(*redis.Store)
	opts := *storeclient.Of[*goredis.Client](rs).Options()
	opts.MaxRetries = -1
	peerCli := goredis.NewClient(&opts)
	defer peerCli.Close()
	admin := goredis.NewClient(&opts)
	defer admin.Close()
	systems := []System{target.Tenure(), &rpStoreSystem{store: target.Store}, &rpRedislock{cli: peerCli}}
	levels := []int{1, 8, 32}
	if v := os.Getenv("TENURE_REDIS_PEERS_CLIENTS"); v != "" {
		levels = nil
		for _, f := range strings.Split(v, ",") {
			n, _ := strconv.Atoi(f)
			levels = append(levels, n)
		}
	}
	prefix := fmt.Sprintf("fine-%d", time.Now().UnixNano())
	for _, n := range levels {
		clients := make([][]Client, len(systems))
		for j, sys := range systems {
			for i := 0; i < n; i++ {
				c, err := sys.NewClient(fmt.Sprintf("fine-%s-%d", sys.Name(), i))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				clients[j] = append(clients[j], c)
			}
		}
		// samples[j][op] per client, merged after.
		type acc struct{ a, rn, rl []time.Duration }
		accs := make([][]acc, len(systems))
		for j := range accs {
			accs[j] = make([]acc, n)
		}
		cycles := make([]int64, len(systems))
		busy := make([]time.Duration, len(systems))
		server := make([]float64, len(systems)) // Redis CPU seconds
		phases := int(total / phase)
		for p := 0; p < phases; p++ {
			j := p % len(systems)
			end := time.Now().Add(phase)
			var wg sync.WaitGroup
			var done atomic.Int64
			c0 := rpServerCPU(ctx, t, admin)
			t0 := time.Now()
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, a := clients[j][i], &accs[j][i]
					r := fmt.Sprintf("%s/%s/c%d/%d", prefix, systems[j].Name(), n, i)
					for time.Now().Before(end) {
						octx, cancel := context.WithTimeout(ctx, 30*time.Second)
						s0 := time.Now()
						err := c.Acquire(octx, r, 10*time.Second)
						s1 := time.Now()
						if err == nil {
							err = c.Renew(octx)
						}
						s2 := time.Now()
						if err == nil {
							err = c.Release(octx)
						}
						s3 := time.Now()
						cancel()
						if err != nil {
							t.Error(err)
							return
						}
						a.a, a.rn, a.rl = append(a.a, s1.Sub(s0)), append(a.rn, s2.Sub(s1)), append(a.rl, s3.Sub(s2))
						done.Add(1)
					}
				}()
			}
			wg.Wait()
			busy[j] += time.Since(t0)
			server[j] += rpServerCPU(ctx, t, admin) - c0
			cycles[j] += done.Load()
		}
		p50 := make([][3]float64, len(systems))
		for j := range systems {
			var a, rn, rl []time.Duration
			for _, x := range accs[j] {
				a, rn, rl = append(a, x.a...), append(rn, x.rn...), append(rl, x.rl...)
			}
			p50[j] = [3]float64{Summarize(a).P50Ms * 1000, Summarize(rn).P50Ms * 1000, Summarize(rl).P50Ms * 1000}
		}
		peer := len(systems) - 1
		t.Logf("%d clients, phases of %v for %v:", n, phase, total)
		for j, sys := range systems {
			t.Logf("  %-14s p50 µs: acquire %7.1f renew %7.1f release %7.1f   ratio to redislock %.2f · %.2f · %.2f   %6.0f cycles/s   Redis CPU %5.1f µs/cycle",
				sys.Name(), p50[j][0], p50[j][1], p50[j][2],
				p50[j][0]/p50[peer][0], p50[j][1]/p50[peer][1], p50[j][2]/p50[peer][2], float64(cycles[j])/busy[j].Seconds(),
				server[j]*1e6/float64(cycles[j]))
		}
	}
}
