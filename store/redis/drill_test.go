package redis_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/testserver"
	tredis "github.com/tenure-go/tenure/store/redis"
)

// grantAgain tries to acquire a new resource (named by next) every 50 ms,
// each attempt bounded by 500 ms, until one is granted; it returns when,
// and fails the test after limit.
func grantAgain(t *testing.T, lk *tenure.Locker, next func(i int) string, limit time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		l, err := lk.TryAcquire(ctx, next(i), 5*time.Second)
		cancel()
		if err == nil {
			at := time.Now()
			_ = l.Release(testserver.Ctx(t))
			return at
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lease granted within %v: %v", limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// scriptOutput runs script with args and returns its standard output.
func scriptOutput(t *testing.T, script string, args ...string) string {
	t.Helper()
	out, err := exec.Command(script, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("%s %v: %v\n%s", script, args, err, ee.Stderr)
		}
		t.Fatalf("%s %v: %v", script, args, err)
	}
	return strings.TrimSpace(string(out))
}

// TestSentinelFailoverDrill (TENURE_SERVER_FAULTS=1, with the set of
// scripts/redis-sentinel): the master is killed (SIGKILL) while A holds a
// lease that its replicas have (WaitReplicas) and C waits for it. It
// measures the time from the kill until a lease is granted again (the
// sentinels' down-after-milliseconds, their vote, the promotion, and
// go-redis asking them for the new master). After the failover A's lease
// is there (A renews it, B is refused), and its release wakes C through
// the pub/sub connection that followed the failover: C's clock never
// moves, so only a notification can wake it. The killed node is started
// again as a replica.
func TestSentinelFailoverDrill(t *testing.T) {
	sentinelURL(t)
	script := testserver.ServerScript(t, "redis-sentinel")
	ctx := testserver.Ctx(t)
	s := openSentinel(t, func(c *tredis.Config) { c.WaitReplicas = 1 })
	base := testserver.Resource(t)
	a := testserver.Locker(t, s)
	b := testserver.Locker(t, openSentinel(t))
	c := testserver.Locker(t, openSentinel(t), tenure.WithClock(clock.NewFake()))
	la, err := a.TryAcquire(ctx, base, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan *tenure.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, base, 30*time.Second)
		if err != nil {
			t.Errorf("C: %v", err)
		}
		waiting <- l
	}()
	time.Sleep(300 * time.Millisecond) // C subscribed and refused once

	killed := scriptOutput(t, script, "kill-master")
	defer func() {
		testserver.Run(t, script, "restart", killed)
		testserver.Run(t, script, "start") // waits until the set is whole
	}()
	killedAt := time.Now()
	at := grantAgain(t, b, func(i int) string { return base + "/after/" + strconv.Itoa(i) }, 60*time.Second)
	t.Logf("master (node %s) killed: a lease was granted again after %v", killed, at.Sub(killedAt).Round(10*time.Millisecond))

	// The promoted master confirms writes once the sentinels have pointed
	// the other replica at it (WaitReplicas=1): until then A's renewal is
	// ErrNotReplicated.
	for deadline := time.Now().Add(20 * time.Second); ; {
		err := la.Renew(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, tredis.ErrNotReplicated) || time.Now().After(deadline) {
			t.Fatalf("A's renewal after the failover: %v (its grant had reached the replicas)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := b.TryAcquire(ctx, base, time.Second); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("B after the failover: %v; want ErrHeld", err)
	}
	released := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lc := <-waiting:
		if lc == nil {
			t.Fatal("C was not granted")
		}
		t.Logf("C (a waiter since before the failover) granted %v after A's release", time.Since(released).Round(time.Millisecond))
		if lc.Token() <= la.Token() {
			t.Fatalf("C's token %d <= A's %d", lc.Token(), la.Token())
		}
		_ = lc.Release(ctx)
	case <-time.After(15 * time.Second):
		t.Fatal("C was not woken by A's release after the failover")
	}
}

// TestSentinelSwitchoverWakesWaiter (TENURE_SERVER_FAULTS=1, with the set
// of scripts/redis-sentinel): an operator's switch-over (SENTINEL
// FAILOVER) leaves the old master running, so the waiters' pub/sub
// connection to it stays open while releases are published on the new
// master; the old master hears none of them (it becomes a replica only
// when the sentinels reconfigure it, and then resynchronises in full,
// which replays no message). The sentinels close its clients when they
// reconfigure it: the Store's pub/sub connection then moves to the new
// master and wakes every waiter. C, which waits with a frozen clock (only
// a notification can wake it), must be woken after the release on the
// new master. The release goes through a Store opened after the
// switch-over, which writes to the new master: until the reconfiguration
// the old master still takes writes, and a release it took would be lost
// with its data.
func TestSentinelSwitchoverWakesWaiter(t *testing.T) {
	sentinelURL(t)
	script := testserver.ServerScript(t, "redis-sentinel")
	ctx := testserver.Ctx(t)
	r := testserver.Resource(t)
	a, _ := naming.NewOwner("a")
	rec, err := openSentinel(t).Acquire(ctx, r, a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c := testserver.Locker(t, openSentinel(t), tenure.WithClock(clock.NewFake()))
	waiting := make(chan struct{})
	granted := make(chan *tenure.Lease, 1)
	go func() {
		var once sync.Once
		l, err := c.Acquire(ctx, r, time.Minute, tenure.OnWait(func(*tenure.HeldError, time.Duration) { once.Do(func() { close(waiting) }) }))
		if err != nil {
			t.Errorf("C: %v", err)
		}
		granted <- l
	}()
	select {
	case <-waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("C never waited")
	}
	scriptOutput(t, script, "failover")
	if err := openSentinel(t).Release(ctx, r, a, rec.Token); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	select {
	case lc := <-granted:
		if lc == nil {
			t.Fatal("C was not granted")
		}
		t.Logf("C granted %v after the release on the new master", time.Since(released).Round(time.Millisecond))
		_ = lc.Release(ctx)
	case <-time.After(30 * time.Second):
		t.Fatal("C was not woken by the release on the new master after the switch-over")
	}
}

// TestClusterFailoverDrill (TENURE_SERVER_FAULTS=1, with the cluster of
// scripts/redis-cluster): the master of a held lease's slot is killed
// (SIGKILL). It measures the time until a lease of that slot is granted
// again (cluster-node-timeout, the replica's election, the client's new
// slot map). A's lease, which its master's replica had (WaitReplicas=1),
// survives: B is refused it. A's renewals are not confirmed while the
// promoted master has no replica (ErrNotReplicated), and are again once
// the killed node is started again and rejoins as its replica.
func TestClusterFailoverDrill(t *testing.T) {
	raw := clusterURL(t)
	script := testserver.ServerScript(t, "redis-cluster")
	ctx := testserver.Ctx(t)
	s := openCluster(t, func(c *tredis.Config) { c.WaitReplicas = 1 })
	rs := sameSlot(testserver.Resource(t), 40)
	a := testserver.Locker(t, s)
	b := testserver.Locker(t, openCluster(t))
	la, err := a.TryAcquire(ctx, rs[0], 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	killed, _ := masterNode(t, s, raw, "tenure:lease:{"+rs[0]+"}")
	testserver.Run(t, script, "kill", killed)
	restarted := false
	defer func() {
		if !restarted {
			testserver.Run(t, script, "restart", killed)
			testserver.Run(t, script, "start")
		}
	}()
	killedAt := time.Now()
	at := grantAgain(t, b, func(i int) string { return rs[1+i%(len(rs)-1)] }, 60*time.Second)
	t.Logf("master of slot %d (node %s) killed: a lease of the slot was granted again after %v",
		tredis.KeySlot("tenure:lease:{"+rs[0]+"}"), killed, at.Sub(killedAt).Round(10*time.Millisecond))
	if _, err := b.TryAcquire(ctx, rs[0], time.Second); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("B after the failover: %v; want ErrHeld (A's grant had reached the replica)", err)
	}
	// The promoted replica has no replica of its own: WAIT cannot be
	// satisfied, so A's renewal is not confirmed (the cost of WaitReplicas).
	if err := la.Renew(ctx); !errors.Is(err, tredis.ErrNotReplicated) || !errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("A's renewal on a master without a replica: %v; want ErrNotReplicated", err)
	}
	// The killed node rejoins as the new master's replica: renewals are
	// confirmed again.
	testserver.Run(t, script, "restart", killed)
	testserver.Run(t, script, "start") // waits until the cluster is whole
	restarted = true
	if err := la.Renew(ctx); err != nil {
		t.Fatalf("A's renewal once the killed node is a replica again: %v", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// masterNode returns the number, in scripts/redis-cluster, of the node
// that s finds as the master of key's slot (its port less the first
// node's: the URL raw's first host), and the first node's port. It skips
// the test when the URL's first host is not the script's node 0.
func masterNode(t *testing.T, s *tredis.Store, raw, key string) (node string, port0 int) {
	t.Helper()
	m, err := s.ClusterClient().MasterForKey(testserver.Ctx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	first, err := tredis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	_, p0, _ := net.SplitHostPort(first.Cluster.Addrs[0])
	_, pm, _ := net.SplitHostPort(m.Options().Addr)
	if os.Getenv("TENURE_REDIS_CLUSTER_PORT") != "" && os.Getenv("TENURE_REDIS_CLUSTER_PORT") != p0 {
		t.Skipf("the URL's first node (%s) is not scripts/redis-cluster's node 0", p0)
	}
	n0, _ := strconv.Atoi(p0)
	nm, _ := strconv.Atoi(pm)
	return strconv.Itoa(nm - n0), n0
}

// slotServers returns, for every node of scripts/redis-cluster (ports
// port0 to port0+5) that answers, the port of the master that its CLUSTER
// SLOTS names for slot.
func slotServers(t *testing.T, port0, slot int) map[int]int {
	t.Helper()
	ctx := testserver.Ctx(t)
	out := map[int]int{}
	for p := port0; p < port0+6; p++ {
		c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), MaxRetries: -1,
			DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
		ranges, err := c.ClusterSlots(ctx).Result()
		c.Close()
		if err != nil {
			continue // killed, or not answering
		}
		for _, r := range ranges {
			if int(r.Start) <= slot && slot <= int(r.End) && len(r.Nodes) > 0 {
				_, pm, _ := net.SplitHostPort(r.Nodes[0].Addr)
				out[p], _ = strconv.Atoi(pm)
			}
		}
	}
	return out
}

// TestClusterMasterFailoverKeepsConfirmedWrites (TENURE_SERVER_FAULTS=1,
// with the cluster of scripts/redis-cluster): the safety harness's
// master-failover, twice on the master of one slot, through the script as
// the harness calls it: kill the master, wait-failover, restart the node,
// start (until the replicas are in sync). When wait-failover returns,
// every node that answers names another node as the slot's master (a
// replica took over); after the restart the killed node is a replica, and
// what the store confirmed with WaitReplicas=1 before the kill is there:
// A's lease with its token (B is refused it), and R, granted and
// released, stays free. A node restarted while the cluster only suspected
// it (before its replica was elected) comes back as the master of its
// slots without their keys, and its replica copies it: every lease of
// those slots would be lost.
func TestClusterMasterFailoverKeepsConfirmedWrites(t *testing.T) {
	raw := clusterURL(t)
	script := testserver.ServerScript(t, "redis-cluster")
	ctx := testserver.Ctx(t)
	s := openCluster(t, func(c *tredis.Config) { c.WaitReplicas = 1 })
	rs := sameSlot(testserver.Resource(t), 2)
	key := "tenure:lease:{" + rs[0] + "}"
	slot := tredis.KeySlot(key)
	a, _ := naming.NewOwner("a")
	b, _ := naming.NewOwner("b")
	r, _ := naming.NewOwner("r")
	held, err := s.Acquire(ctx, rs[0], a, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = openCluster(t).Release(ctx, rs[0], a, held.Token) }()
	for round := 1; round <= 2; round++ {
		freed, err := s.Acquire(ctx, rs[1], r, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, rs[1], r, freed.Token); err != nil {
			t.Fatal(err)
		}
		if err := s.Renew(ctx, rs[0], a, held.Token, 2*time.Minute); err != nil {
			t.Fatalf("round %d: A's renewal before the kill: %v", round, err)
		}
		killed, port0 := masterNode(t, s, raw, key)
		testserver.Run(t, script, "kill", killed)
		testserver.Run(t, script, "wait-failover", killed)
		servers := slotServers(t, port0, slot)
		testserver.Run(t, script, "restart", killed)
		testserver.Run(t, script, "start")
		kp, _ := strconv.Atoi(killed)
		for node, m := range servers {
			if m == port0+kp {
				t.Errorf("round %d: when wait-failover %s returned, node %d still named it (port %d) the master of slot %d", round, killed, node-port0, m, slot)
			}
		}
		if slices.Contains(strings.Fields(scriptOutput(t, script, "masters")), killed) {
			t.Errorf("round %d: node %s is a master again after its restart", round, killed)
		}
		s2 := openCluster(t)
		got, err := s2.Get(ctx, rs[0])
		if err != nil || got.Owner != a || got.Token != held.Token {
			t.Fatalf("round %d: A's lease after the failover: %+v, %v; want owner %s, token %d", round, got, err, a, held.Token)
		}
		if _, err := s2.Acquire(ctx, rs[0], b, time.Second); !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("round %d: B's acquire after the failover: %v; want ErrHeld", round, err)
		}
		if got, err := s2.Get(ctx, rs[1]); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("round %d: R, released before the kill: %+v, %v; want ErrNotHeld", round, got, err)
		}
	}
}
