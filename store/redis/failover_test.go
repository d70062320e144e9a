package redis_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/testserver"
	tredis "github.com/tenure-go/tenure/store/redis"
)

// startRedis starts a redis-server of the test's own on a free loopback
// port (no persistence), with extra options, and returns its address and
// process.
func startRedis(t *testing.T, dir string, extra ...string) (string, *exec.Cmd) {
	t.Helper()
	bin := testserver.OwnBinary(t, "/usr/bin/redis-server", "redis-server")
	port := testserver.FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin, append([]string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "",
	}, extra...)...)
	testserver.StartProcess(t, cmd, filepath.Join(dir, "redis.log"), addr)
	return addr, cmd
}

// TestFailoverToLaggingReplica (TENURE_SERVER_FAULTS=1; starts its own
// master and replica): the documented failure of an asynchronously
// replicated Redis. A lease granted on the master that the replica never
// received (here: a write the old master took after the replica was
// promoted, as in a Sentinel failover) is gone: another owner is granted
// at once while the first still trusts its lease (exclusion is broken
// until the first one's next renewal, which the store answers with the new
// holder's name). The fencing token does not go back: the new grant's
// token is above the lost one's, although the replica's counter never saw
// it (the server's clock is the floor). A lease that had reached the
// replica survives the failover.
func TestFailoverToLaggingReplica(t *testing.T) {
	masterAddr, master := startRedis(t, t.TempDir())
	replicaAddr, _ := startRedis(t, t.TempDir(), "--replicaof", strings.Replace(masterAddr, ":", " ", 1))
	ctx := testserver.Ctx(t)
	admin := goredis.NewClient(&goredis.Options{Addr: replicaAddr})
	defer admin.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if info, _ := admin.Info(ctx, "replication").Result(); strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica never synchronised")
		}
		time.Sleep(50 * time.Millisecond)
	}
	openAt := func(addr string) *tredis.Store {
		return testserver.Open(t, "redis://"+addr+"/0", tredis.ParseURL, tredis.Open)
	}
	onMaster := openAt(masterAddr)
	a, _ := naming.NewOwner("a")
	b, _ := naming.NewOwner("b")
	c, _ := naming.NewOwner("c")

	// A's lease reaches the replica (WAIT for one replica).
	ra, err := onMaster.Acquire(ctx, "replicated", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := onMaster.Client().Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}

	// The replica is promoted (as Sentinel does when the master seems
	// gone), while the old master still takes a write that the replica
	// never receives: B's grant. Then the old master dies.
	if err := admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	rb, err := onMaster.Acquire(ctx, "lost", b, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_ = master.Process.Kill()
	onReplica := openAt(replicaAddr)

	// C is granted B's resource at once: two owners believe they hold it.
	rc, err := onReplica.Acquire(ctx, "lost", c, time.Minute)
	if err != nil {
		t.Fatalf("acquire on the promoted replica: %v (B's lease should be lost with the failover)", err)
	}
	if rc.Token <= rb.Token {
		t.Fatalf("token after the failover %d <= %d, the token granted on the old master", rc.Token, rb.Token)
	}
	t.Logf("exclusion broken by the failover: B (token %d) and C (token %d) both granted %q; C's token is greater", rb.Token, rc.Token, "lost")
	// B learns it at its next renewal, and who holds the resource now.
	err = onReplica.Renew(ctx, "lost", b, rb.Token, time.Minute)
	var held *driver.HeldError
	if !errors.Is(err, driver.ErrLeaseLost) || !errors.As(err, &held) || held.Holder.Owner != c {
		t.Fatalf("B's renewal after the failover: %v; want ErrLeaseLost naming C", err)
	}
	// A's lease, replicated, survived.
	if err := onReplica.Renew(ctx, "replicated", a, ra.Token, time.Minute); err != nil {
		t.Fatalf("A's renewal after the failover: %v", err)
	}
	ctxRelease, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = onReplica.Release(ctxRelease, "replicated", a, ra.Token)
}
