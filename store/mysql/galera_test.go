package mysql_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/mysql"
	"github.com/tenure-go/tenure/store/storetest"
)

// galeraNodes returns the addresses of the three Galera nodes that
// scripts/mariadb start3 runs ($TENURE_GALERA), or skips.
func galeraNodes(tb testing.TB) []string {
	tb.Helper()
	v := testserver.Env(tb, "TENURE_GALERA", "mariadb")
	nodes := strings.Split(v, ",")
	if len(nodes) != 3 {
		tb.Fatalf("TENURE_GALERA=%q: want three host:port", v)
	}
	return nodes
}

var galeraInit sync.Once

// openNode returns a store on Galera node i (0 to 2), the schema created
// once, closed at the end of the test.
func openNode(tb testing.TB, i int, mod ...func(*mysql.Config)) *mysql.Store {
	tb.Helper()
	raw := "mysql://tenure@" + galeraNodes(tb)[i] + "/tenure"
	var err error
	galeraInit.Do(func() {
		cfg, perr := mysql.ParseURL(raw)
		if perr != nil {
			err = perr
			return
		}
		err = mysql.Init(testserver.Ctx(tb), cfg)
	})
	if err != nil {
		tb.Fatal(err)
	}
	return testserver.Open(tb, raw, mysql.ParseURL, mysql.Open, mod...)
}

// TestGaleraConformance runs the conformance suite on one node of the
// cluster: every write is certified by the three nodes.
func TestGaleraConformance(t *testing.T) {
	galeraNodes(t)
	c := cfg
	c.New = func(t *testing.T) driver.Store { return openNode(t, 0) }
	storetest.Run(t, c)
}

// TestGaleraContentionAcrossNodes: Lockers on the three nodes contend for
// one resource. Galera certifies concurrent writes of the row on
// different nodes first-committer-wins: the other one fails (deadlock
// error 1213) and the store tries it again, after which it sees the
// winner's lease. Never two holders at once (each holder checks a shared
// count while it holds), tokens strictly increase in grant order.
func TestGaleraContentionAcrossNodes(t *testing.T) {
	ctx := testserver.Ctx(t)
	r := testserver.Resource(t)
	var (
		holders  atomic.Int32
		mu       sync.Mutex
		last     uint64
		grants   int
		overlaps int
	)
	conflicts := func() (n int64) {
		for i := range 3 {
			s := openNode(t, i)
			for _, v := range []string{"wsrep_local_cert_failures", "wsrep_local_bf_aborts"} {
				var name string
				var c int64
				if err := s.DB().QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE '"+v+"'").Scan(&name, &c); err != nil {
					t.Fatal(err)
				}
				n += c
			}
		}
		return n
	}
	before := conflicts()
	deadline := time.Now().Add(8 * time.Second)
	var wg sync.WaitGroup
	for i := range 6 {
		s := openNode(t, i%3)
		lk := testserver.Locker(t, s, tenure.WithRetry(5*time.Millisecond, 50*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				l, err := lk.Acquire(actx, r, 5*time.Second)
				cancel()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					continue
				}
				if holders.Add(1) != 1 {
					mu.Lock()
					overlaps++
					mu.Unlock()
				}
				mu.Lock()
				if l.Token() <= last {
					t.Errorf("token %d granted after %d", l.Token(), last)
				}
				last = l.Token()
				grants++
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				holders.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d grants across 3 nodes, 6 contenders; %d certification failures and brute-force aborts (each statement tried again)",
		grants, conflicts()-before)
	if overlaps > 0 || grants < 10 {
		t.Fatalf("%d overlapping holds, %d grants", overlaps, grants)
	}
}

// TestGaleraNodeKilled (TENURE_SERVER_FAULTS=1): the node that holder A
// uses is killed (SIGKILL) while A holds a lease. A cannot renew through
// it and loses the lease at its deadline; B, on another node, is granted
// the resource once A's lease expired in the cluster, never before A's
// deadline, with a greater token. The remaining two nodes keep serving
// (after Galera's suspect timeout). The node is restarted and rejoins.
// The times are logged: see docs/store-mysql.md.
func TestGaleraNodeKilled(t *testing.T) {
	galeraNodes(t)
	script := testserver.ServerScript(t, "mariadb")
	ctx := testserver.Ctx(t)
	const ttl = 6 * time.Second
	sa := openNode(t, 0, func(c *mysql.Config) { c.MySQL.Timeout = time.Second })
	sb := openNode(t, 1)
	r := testserver.Resource(t)
	a := testserver.Locker(t, sa)
	b := testserver.Locker(t, sb, tenure.WithRetry(50*time.Millisecond, 500*time.Millisecond))
	la, err := a.TryAcquire(ctx, r, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		out, err := execScript(script, "start", "1")
		if err != nil {
			t.Errorf("restarting node 1: %v\n%s", err, out)
		}
	})
	killed := time.Now()
	if out, err := execScript(script, "kill", "1"); err != nil {
		t.Fatalf("kill node 1: %v\n%s", err, out)
	}
	// The other nodes serve writes again once they have evicted node 1.
	probe := owner(t, "probe")
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rec, err := sb.Acquire(pctx, r+"/probe", probe, time.Second)
		cancel()
		if err == nil {
			_ = sb.Release(ctx, r+"/probe", probe, rec.Token)
			break
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("node 2 takes no write 30 s after node 1 was killed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("node 2 takes writes again %v after node 1 was killed", time.Since(killed).Round(time.Millisecond))
	lb, err := b.Acquire(ctx, r, ttl)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	t.Logf("B granted %v after node 1 was killed (A's TTL %v, A's deadline %v after the kill)",
		granted.Sub(killed).Round(time.Millisecond), ttl, la.Deadline().Sub(killed).Round(time.Millisecond))
	if granted.Before(la.Deadline()) {
		t.Fatalf("B granted %v before A's deadline", la.Deadline().Sub(granted))
	}
	select {
	case <-la.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("A's lease still trusted after B was granted")
	}
	if !errors.Is(la.Err(), tenure.ErrLeaseLost) {
		t.Fatalf("A's lease ended with %v; want ErrLeaseLost", la.Err())
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("B's token %d <= A's %d", lb.Token(), la.Token())
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	if out, err := execScript(script, "start", "1"); err != nil {
		t.Fatalf("restart node 1: %v\n%s", err, out)
	}
	t.Logf("node 1 rejoined and synced %v after its restart", time.Since(restarted).Round(time.Millisecond))
	if _, err := sa.Get(ctx, r); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Get on the rejoined node: %v; want ErrNotHeld", err)
	}
}

// TestGaleraNodePaused (TENURE_SERVER_FAULTS=1): the node of holder A is
// stopped (SIGSTOP) for longer than A's TTL, as a partitioned or frozen
// node would be. The others evict it and go on; A's renewals hang and end
// by their bounds, and A's lease is lost at its deadline; B, on another
// node, is granted the resource after that. When the node runs again, it
// answers from its old state until it notices that it left the primary
// component (then it refuses statements, error 1047, until it has
// rejoined): a read there may be stale, but a write cannot commit without
// the cluster's certification, so A's late renewal fails either way.
func TestGaleraNodePaused(t *testing.T) {
	galeraNodes(t)
	script := testserver.ServerScript(t, "mariadb")
	ctx := testserver.Ctx(t)
	const ttl = 6 * time.Second
	sa := openNode(t, 0, func(c *mysql.Config) { c.MySQL.Timeout = time.Second })
	sb := openNode(t, 1)
	r := testserver.Resource(t)
	a := testserver.Locker(t, sa)
	b := testserver.Locker(t, sb, tenure.WithRetry(50*time.Millisecond, 500*time.Millisecond))
	la, err := a.TryAcquire(ctx, r, ttl)
	if err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_, _ = execScript(script, "resume", "1")
		}
		if out, err := execScript(script, "start", "1"); err != nil {
			t.Errorf("node 1 back in the cluster: %v\n%s", err, out)
		}
	})
	paused := time.Now()
	if out, err := execScript(script, "pause", "1"); err != nil {
		t.Fatalf("pause node 1: %v\n%s", err, out)
	}
	lb, err := b.Acquire(ctx, r, ttl)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	t.Logf("B granted %v after node 1 was paused (A's deadline %v after the pause)",
		granted.Sub(paused).Round(time.Millisecond), la.Deadline().Sub(paused).Round(time.Millisecond))
	if granted.Before(la.Deadline()) {
		t.Fatalf("B granted %v before A's deadline", la.Deadline().Sub(granted))
	}
	if _, err := execScript(script, "resume", "1"); err != nil {
		t.Fatal(err)
	}
	resumed = true
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err = sa.Renew(rctx, r, la.Owner(), la.Token(), ttl)
	cancel()
	if err == nil {
		t.Fatal("A's renewal through the resumed node succeeded while B holds the lease")
	}
	t.Logf("A's renewal through the resumed node: %v", err)
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// execScript runs a server script (scripts/mariadb) with args.
func execScript(script string, args ...string) (string, error) {
	out, err := exec.Command(script, args...).CombinedOutput()
	return string(out), err
}
