package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	tredis "github.com/tenure-go/tenure/store/redis"
)

// clusterNode is a master of the cluster as CLUSTER NODES lists it.
type clusterNode struct {
	id, addr string
	client   *goredis.Client
}

// slotMasters returns the master that serves slot and another master.
func slotMasters(ctx context.Context, t *testing.T, cc *goredis.ClusterClient, slot int) (owner, other clusterNode) {
	t.Helper()
	shards, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ownerAddr string
	addrs := map[string]string{} // addr -> id
	for _, s := range shards {
		m := s.Nodes[0]
		addrs[m.Addr] = m.ID
		if slot >= s.Start && slot <= s.End {
			ownerAddr = m.Addr
		}
	}
	if ownerAddr == "" {
		t.Fatalf("no master serves slot %d", slot)
	}
	mk := func(addr string) clusterNode {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		return clusterNode{id: addrs[addr], addr: addr, client: c}
	}
	owner = mk(ownerAddr)
	for a := range addrs {
		if a != ownerAddr {
			return owner, mk(a)
		}
	}
	t.Fatal("one master only")
	return
}

// migrateSlot moves slot from src to dst as redis-cli --cluster reshard
// does: IMPORTING on dst, MIGRATING on src, then (after between, called
// with the keys still on src) MIGRATE of every key, then SETSLOT NODE on
// both. firstKeys, when set, are migrated before between is called, so
// that between sees the slot's keys split between the nodes.
func migrateSlot(ctx context.Context, t *testing.T, slot int, src, dst clusterNode, firstKeys []string, between func()) {
	t.Helper()
	do := func(c *goredis.Client, args ...any) {
		t.Helper()
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%s %v: %v", c.Options().Addr, args, err)
		}
	}
	host, port, _ := strings.Cut(dst.addr, ":")
	migrate := func(keys []string) {
		if len(keys) == 0 {
			return
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		do(src.client, args...)
	}
	do(dst.client, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id)
	do(src.client, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id)
	migrate(firstKeys)
	if between != nil {
		between()
	}
	for {
		keys, err := src.client.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			break
		}
		migrate(keys)
	}
	do(dst.client, "CLUSTER", "SETSLOT", slot, "NODE", dst.id)
	do(src.client, "CLUSTER", "SETSLOT", slot, "NODE", dst.id)
}

// sameSlot returns n resource names whose lease keys (default prefix)
// share the hash slot of base's.
func sameSlot(base string, n int) []string {
	slot := tredis.KeySlot("tenure:lease:{" + base + "}")
	out := []string{base}
	for i := 0; len(out) < n; i++ {
		r := fmt.Sprintf("%s/%d", base, i)
		if tredis.KeySlot("tenure:lease:{"+r+"}") == slot {
			out = append(out, r)
		}
	}
	return out
}

// TestClusterSlotMigration: a slot moves to another master (CLUSTER
// SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE) while a lease in it
// is held and renewed every 100 ms. The lease is never lost; while the
// slot's keys are split between the nodes (the lease moved, its slot's
// token counter not yet), renewals follow ASK to the new node, and an
// acquire of a free resource of the slot (which needs the lease key and
// the counter on one node: TRYAGAIN) is granted once the migration ended.
// Afterwards the holder still excludes others, tokens still increase, and
// List and RenewBatch see the lease on its new node. The slot is moved back
// at the end.
func TestClusterSlotMigration(t *testing.T) {
	redirects := countRedirects(t)
	s := openCluster(t)
	ctx := testserver.Ctx(t)
	cc := s.ClusterClient()
	rs := sameSlot(testserver.Resource(t), 3)
	held, free, other := rs[0], rs[1], rs[2]
	key := "tenure:lease:{" + held + "}"
	slot := tredis.KeySlot(key)
	if got, err := cc.ClusterKeySlot(ctx, key).Result(); err != nil || int(got) != slot {
		t.Fatalf("CLUSTER KEYSLOT %s = %d, %v; the store computes %d", key, got, err, slot)
	}
	src, dst := slotMasters(ctx, t, cc, slot)

	var lostMu sync.Mutex
	var lost error
	a := testserver.Locker(t, s, tenure.WithRenewInterval(100*time.Millisecond),
		tenure.WithOnLost(func(_ *tenure.Lease, cause error) {
			lostMu.Lock()
			lost = cause
			lostMu.Unlock()
		}))
	la, err := a.TryAcquire(ctx, held, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lo, err := a.TryAcquire(ctx, other, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b := testserver.Locker(t, openCluster(t))

	move := func(from, to clusterNode) {
		tryAgain0 := redirects.tryAgain.Load()
		migrateSlot(ctx, t, slot, from, to, []string{key}, func() {
			// The lease is on the new node, the counter and the other lease
			// still on the old one.
			if err := la.Renew(ctx); err != nil {
				t.Errorf("renewal while the slot is split: %v", err)
			}
			granted := make(chan error, 1)
			go func() {
				l, err := b.TryAcquire(ctx, free, 3*time.Second)
				if err == nil {
					if l.Token() <= lo.Token() {
						err = fmt.Errorf("token %d granted during the migration <= %d granted before", l.Token(), lo.Token())
					}
					_ = l.Release(ctx)
				}
				granted <- err
			}()
			// Go on once the acquire met TRYAGAIN (the lease key and the
			// counter of its slot on two nodes).
			for deadline := time.Now().Add(10 * time.Second); redirects.tryAgain.Load() == tryAgain0 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			t.Cleanup(func() {
				if err := <-granted; err != nil {
					t.Errorf("acquire of a free resource during the migration: %v", err)
				}
			})
		})
		if _, err := b.TryAcquire(ctx, held, time.Second); !errors.Is(err, tenure.ErrHeld) {
			t.Fatalf("B after the migration: %v; want ErrHeld", err)
		}
		recs, err := s.List(ctx, held)
		if err != nil || len(recs) == 0 || recs[0].Token != la.Token() {
			t.Fatalf("List after the migration: %v, %v", recs, err)
		}
		errs := s.RenewBatch(ctx, []driver.Renewal{
			{Resource: held, Owner: la.Owner(), Token: la.Token(), TTL: 3 * time.Second},
			{Resource: other, Owner: lo.Owner(), Token: lo.Token(), TTL: 3 * time.Second},
		})
		for _, err := range errs {
			if err != nil {
				t.Fatalf("RenewBatch after the migration: %v", err)
			}
		}
	}
	move(src, dst)
	t.Logf("slot %d moved from %s to %s while %q was held", slot, src.addr, dst.addr, held)
	time.Sleep(500 * time.Millisecond) // renewals on the new node
	move(dst, src)
	if redirects.ask.Load() == 0 || redirects.tryAgain.Load() == 0 {
		t.Errorf("the migrations answered %d ASK and %d TRYAGAIN: the test did not exercise them", redirects.ask.Load(), redirects.tryAgain.Load())
	}
	t.Logf("answers followed: %d ASK, %d TRYAGAIN, %d MOVED", redirects.ask.Load(), redirects.tryAgain.Load(), redirects.moved.Load())
	lostMu.Lock()
	defer lostMu.Unlock()
	if lost != nil || la.Err() != nil {
		t.Fatalf("the lease was lost during the migrations: %v %v", lost, la.Err())
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, held, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token after the migrations %d <= %d", lb.Token(), la.Token())
	}
	_ = lb.Release(ctx)
	_ = lo.Release(ctx)
}

// redirectCounter counts the calls that nodes answered with ASK, MOVED
// and TRYAGAIN (the store's own count: go-redis's hooks do not see these
// answers).
type redirectCounter struct{ ask, moved, tryAgain atomic.Int64 }

func countRedirects(t *testing.T) *redirectCounter {
	h := &redirectCounter{}
	restore := tredis.SetOnRedirect(func(msg string) {
		switch {
		case strings.HasPrefix(msg, "ASK "):
			h.ask.Add(1)
		case strings.HasPrefix(msg, "MOVED "):
			h.moved.Add(1)
		case strings.HasPrefix(msg, "TRYAGAIN"):
			h.tryAgain.Add(1)
		}
	})
	t.Cleanup(restore)
	return h
}
