package redis_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/testserver"
	tredis "github.com/tenure-go/tenure/store/redis"
)

// startReplicated starts a master and a replica of its own (see startRedis)
// and waits until the replica is in sync; it returns their addresses, the
// replica's process and an admin client of the replica.
func startReplicated(t *testing.T) (masterAddr, replicaAddr string, replica *goredis.Client, stop, cont func()) {
	t.Helper()
	masterAddr, _ = startRedis(t, t.TempDir())
	replicaAddr, proc := startRedis(t, t.TempDir(), "--replicaof", strings.Replace(masterAddr, ":", " ", 1))
	replica = goredis.NewClient(&goredis.Options{Addr: replicaAddr})
	t.Cleanup(func() { replica.Close() })
	ctx := testserver.Ctx(t)
	for deadline := time.Now().Add(20 * time.Second); ; {
		if info, _ := replica.Info(ctx, "replication").Result(); strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica never synchronised")
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop = func() { _ = proc.Process.Signal(syscall.SIGSTOP) }
	cont = func() { _ = proc.Process.Signal(syscall.SIGCONT) }
	t.Cleanup(cont)
	return masterAddr, replicaAddr, replica, stop, cont
}

// TestWaitReplicas (TENURE_SERVER_FAULTS=1; starts its own master and
// replica): with WaitReplicas, a grant or renewal is confirmed only once
// the replica has it. While the replica does not answer (SIGSTOP), the
// master applies a grant but the store does not report it granted: the
// error wraps ErrNotReplicated and ErrUnknownOutcome, and so does a
// renewal's; a Locker's TryAcquire gives up with ErrUnknownOutcome rather
// than a lease. Once the replica answers again, the same grant's retry is
// confirmed with the token the master gave it.
func TestWaitReplicas(t *testing.T) {
	masterAddr, _, replica, stop, cont := startReplicated(t)
	ctx := testserver.Ctx(t)
	s := testserver.Open(t, "redis://"+masterAddr+"/0?wait_replicas=1&wait_timeout=200ms", tredis.ParseURL, tredis.Open)
	a, _ := naming.NewOwner("a")
	b, _ := naming.NewOwner("b")

	ra, err := s.Acquire(ctx, "r1", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Confirmed: the replica has it already (WAIT came back with it).
	if v, err := replica.Get(ctx, "tenure:lease:r1").Result(); err != nil || !strings.Contains(v, ":"+a+":") {
		t.Fatalf("the replica's copy of a confirmed grant: %q, %v", v, err)
	}

	stop()
	start := time.Now()
	_, err = s.Acquire(ctx, "r2", b, time.Minute)
	if !errors.Is(err, tredis.ErrNotReplicated) || !errors.Is(err, driver.ErrUnknownOutcome) {
		t.Fatalf("acquire while the replica is stopped: %v; want ErrNotReplicated and ErrUnknownOutcome", err)
	}
	t.Logf("acquire not confirmed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if err := s.Renew(ctx, "r1", a, ra.Token, time.Minute); !errors.Is(err, tredis.ErrNotReplicated) || !errors.Is(err, driver.ErrUnknownOutcome) {
		t.Fatalf("renewal while the replica is stopped: %v; want ErrNotReplicated and ErrUnknownOutcome", err)
	}
	// A refusal is not a write to confirm: it names the holder at once.
	if _, err := s.Acquire(ctx, "r1", b, time.Minute); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("acquire of a held resource while the replica is stopped: %v; want ErrHeld", err)
	}
	lk := testserver.Locker(t, s)
	if l, err := lk.TryAcquire(ctx, "r3", 600*time.Millisecond); err == nil || !errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("Locker.TryAcquire while the replica is stopped: %v, %v; want ErrUnknownOutcome and no lease", l, err)
	}

	cont()
	rb, err := s.Acquire(ctx, "r2", b, time.Minute) // the same grant, tried again
	if err != nil {
		t.Fatalf("the same grant once the replica answers: %v", err)
	}
	if v, err := replica.Get(ctx, "tenure:lease:r2").Result(); err != nil || !strings.Contains(v, b) {
		t.Fatalf("the replica's copy: %q, %v", v, err)
	}
	if rb.Token <= ra.Token {
		t.Fatalf("token %d <= %d", rb.Token, ra.Token)
	}
}

// TestWaitRefusesGrantLostByFailover (TENURE_SERVER_FAULTS=1): the
// failure of TestFailoverToLaggingReplica, with WaitReplicas. The replica
// is promoted while the old master still takes B's acquire; the old master
// has no replica left to acknowledge it, so B is not told it holds the
// lease (ErrNotReplicated, ErrUnknownOutcome), and C, granted it on the
// promoted replica, is its only holder.
func TestWaitRefusesGrantLostByFailover(t *testing.T) {
	masterAddr, replicaAddr, replica, _, _ := startReplicated(t)
	ctx := testserver.Ctx(t)
	onMaster := testserver.Open(t, "redis://"+masterAddr+"/0?wait_replicas=1&wait_timeout=200ms", tredis.ParseURL, tredis.Open)
	b, _ := naming.NewOwner("b")
	c, _ := naming.NewOwner("c")
	if err := replica.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := onMaster.Acquire(ctx, "lost", b, time.Minute); !errors.Is(err, tredis.ErrNotReplicated) || !errors.Is(err, driver.ErrUnknownOutcome) {
		t.Fatalf("B's acquire on a master whose replica was promoted: %v; want ErrNotReplicated and ErrUnknownOutcome", err)
	}
	onReplica := testserver.Open(t, "redis://"+replicaAddr+"/0", tredis.ParseURL, tredis.Open)
	if _, err := onReplica.Acquire(ctx, "lost", c, time.Minute); err != nil {
		t.Fatalf("C on the promoted replica: %v", err)
	}
}
