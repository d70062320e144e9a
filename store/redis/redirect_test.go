package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/internal/testserver"
	tredis "github.com/tenure-go/tenure/store/redis"
)

// TestClusterRedirectedCallNotResent: a call that a node redirected (here
// ASK, while the lease's slot migrates) goes to the node named, and when
// that node applies it but the answer is lost, the outcome is unknown: the
// call is not sent again. A release sent again would find the lease it had
// freed gone and report ErrLeaseLost, a failure, for a release that was
// done. The node the lease moved to is reached through a proxy that drops
// its answers; once it has applied the release, the proxy passes again, so
// that a call sent again would be answered.
func TestClusterRedirectedCallNotResent(t *testing.T) {
	admin := openCluster(t)
	ctx := testserver.Ctx(t)
	r := testserver.Resource(t)
	key := "tenure:lease:{" + r + "}"
	slot := tredis.KeySlot(key)
	src, dst := slotMasters(ctx, t, admin.ClusterClient(), slot)
	p, err := netfault.Start(dst.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var d net.Dialer
	s := openCluster(t, func(c *tredis.Config) {
		c.Cluster.ReadTimeout = 500 * time.Millisecond
		c.Cluster.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == dst.addr {
				addr = p.Addr()
			}
			return d.DialContext(ctx, network, addr)
		}
	})
	owner, _ := naming.NewOwner("a")
	rec, err := s.Acquire(ctx, r, owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// exists tells whether dst has the lease key (ASKING: the slot is
	// still src's).
	exists := func() (bool, error) {
		var n *goredis.IntCmd
		_, err := dst.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.Do(ctx, "asking")
			n = p.Exists(ctx, key)
			return nil
		})
		return n.Val() == 1, err
	}
	migrateSlot(ctx, t, slot, src, dst, []string{key}, func() {
		// The lease is on dst, the slot still migrating: calls on it
		// are answered ASK by src.
		if got, err := s.Get(ctx, r); err != nil || got.Token != rec.Token {
			t.Fatalf("Get through ASK: %+v, %v", got, err)
		}
		// dst must know the release script: with its answers dropped, a
		// NOSCRIPT answer would be lost too, the store would never send
		// the source, and nothing would be applied (whether dst knew it
		// depended on which earlier tests had released a lease there).
		if err := tredis.LoadReleaseScript(ctx, dst.client); err != nil {
			t.Fatal(err)
		}
		p.SetMode(netfault.DropReplies)
		applied := make(chan struct{})
		go func() {
			defer close(applied)
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
				if there, err := exists(); err == nil && !there {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			p.SetMode(netfault.Pass)
		}()
		err := s.Release(ctx, r, owner, rec.Token)
		<-applied
		if !errors.Is(err, driver.ErrUnknownOutcome) {
			t.Errorf("a release applied whose answer was lost: %v; want ErrUnknownOutcome", err)
		}
		if there, err := exists(); err != nil || there {
			t.Errorf("the release was not applied (%v)", err)
		}
	})
	migrateSlot(ctx, t, slot, dst, src, nil, nil)
}

// TestClusterNodeAsOneServer: a redis:// URL that names a node of a Redis
// Cluster is refused at Open, pointing to redis+cluster://. It used to open
// on the node that serves the slot of the store's first key, where
// acquires failed (CROSSSLOT: the lease and the store's one counter are in
// two slots) and a write answered MOVED made the store dereference the
// cluster client it does not have (a panic, with wait_replicas).
func TestClusterNodeAsOneServer(t *testing.T) {
	admin := openCluster(t)
	ctx := testserver.Ctx(t)
	shards, err := admin.ClusterClient().ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			u := "redis://" + net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)) + "/0?wait_replicas=1"
			s, err := tredis.OpenURL(ctx, u)
			if err == nil {
				owner, _ := naming.NewOwner("a")
				for i := range 5 {
					r := fmt.Sprintf("%s/%d", testserver.Resource(t), i)
					func() {
						defer func() {
							if p := recover(); p != nil {
								t.Errorf("%s: renew %q panicked: %v", u, r, p)
							}
						}()
						_ = s.Renew(ctx, r, owner, 1, time.Second)
					}()
				}
				s.Close()
				t.Errorf("%s: a cluster node opened as one server", u)
				continue
			}
			if !strings.Contains(err.Error(), "redis+cluster://") {
				t.Errorf("%s: %v; want an error that names redis+cluster://", u, err)
			}
		}
	}
}

// TestClusterAcquireDuringMigration: an acquire of a free resource whose
// slot is being migrated is refused with TRYAGAIN by the importing node
// for as long as the migration lasts, even once every key of the slot has
// moved (it serves a call with a key it does not have only when the call
// names one key; an acquire names the lease and the slot's counter), and
// the source answers ASK in between. The store keeps trying for 3 s: here
// the migration ends after 25 answers have been followed, and the acquire
// is granted. The old code gave up after 20 answers (about a second),
// with the error of the last one, ASK.
func TestClusterAcquireDuringMigration(t *testing.T) {
	var followed atomic.Int64
	t.Cleanup(tredis.SetOnRedirect(func(string) { followed.Add(1) }))
	s := openCluster(t)
	ctx := testserver.Ctx(t)
	rs := sameSlot(testserver.Resource(t), 2)
	owner, _ := naming.NewOwner("a")
	held, err := s.Acquire(ctx, rs[0], owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	slot := tredis.KeySlot("tenure:lease:{" + rs[0] + "}")
	src, dst := slotMasters(ctx, t, s.ClusterClient(), slot)
	keys, err := src.client.ClusterGetKeysInSlot(ctx, slot, 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	var got tenure.Record
	migrateSlot(ctx, t, slot, src, dst, keys, func() {
		// Every key of the slot is on dst; the slot is still src's.
		before := followed.Load()
		done := make(chan error, 1)
		go func() {
			var err error
			got, err = s.Acquire(ctx, rs[1], owner, time.Minute)
			done <- err
		}()
		// No t.Fatal here: the migration must end whatever happens.
		for followed.Load() < before+25 {
			select {
			case err := <-done:
				t.Errorf("acquire during the migration, after %d answers: %v", followed.Load()-before, err)
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		t.Cleanup(func() {
			if err := <-done; err != nil {
				t.Errorf("acquire during the migration: %v", err)
			} else if got.Token <= held.Token {
				t.Errorf("token %d <= %d", got.Token, held.Token)
			}
		})
	})
	migrateSlot(ctx, t, slot, dst, src, nil, nil)
	_ = s.Release(ctx, rs[0], owner, held.Token)
	_ = s.Release(ctx, rs[1], owner, got.Token)
}

// TestClusterBracesInNames: resource names with hash-tag braces. The slot
// the store computes for each lease key is the one the cluster computes
// (CLUSTER KEYSLOT), the slot's token counter is in that slot on the same
// node (CLUSTER GETKEYSINSLOT finds it beside the lease), and the lease
// can be read, listed and released under its own name.
func TestClusterBracesInNames(t *testing.T) {
	s := openCluster(t)
	ctx := testserver.Ctx(t)
	cc := s.ClusterClient()
	owner, _ := naming.NewOwner("a")
	base := testserver.Resource(t)
	for _, name := range []string{"{", "}", "{}", "}{", "a{b}c", "{{x}}", "{x", "x}", "a}b{c", "{}}", "}0", "tenure:token:{0}"} {
		r := name + base // the names start with the braces
		key := "tenure:lease:{" + r + "}"
		slot := tredis.KeySlot(key)
		if got, err := cc.ClusterKeySlot(ctx, key).Result(); err != nil || int(got) != slot {
			t.Errorf("%q: CLUSTER KEYSLOT %d, %v; the store computes %d", r, got, err, slot)
			continue
		}
		rec, err := s.Acquire(ctx, r, owner, time.Minute)
		if err != nil {
			t.Errorf("%q: %v", r, err)
			continue
		}
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := node.ClusterGetKeysInSlot(ctx, slot, 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		counter := false
		for _, k := range keys {
			counter = counter || strings.HasPrefix(k, "tenure:token:{")
		}
		if !counter || !slices.Contains(keys, key) {
			t.Errorf("%q: slot %d holds %v; want the lease and a token counter", r, slot, keys)
		}
		if got, err := s.Get(ctx, r); err != nil || got.Token != rec.Token {
			t.Errorf("%q: Get %+v, %v", r, got, err)
		}
		if got, err := s.List(ctx, r); err != nil || len(got) != 1 || got[0].Resource != r {
			t.Errorf("%q: List %+v, %v", r, got, err)
		}
		if err := s.Release(ctx, r, owner, rec.Token); err != nil {
			t.Errorf("%q: %v", r, err)
		}
	}
}

// TestClusterRenewBatchAcrossSlots: a batch whose leases lie in many
// slots on every master, with WAIT, answers each lease on its own: renewed,
// lost (a stale token, a lease released), held by another owner (named),
// or refused before any I/O, in the batch's order, duplicates included.
func TestClusterRenewBatchAcrossSlots(t *testing.T) {
	s := openCluster(t, func(c *tredis.Config) { c.WaitReplicas = 1 })
	ctx := testserver.Ctx(t)
	a, _ := naming.NewOwner("a")
	b, _ := naming.NewOwner("b")
	base := testserver.Resource(t)
	var batch []driver.Renewal
	for i := range 30 {
		r := fmt.Sprintf("%s/%d", base, i)
		rec, err := s.Acquire(ctx, r, a, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, driver.Renewal{Resource: r, Owner: a, Token: rec.Token, TTL: time.Minute})
	}
	batch[3].Token++ // stale
	if err := s.Release(ctx, batch[4].Resource, a, batch[4].Token); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, batch[5].Resource, a, batch[5].Token); err != nil {
		t.Fatal(err)
	}
	rb, err := s.Acquire(ctx, batch[5].Resource, b, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	batch = append(batch, driver.Renewal{Resource: "", Owner: a, Token: 1, TTL: time.Minute}, batch[7], batch[3])
	errs := s.RenewBatch(ctx, batch)
	if len(errs) != len(batch) {
		t.Fatalf("%d answers for %d leases", len(errs), len(batch))
	}
	var held *driver.HeldError
	for i, err := range errs {
		switch {
		case i == 3 || i == 32 || i == 4:
			if !errors.Is(err, driver.ErrLeaseLost) {
				t.Errorf("lease %d: %v; want ErrLeaseLost", i, err)
			}
		case i == 5:
			if !errors.As(err, &held) || held.Holder.Owner != b || held.Holder.Token != rb.Token {
				t.Errorf("lease %d: %v; want a HeldError naming b", i, err)
			}
		case i == 30:
			if !errors.Is(err, driver.ErrInvalidResource) {
				t.Errorf("lease %d: %v; want ErrInvalidResource", i, err)
			}
		case err != nil:
			t.Errorf("lease %d: %v", i, err)
		}
	}
	for i, r := range batch[:30] {
		switch i {
		case 4:
		case 5:
			_ = s.Release(ctx, r.Resource, b, rb.Token)
		case 3:
			_ = s.Release(ctx, r.Resource, a, r.Token-1)
		default:
			_ = s.Release(ctx, r.Resource, a, r.Token)
		}
	}
}

// TestClusterListPrefixWithBrace: on a cluster the lease key of R is
// <prefix>lease:{R}, so the key of a name N is also the start of the keys
// of N + "}" + anything: List(N + "}") must not list N.
func TestClusterListPrefixWithBrace(t *testing.T) {
	s := openCluster(t)
	ctx := testserver.Ctx(t)
	owner, _ := naming.NewOwner("a")
	n := testserver.Resource(t)
	for _, r := range []string{n, n + "}x"} {
		rec, err := s.Acquire(ctx, r, owner, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Release(context.Background(), r, owner, rec.Token) })
	}
	got, err := s.List(ctx, n+"}")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Resource != n+"}x" {
		t.Errorf("List(%q) = %+v; want only %q", n+"}", got, n+"}x")
	}
}
