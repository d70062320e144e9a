package cassandra_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/cassandra"
	"github.com/tenure-go/tenure/store/storetest"
)

// Tests on three nodes (TENURE_CASSANDRA_CLUSTER=127.0.0.1:9042,127.0.0.2:9042,
// 127.0.0.3:9042, from scripts/cassandra start3): a keyspace with
// replication factor 3, conditions at SERIAL, commits at QUORUM.

func needCluster(t *testing.T) []string {
	t.Helper()
	if cluster == "" {
		t.Skip("set TENURE_CASSANDRA_CLUSTER=h1:port,h2:port,h3:port to run the three-node tests (scripts/cassandra start3; eval $(scripts/cassandra env 3))")
	}
	return strings.Split(cluster, ",")
}

// clusterConfig is the cluster's configuration in a keyspace of its own,
// tenure_ctest_<random>, with replication factor 3 (a new name for every
// test: dropping and re-creating one name quickly is a Cassandra
// anti-pattern); openCluster drops it when the test ends.
func clusterConfig(t *testing.T, mode cassandra.Mode) cassandra.Config {
	t.Helper()
	hosts := needCluster(t)
	cfg := cassandra.Config{
		Hosts:       hosts,
		Keyspace:    "tenure_ctest_" + randHex(5),
		Mode:        mode,
		Timeout:     time.Second,
		Replication: cassandra.Replication{Factor: 3},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Schema changes take seconds on a busy cluster: Init gets the
	// default timeout, the tests the short one.
	icfg := cfg
	icfg.Timeout = cassandra.DefaultTimeout
	if err := cassandra.Init(ctx, icfg); err != nil {
		t.Fatalf("Init on the cluster: %v", err)
	}
	return cfg
}

func openCluster(t *testing.T, cfg cassandra.Config) *cassandra.Store {
	t.Helper()
	s := reopenCluster(t, cfg)
	t.Cleanup(func() { // before the handle closes (clean-ups run last first)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = s.Session().Query(`DROP KEYSPACE IF EXISTS ` + cfg.Keyspace).WithContext(ctx).Exec()
	})
	return s
}

// reopenCluster opens another handle on cfg's keyspace, closed at the end
// of the test; the keyspace is left to the test that opened it first.
func reopenCluster(t *testing.T, cfg cassandra.Config) *cassandra.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := cassandra.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// testLogger sends a Locker's warnings to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// nodePID finds the JVM of cluster node n as scripts/cassandra started it.
func nodePID(t *testing.T, n int) int {
	t.Helper()
	base := os.Getenv("TENURE_CASSANDRA_DIR")
	if base == "" {
		base = "/tmp/tenure-cassandra"
	}
	dir := filepath.Join(base, "node"+strconv.Itoa(n))
	b, err := os.ReadFile(filepath.Join(dir, "cassandra.pid"))
	if err != nil {
		t.Skipf("cannot find node %d's process (%v); set TENURE_CASSANDRA_DIR to scripts/cassandra's folder", n, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Skipf("node %d's pid file: %v", n, err)
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !bytes.Contains(cmdline, []byte("-Dtenure.cassandra.node="+dir+"/")) {
		t.Skipf("process %d is not node %d", pid, n)
	}
	return pid
}

// holdThrough checks for d that lease stays trusted and that a contender
// is told the resource is held (the cluster keeps answering).
func holdThrough(t *testing.T, ctx context.Context, l *tenure.Lease, contender *tenure.Locker, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	held, failed := 0, 0
	for time.Now().Before(end) {
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost with one node down: %v", err)
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		lb, err := contender.TryAcquire(cctx, l.Resource(), 10*time.Second)
		cancel()
		switch {
		case err == nil:
			lb.Release(ctx)
			if herr := l.Err(); herr != nil {
				t.Fatalf("lease lost with one node down (then a contender was granted it): %v", herr)
			}
			t.Fatal("a contender was granted the resource while the holder's lease was trusted")
		case errors.Is(err, tenure.ErrHeld):
			held++
		default:
			failed++ // a coordinator that does not answer: tolerated
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("over %v: contender told held %d times, %d attempts failed", d, held, failed)
	if held == 0 {
		t.Fatal("the cluster never answered the contender")
	}
}

// TestClusterLeaseSurvivesNodeFailure: with replication factor 3, a lease
// is kept (renewed every TTL/3) while one node is paused (SIGSTOP: it stops
// answering without closing connections) for longer than the TTL, and while
// it is killed (SIGKILL); a contender is told the resource is held
// throughout. The faults are driven from Go; the killed node is restarted
// at the end with scripts/cassandra restart, leaving the cluster as found.
func TestClusterLeaseSurvivesNodeFailure(t *testing.T) {
	cfg := clusterConfig(t, cassandra.ModeNative)
	s := openCluster(t, cfg)
	ctx := testCtx(t)
	a, err := tenure.New(s, tenure.WithOwnerID("holder"), tenure.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	b, err := tenure.New(s, tenure.WithOwnerID("contender"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	const ttl = 10 * time.Second
	l, err := a.TryAcquire(ctx, resource(t, "r"), ttl)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("Paused", func(t *testing.T) {
		pid := nodePID(t, 3)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		}
		t.Cleanup(resume)
		holdThrough(t, ctx, l, b, ttl+ttl/2)
		resume()
	})

	t.Run("Killed", func(t *testing.T) {
		pid := nodePID(t, 3)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd := exec.Command("../../scripts/cassandra", "restart", "3")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("restarting node 3: %v\n%s", err, out)
			}
		})
		holdThrough(t, ctx, l, b, ttl+ttl/2)

		// Init of a new keyspace with the node dead: the nodes that are up
		// agree, and the dead one is not waited for (gocql's own wait
		// counts it, and timed out after each statement).
		start := time.Now()
		ncfg := clusterConfig(t, cassandra.ModeNative)
		ns := openCluster(t, ncfg)
		nl, err := tenure.New(ns, tenure.WithOwnerID("after-init"))
		if err != nil {
			t.Fatal(err)
		}
		defer nl.Close(ctx)
		if _, err := nl.TryAcquire(ctx, resource(t, "r"), ttl); err != nil {
			t.Fatalf("acquire on a keyspace created with a node dead: %v", err)
		}
		t.Logf("Init, Open and a grant on a new keyspace with node 3 dead: %v", time.Since(start).Round(time.Millisecond))
	})

	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with one node down: %v", err)
	}
}

// TestClusterLostReply: on three nodes, a conditional write whose reply is
// lost after the cluster applied it is resolved by a SERIAL read: every
// driver connection goes through a CQL-aware proxy per node, and the proxies
// drop the reply to the next conditional write.
func TestClusterLostReply(t *testing.T) {
	cfg := clusterConfig(t, cassandra.ModeNative)
	direct := openCluster(t, cfg)
	ctx := testCtx(t)
	hosts := needCluster(t)
	proxies := map[string]*cqlProxy{}
	for _, h := range hosts {
		proxies[h] = newCQLProxy(t, h)
	}
	pcfg := cfg
	pcfg.Timeout = time.Second
	var first *cqlProxy
	for _, p := range proxies {
		first = p
		break
	}
	fip, fport := first.addr()
	pcfg.Hosts = []string{net.JoinHostPort(fip.String(), strconv.Itoa(fport))}
	pcfg.ClusterHook = func(cc *gocql.ClusterConfig) {
		cc.ProtoVersion = 4
		cc.AddressTranslator = gocql.AddressTranslatorFunc(func(ip net.IP, port int) (net.IP, int) {
			if p, ok := proxies[net.JoinHostPort(ip.String(), strconv.Itoa(port))]; ok {
				return p.addr()
			}
			return ip, port
		})
	}
	s, err := cassandra.Open(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	armAll := func(a proxyAction) {
		for _, p := range proxies {
			p.arm(a)
		}
	}
	lostCount := func() int {
		n := 0
		for _, p := range proxies {
			n += len(p.lost())
		}
		return n
	}
	me := owner(t, "me")
	for i := 0; i < 5; i++ {
		r := resource(t, "r"+strconv.Itoa(i))
		before := lostCount()
		armAll(dropNextReply)
		rec, err := s.Acquire(ctx, r, me, 30*time.Second)
		armAll(pass)
		if lostCount() == before {
			t.Fatal("no reply was lost")
		}
		if err != nil {
			t.Fatalf("Acquire whose reply was lost: %v", err)
		}
		row := serialRow(t, direct.Session(), cfg.Keyspace+"."+cassandra.DefaultNativeTable, r)
		if row.owner != me || uint64(row.token) != rec.Token {
			t.Fatalf("store answered %+v; serial read %+v", rec, row)
		}
		armAll(dropNextReply)
		err = s.Release(ctx, r, me, rec.Token)
		armAll(pass)
		if err != nil {
			t.Fatalf("Release whose reply was lost: %v", err)
		}
		if row := serialRow(t, direct.Session(), cfg.Keyspace+"."+cassandra.DefaultNativeTable, r); row.owner != "" {
			t.Fatalf("after release: %+v", row)
		}
	}
}

// TestClusterConformance runs the conformance suite and the unknown-outcome
// case on three nodes; the other cases run on one node
// (TestConformanceNative), where a cluster changes nothing they check.
func TestClusterConformance(t *testing.T) {
	cfg := clusterConfig(t, cassandra.ModeNative)
	s := openCluster(t, cfg)
	onOneNode := "run on one node (TestConformanceNative)"
	storetest.Run(t, storetest.Config{
		New: func(*testing.T) driver.Store { return s },
		// A keyspace of its own for Fresh, dropped when its test ends; a
		// handle on the suite's keyspace for Reopen, which must not drop it.
		Fresh:       func(t *testing.T) driver.Store { return openCluster(t, clusterConfig(t, cassandra.ModeNative)) },
		Reopen:      func(t *testing.T, _ driver.Store) driver.Store { return reopenCluster(t, cfg) },
		ShortTTL:    cassandra.MinTTL,
		ExpirySlack: time.Second,
		InvalidTTLs: invalidTTLs,
		// As on one node (nativeCfg).
		HoldResolution:     time.Second,
		SharedOwnerUnknown: "eight handles writing one partition at once make Paxos rounds on three nodes time out (CAS timeouts are unknown outcomes)",
		Skip: map[string]string{"C01": onOneNode, "C03": onOneNode, "C04": onOneNode, "C05": onOneNode,
			"C06c": onOneNode, "C07": onOneNode, "C08": onOneNode, "C10": onOneNode},
	})
}

// loadCall is one store call of clusterLoad.
type loadCall struct {
	start, end time.Time
	err        error
}

// clusterLoad is clients goroutines looping acquire, renew, release on
// resources of their own through one store, each call bounded by 3 s, as a
// process serving leases would.
type clusterLoad struct {
	mu    sync.Mutex
	calls []loadCall
	slow  atomic.Bool // sleep 200 ms between cycles (while a node restarts)
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

func startClusterLoad(t *testing.T, s *cassandra.Store, clients int, ttl time.Duration) *clusterLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &clusterLoad{stop: cancel}
	for i := 0; i < clients; i++ {
		own := owner(t, "client"+strconv.Itoa(i))
		res := resource(t, "c"+strconv.Itoa(i))
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				var token uint64
				if l.call(ctx, func(c context.Context) error {
					rec, err := s.Acquire(c, res, own, ttl)
					token = rec.Token
					return err
				}) != nil {
					continue
				}
				l.call(ctx, func(c context.Context) error { return s.Renew(c, res, own, token, ttl) })
				l.call(ctx, func(c context.Context) error { return s.Release(c, res, own, token) })
				if l.slow.Load() {
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	t.Cleanup(l.end)
	return l
}

func (l *clusterLoad) call(ctx context.Context, f func(context.Context) error) error {
	start := time.Now()
	cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err := f(cctx)
	cancel()
	if ctx.Err() == nil {
		l.mu.Lock()
		l.calls = append(l.calls, loadCall{start, time.Now(), err})
		l.mu.Unlock()
	}
	return err
}

func (l *clusterLoad) end() {
	l.stop()
	l.wg.Wait()
}

// count returns the calls that started at or after from and ended before
// to, and those of them that failed, with the first few errors.
func (l *clusterLoad) count(from, to time.Time) (n, failed int, errs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.calls {
		if c.start.Before(from) || !c.end.Before(to) {
			continue
		}
		n++
		if c.err != nil {
			failed++
			if len(errs) < 5 {
				errs = append(errs, c.err.Error())
			}
		}
	}
	return n, failed, errs
}

// endedSince counts the calls that ended after from.
func (l *clusterLoad) endedSince(from time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.calls {
		if c.end.After(from) {
			n++
		}
	}
	return n
}

// TestClusterServesThroughNodeLoss: with one node of three paused (SIGSTOP:
// it stops answering without closing its connections) or killed, at least
// 99% of the store calls of four clients looping acquire, renew, release
// succeed, each bounded by 3 s, with the store's default timeout (10 s).
// Once the node is back (resumed, or restarted), the calls that start a TTL
// later succeed too (at least 99%). The figures are measured over at least
// 10 s and 600 calls of each phase; calls per second are logged, not
// asserted.
func TestClusterServesThroughNodeLoss(t *testing.T) {
	cfg := clusterConfig(t, cassandra.ModeNative)
	cfg.Timeout = cassandra.DefaultTimeout
	s := openCluster(t, cfg)
	const (
		ttl      = 2 * time.Second
		minFault = 10 * time.Second
		maxFault = 40 * time.Second
		minCalls = 600
	)
	load := startClusterLoad(t, s, 4, ttl)
	check := func(t *testing.T, what string, from, to time.Time) {
		t.Helper()
		n, failed, errs := load.count(from, to)
		rate := float64(n-failed) / float64(max(n, 1))
		t.Logf("%s: %d calls in %v (%.0f/s), %d failed (success %.4f)", what, n, to.Sub(from).Round(time.Millisecond),
			float64(n)/to.Sub(from).Seconds(), failed, rate)
		if n == 0 || rate < 0.99 {
			t.Errorf("%s: %d of %d store calls failed (success %.4f, want at least 0.99); first errors: %q", what, failed, n, rate, errs)
		}
	}
	// phase injects a fault, keeps it for at least minFault and minCalls
	// calls, heals it (heal returns when the node is back) and checks the
	// calls during the fault and from one TTL after.
	phase := func(t *testing.T, inject, heal func()) {
		time.Sleep(2 * time.Second)
		start := time.Now()
		inject()
		for time.Since(start) < minFault || (load.endedSince(start) < minCalls && time.Since(start) < maxFault) {
			time.Sleep(100 * time.Millisecond)
		}
		end := time.Now()
		heal()
		back := time.Now()
		time.Sleep(ttl + 3*time.Second)
		check(t, "node down", start, end)
		check(t, "from one TTL after the node is back", back.Add(ttl), time.Now())
	}

	t.Run("Paused", func(t *testing.T) {
		pid := nodePID(t, 2)
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		}
		t.Cleanup(resume)
		phase(t, func() {
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		}, resume)
	})

	t.Run("Killed", func(t *testing.T) {
		pid := nodePID(t, 2)
		restarted := false
		restart := func() {
			if restarted {
				return
			}
			restarted = true
			// Two shared cores cannot restart a node under the full load.
			load.slow.Store(true)
			defer load.slow.Store(false)
			cmd := exec.Command("../../scripts/cassandra", "restart", "2")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("restarting node 2: %v\n%s", err, out)
			}
		}
		t.Cleanup(restart)
		phase(t, func() {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}, restart)
	})
}

// TestClusterInitFreshKeyspaces creates keyspaces one after another on
// three nodes: every Init succeeds, and when it returns every node knows
// the table. Init once sent CREATE TABLE to a node that had not yet applied
// CREATE KEYSPACE ("Keyspace ... doesn't exist", a CI failure in one run
// of three, on a loaded machine): it waited for agreement only after the
// last statement. On an idle machine this test passes on that code too
// (the paused node applies the keyspace before it reads the next request);
// it checks Init's behaviour through a pause.
func TestClusterInitFreshKeyspaces(t *testing.T) {
	hosts := needCluster(t)
	for i := range 4 {
		cfg := cassandra.Config{
			Hosts:       hosts,
			Keyspace:    "tenure_ctest_" + randHex(5),
			Timeout:     cassandra.DefaultTimeout,
			Replication: cassandra.Replication{Factor: 3},
		}
		// Odd rounds pause one node (SIGSTOP) for 3 s from the moment
		// Init has looked for the table, just before its first schema
		// change, as a busy machine does: agreement then takes longer than
		// gocql's own wait after a schema change, and a node may be sent
		// CREATE TABLE before it has applied CREATE KEYSPACE.
		var paused sync.WaitGroup
		if i%2 == 1 {
			pid := nodePID(t, 1+i%3)
			var once sync.Once
			cfg.ClusterHook = func(c *gocql.ClusterConfig) {
				c.QueryObserver = schemaLookObserver(func() {
					once.Do(func() {
						if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
							t.Error(err)
							return
						}
						paused.Add(1)
						go func() {
							defer paused.Done()
							time.Sleep(3 * time.Second)
							_ = syscall.Kill(pid, syscall.SIGCONT)
						}()
					})
				})
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := cassandra.Init(ctx, cfg)
		cancel()
		paused.Wait()
		if err != nil {
			t.Fatalf("Init %d of a fresh keyspace on three nodes: %v", i, err)
		}
		cfg.ClusterHook = nil
		s := openCluster(t, cfg)
		for _, h := range s.Session().GetHosts() {
			if !h.IsUp() {
				continue
			}
			qctx, qcancel := context.WithTimeout(context.Background(), 10*time.Second)
			var name string
			err := s.Session().Query(`SELECT table_name FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`,
				cfg.Keyspace, cassandra.DefaultNativeTable).SetHostID(h.HostID()).Consistency(gocql.One).ScanContext(qctx, &name)
			qcancel()
			if err != nil {
				t.Fatalf("Init %d returned, but node %s does not know the table: %v", i, h.ConnectAddress(), err)
			}
		}
	}
}

// schemaLookObserver calls f when a query on system_schema.tables ends.
type schemaLookObserver func()

func (f schemaLookObserver) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	if strings.Contains(q.Statement, "system_schema.tables") {
		f()
	}
}
