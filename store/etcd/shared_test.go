package etcd_test

// Shared etcd leases, and what tenure does when an operator deletes a key,
// revokes an etcd lease or compacts etcd's history.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/etcd"
)

// rpcs counts the gRPC calls (unary calls and streams opened) of a store by
// method.
type rpcs struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *rpcs) add(method string) {
	r.mu.Lock()
	r.n[method]++
	r.mu.Unlock()
}

// take returns the counts since the last call and starts again.
func (r *rpcs) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n
	r.n = map[string]int{}
	return n
}

func total(n map[string]int) int {
	t := 0
	for _, v := range n {
		t += v
	}
	return t
}

// counted opens a store whose gRPC calls are counted.
func counted(t *testing.T) (*etcd.Store, *rpcs) {
	r := &rpcs{n: map[string]int{}}
	s := open(t, func(c *etcd.Config) {
		c.Client.DialOptions = append(c.Client.DialOptions,
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				r.add(method)
				return invoker(ctx, method, req, reply, cc, opts...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				r.add(method)
				return streamer(ctx, desc, cc, method, opts...)
			}))
	})
	r.take()
	return s, r
}

const (
	methodGrant      = "/etcdserverpb.Lease/LeaseGrant"
	methodRevoke     = "/etcdserverpb.Lease/LeaseRevoke"
	methodKeepAlive  = "/etcdserverpb.Lease/LeaseKeepAlive"
	methodTxn        = "/etcdserverpb.KV/Txn"
	methodTimeToLive = "/etcdserverpb.Lease/LeaseTimeToLive"
)

// leaseOf returns the etcd lease that carries resource's key.
func leaseOf(t *testing.T, s *etcd.Store, resource string) clientv3.LeaseID {
	t.Helper()
	resp, err := s.Client().Get(testserver.Ctx(t), etcd.DefaultPrefix+resource)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %q: %v, %d keys", resource, err, len(resp.Kvs))
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// TestSharedLease: a Store's grants with the same TTL (in whole seconds)
// share one etcd lease, granted once; another TTL gets another. Acquire,
// renew and release are one Txn each (plus, at most, one keep-alive of the
// shared lease), and a release revokes nothing.
func TestSharedLease(t *testing.T) {
	s, calls := counted(t)
	ctx := testserver.Ctx(t)
	base := testserver.Resource(t)
	owner := func(i int) string { o, _ := naming.NewOwner("shared"); return o }
	const n = 200
	recs := make([]driver.Record, n)
	for i := range recs {
		r := base + "/" + string(rune('a'+i%26)) + "/" + time.Duration(i).String()
		rec, err := s.Acquire(ctx, r, owner(i), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = rec
	}
	got := calls.take()
	if got[methodGrant] != 1 || got[methodTxn] != n {
		t.Fatalf("%d acquires with one TTL: %v; want 1 Grant and %d Txns", n, got, n)
	}
	if ka := got[methodKeepAlive]; ka > n/10 {
		t.Fatalf("%d acquires made %d keep-alives", n, ka)
	}
	id := leaseOf(t, s, recs[0].Resource)
	if other := leaseOf(t, s, recs[n-1].Resource); other != id {
		t.Fatalf("two grants with one TTL on etcd leases %x and %x", id, other)
	}
	calls.take()

	// One renewal: one Txn, and a keep-alive only if the last is old.
	if err := s.Renew(ctx, recs[0].Resource, recs[0].Owner, recs[0].Token, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	got = calls.take()
	if got[methodTxn] != 1 || total(got) > 2 {
		t.Fatalf("one renewal: %v; want one Txn and at most one keep-alive", got)
	}

	// A batch of 100: one Txn (one compare per key), at most one keep-alive.
	batch := make([]driver.Renewal, n)
	for i, rec := range recs {
		batch[i] = driver.Renewal{Resource: rec.Resource, Owner: rec.Owner, Token: rec.Token, TTL: 30 * time.Second}
	}
	for i, err := range s.RenewBatch(ctx, batch[:100]) {
		if err != nil {
			t.Fatalf("batch renewal %d: %v", i, err)
		}
	}
	got = calls.take()
	if got[methodTxn] != 1 || got[methodKeepAlive] > 1 || total(got) > 2 {
		t.Fatalf("batch of 100: %v; want one Txn and at most one keep-alive", got)
	}
	// A batch of n on one etcd lease: no read of each key, at most one
	// keep-alive, and a listing of the etcd lease's keys in the background.
	for i, err := range s.RenewBatch(ctx, batch) {
		if err != nil {
			t.Fatalf("batch renewal %d: %v", i, err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the listing, if it was not done yet
	got = calls.take()
	if got[methodTxn] != 0 || got[methodTimeToLive] > 1 || got[methodKeepAlive] > 1 || total(got) > 2 {
		t.Fatalf("batch of %d: %v; want at most one TimeToLive and one keep-alive", n, got)
	}

	// Another TTL: another etcd lease.
	r2 := base + "/ttl20"
	rec2, err := s.Acquire(ctx, r2, owner(0), 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if leaseOf(t, s, r2) == id {
		t.Fatal("grants with TTLs of 30 s and 20 s share an etcd lease")
	}
	calls.take()

	// Release: one Txn, no revoke; the others stay.
	for _, rec := range append(recs, rec2) {
		if err := s.Release(ctx, rec.Resource, rec.Owner, rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	got = calls.take()
	if got[methodTxn] != n+1 || got[methodRevoke] != 0 || total(got) != n+1 {
		t.Fatalf("%d releases: %v; want %d Txns and nothing else", n+1, got, n+1)
	}
}

// TestSharedLeaseKeepsNoAbandonedKey: two grants share an etcd lease; one
// is renewed, the other is not. The one not renewed goes after its TTL as
// if it had an etcd lease of its own (the Store's reaper deletes it), and a
// renewal of it afterwards is refused; the renewed one stays.
func TestSharedLeaseKeepsNoAbandonedKey(t *testing.T) {
	s := open(t)
	direct := open(t)
	ctx := testserver.Ctx(t)
	r := testserver.Resource(t)
	a, _ := naming.NewOwner("abandoned")
	b, _ := naming.NewOwner("renewed")
	start := time.Now()
	ra, err := s.Acquire(ctx, r+"/a", a, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := s.Acquire(ctx, r+"/b", b, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if leaseOf(t, s, r+"/a") != leaseOf(t, s, r+"/b") {
		t.Fatal("not on one etcd lease")
	}
	for {
		if err := s.Renew(ctx, r+"/b", b, rb.Token, 2*time.Second); err != nil {
			t.Fatalf("renewing b after %v: %v", time.Since(start), err)
		}
		_, err := direct.Get(ctx, r+"/a")
		if errors.Is(err, tenure.ErrNotHeld) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(start) > 6*time.Second {
			t.Fatalf("a, never renewed, still held %v after its 2 s acquire", time.Since(start))
		}
		time.Sleep(200 * time.Millisecond)
	}
	gone := time.Since(start)
	t.Logf("the grant not renewed was gone %v after its acquire", gone.Round(time.Millisecond))
	if gone < 2*time.Second {
		t.Fatalf("a gone %v after its acquire: before its TTL", gone)
	}
	if err := s.Renew(ctx, r+"/a", a, ra.Token, 2*time.Second); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("renewing the expired grant: %v; want ErrLeaseLost", err)
	}
	if _, err := direct.Get(ctx, r+"/b"); err != nil {
		t.Fatalf("the renewed grant: %v", err)
	}
}

// TestKeyDeletedByHand: an operator deletes a held key. The holder's next
// renewal says the grant no longer holds (ErrNotHolder, once); if another
// owner took the resource meanwhile, the loss names it. Tokens never go
// back: the next grant's is greater.
func TestKeyDeletedByHand(t *testing.T) {
	s := open(t)
	ctx := testserver.Ctx(t)
	var lostCalls atomic.Int32
	a := testserver.Locker(t, s, tenure.WithOnLost(func(*tenure.Lease, error) { lostCalls.Add(1) }))
	b := testserver.Locker(t, open(t))
	r := testserver.Resource(t)

	// Deleted, nobody else: "gone".
	la, err := a.TryAcquire(ctx, r+"/gone", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Delete(ctx, etcd.DefaultPrefix+r+"/gone"); err != nil {
		t.Fatal(err)
	}
	err = la.Renew(ctx)
	var held *tenure.HeldError
	if !errors.Is(err, tenure.ErrNotHolder) || errors.As(err, &held) {
		t.Fatalf("renewal after the key was deleted: %v; want ErrNotHolder without a holder", err)
	}
	next, err := b.TryAcquire(ctx, r+"/gone", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= la.Token() {
		t.Fatalf("token %d after %d", next.Token(), la.Token())
	}
	_ = next.Release(ctx)

	// Deleted, then taken by B: the loss names B.
	la, err = a.TryAcquire(ctx, r+"/taken", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Delete(ctx, etcd.DefaultPrefix+r+"/taken"); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, r+"/taken", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token %d after %d", lb.Token(), la.Token())
	}
	err = la.Renew(ctx)
	if !errors.Is(err, tenure.ErrNotHolder) || !errors.As(err, &held) || held.Holder.Owner != lb.Owner() || held.Holder.Token != lb.Token() {
		t.Fatalf("renewal after the key was taken: %v; want ErrNotHolder naming %s token %d", err, lb.Owner(), lb.Token())
	}
	// Release of a grant the store no longer has names the holder too.
	err = s.Release(ctx, r+"/taken", la.Owner(), la.Token())
	if !errors.Is(err, tenure.ErrLeaseLost) || !errors.As(err, &held) || held.Holder.Owner != lb.Owner() {
		t.Fatalf("release of the lost grant: %v; want ErrLeaseLost naming %s", err, lb.Owner())
	}
	if _, err := s.Get(ctx, r+"/taken"); err != nil {
		t.Fatalf("B's lease after A's refused release: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for lostCalls.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if n := lostCalls.Load(); n != 2 {
		t.Fatalf("%d loss callbacks for 2 lost leases", n)
	}
}

// TestLeaseRevokedByHand: an operator revokes the etcd lease that a
// Locker's leases with one TTL share. Exactly those leases are lost, each
// reported once; the lease with another TTL is not. The next grants' tokens
// are greater.
func TestLeaseRevokedByHand(t *testing.T) {
	s := open(t)
	ctx := testserver.Ctx(t)
	var mu sync.Mutex
	lost := map[string]int{}
	lk := testserver.Locker(t, s, tenure.WithOnLost(func(l *tenure.Lease, err error) {
		mu.Lock()
		lost[l.Resource()]++
		mu.Unlock()
	}))
	r := testserver.Resource(t)
	var shared []*tenure.Lease
	for _, name := range []string{"x", "y", "z"} {
		l, err := lk.TryAcquire(ctx, r+"/"+name, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		shared = append(shared, l)
	}
	apart, err := lk.TryAcquire(ctx, r+"/apart", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	id := leaseOf(t, s, r+"/x")
	if leaseOf(t, s, r+"/apart") == id {
		t.Fatal("TTLs of 30 s and 20 s share an etcd lease")
	}
	if _, err := s.Client().Revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, l := range shared {
		if err := l.Renew(ctx); !errors.Is(err, tenure.ErrNotHolder) {
			t.Fatalf("renewal of %s after its etcd lease was revoked: %v; want ErrNotHolder", l.Resource(), err)
		}
		if err := l.Renew(ctx); !errors.Is(err, tenure.ErrLeaseLost) {
			t.Fatalf("second renewal of %s: %v", l.Resource(), err)
		}
	}
	if err := apart.Renew(ctx); err != nil {
		t.Fatalf("the lease on another etcd lease: %v", err)
	}
	// New grants of the same TTL get a new etcd lease and greater tokens.
	for _, l := range shared {
		n, err := lk.TryAcquire(ctx, l.Resource(), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if n.Token() <= l.Token() {
			t.Fatalf("%s: token %d after %d", l.Resource(), n.Token(), l.Token())
		}
		if err := n.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if err := n.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(lost)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, l := range shared {
		if lost[l.Resource()] != 1 {
			t.Errorf("%s reported lost %d times", l.Resource(), lost[l.Resource()])
		}
	}
	if len(lost) != 3 {
		t.Errorf("losses reported: %v; want exactly the three leases on the revoked etcd lease", lost)
	}
}

// TestCompaction: etcd's history is compacted (and defragmented away)
// while a lease is held: the lease and its token stay, the next grant's
// token is greater, and a waiter is still woken by the release.
func TestCompaction(t *testing.T) {
	s := open(t)
	ctx := testserver.Ctx(t)
	a := testserver.Locker(t, s)
	b := testserver.Locker(t, open(t), tenure.WithRetry(time.Hour, time.Hour))
	r := testserver.Resource(t)
	la, err := a.TryAcquire(ctx, r, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ { // history to compact
		if _, err := s.Client().Put(ctx, etcd.DefaultPrefix+r+"/noise", "x"); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := s.Client().Get(ctx, etcd.DefaultPrefix+r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Delete(ctx, etcd.DefaultPrefix+r+"/noise"); err != nil {
		t.Fatal(err)
	}
	if err := la.Renew(ctx); err != nil {
		t.Fatalf("renewal after a compaction: %v", err)
	}
	got := make(chan *tenure.Lease, 1)
	go func() {
		lb, err := b.Acquire(ctx, r, 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	time.Sleep(300 * time.Millisecond)
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-got:
		if lb == nil {
			return
		}
		if lb.Token() <= la.Token() {
			t.Fatalf("token %d after %d", lb.Token(), la.Token())
		}
		_ = lb.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted within 10 s of the release")
	}
}

// TestRenewBatchSaysWhichLost: one Txn answers a batch; the leases it no
// longer holds are lost, each naming its holder when there is one, and the
// others are renewed.
func TestRenewBatchSaysWhichLost(t *testing.T) {
	t.Run("Txn", func(t *testing.T) { renewBatchSaysWhichLost(t, 5) })
	t.Run("Listing", func(t *testing.T) { renewBatchSaysWhichLost(t, 300) })
}

func renewBatchSaysWhichLost(t *testing.T, n int) {
	s := open(t)
	other := open(t)
	ctx := testserver.Ctx(t)
	r := testserver.Resource(t)
	var batch []driver.Renewal
	for i := 0; i < n; i++ {
		o, _ := naming.NewOwner("batch")
		name := fmt.Sprintf("%s/%d", r, i)
		rec, err := s.Acquire(ctx, name, o, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, driver.Renewal{Resource: name, Owner: o, Token: rec.Token, TTL: 30 * time.Second})
	}
	// b: deleted; d: deleted and taken by another owner.
	for _, i := range []int{1, 3} {
		if _, err := s.Client().Delete(ctx, etcd.DefaultPrefix+batch[i].Resource); err != nil {
			t.Fatal(err)
		}
	}
	taker, _ := naming.NewOwner("taker")
	took, err := other.Acquire(ctx, batch[3].Resource, taker, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A small batch finds the changes at once; a large one (relying on
	// listings of the etcd lease's keys) within a listing period, a tenth
	// of the TTL: 3 s here.
	start := time.Now()
	for {
		errs := s.RenewBatch(ctx, batch)
		for i, err := range errs {
			if i != 1 && i != 3 && err != nil {
				t.Fatalf("lease %d: %v", i, err)
			}
		}
		if errs[1] == nil || errs[3] == nil {
			if n < 128 {
				t.Fatalf("a small batch renewed a lease whose key is gone: %v, %v", errs[1], errs[3])
			}
			if time.Since(start) > 8*time.Second {
				t.Fatalf("a large batch still renews leases whose keys are gone %v later", time.Since(start))
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		var held *tenure.HeldError
		if err := errs[1]; !errors.Is(err, tenure.ErrLeaseLost) || errors.As(err, &held) {
			t.Errorf("deleted: %v", err)
		}
		if err := errs[3]; !errors.Is(err, tenure.ErrLeaseLost) || !errors.As(err, &held) || held.Holder.Owner != taker || held.Holder.Token != took.Token {
			t.Errorf("taken: %v; want ErrLeaseLost naming %s", err, taker)
		}
		t.Logf("found %v after the keys changed", time.Since(start).Round(time.Millisecond))
		return
	}
}

// TestLostAcquireLeavesNoKey: an acquire is applied but its answer is lost
// (a proxy drops the replies), so the Store does not know the key it put
// on its shared etcd lease, while another grant keeps that etcd lease
// alive. The key still goes about a TTL later, as it would on an etcd lease
// of its own.
func TestLostAcquireLeavesNoKey(t *testing.T) {
	ctx := testserver.Ctx(t)
	direct := open(t)
	s, proxy := proxied(t)
	r := testserver.Resource(t)
	keeper, _ := naming.NewOwner("keeper")
	rk, err := s.Acquire(ctx, r+"/keeper", keeper, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lostOwner, _ := naming.NewOwner("lost")
	proxy.SetMode(netfault.DropReplies)
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = s.Acquire(cctx, r+"/lost", lostOwner, 2*time.Second)
	cancel()
	proxy.SetMode(netfault.Pass)
	proxy.Reset()
	if !errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("acquire whose reply was lost: %v; want ErrUnknownOutcome", err)
	}
	rec, err := direct.Get(ctx, r+"/lost")
	if err != nil {
		t.Fatalf("the lost acquire was not applied: %v", err)
	}
	if rec.Owner != lostOwner {
		t.Fatalf("held by %s", rec.Owner)
	}
	applied := time.Now()
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		err := s.Renew(rctx, r+"/keeper", keeper, rk.Token, 2*time.Second)
		cancel()
		if err != nil && errors.Is(err, tenure.ErrLeaseLost) {
			t.Fatalf("keeper lost: %v", err)
		}
		_, err = direct.Get(ctx, r+"/lost")
		if errors.Is(err, tenure.ErrNotHeld) {
			break
		}
		if time.Since(applied) > 8*time.Second {
			t.Fatalf("the key of the lost acquire still there %v later", time.Since(applied))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the key of the lost acquire went %v after it was applied", time.Since(applied).Round(time.Millisecond))
}

// TestSharedOwnerKeyNotReapedByAnotherStore: a key held under an owner
// string that several Stores share (a semaphore's marker) and renewed by
// another Store, which moves it onto an etcd lease of its own, is not
// deleted by the first Store's reaper once the first stops renewing it (the
// reaper compared only value and create_revision, and deleted a marker
// still in use: a harness soak on a three-member cluster saw a semaphore
// marker granted afresh while holders renewed it).
func TestSharedOwnerKeyNotReapedByAnotherStore(t *testing.T) {
	first, second := open(t), open(t)
	ctx := testserver.Ctx(t)
	r := testserver.Resource(t)
	const shared = "tenure semaphore of 2 slots"
	rec, err := first.Acquire(ctx, r, shared, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Acquire(ctx, r, shared, 2*time.Second); err != nil {
		t.Fatalf("the second Store's acquire for the shared owner: %v", err)
	}
	start := time.Now()
	for time.Since(start) < 5*time.Second {
		if err := second.Renew(ctx, r, shared, rec.Token, 2*time.Second); err != nil {
			t.Fatalf("renewing through the second Store after %v: %v", time.Since(start).Round(time.Millisecond), err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	got, err := second.Get(ctx, r)
	if err != nil {
		t.Fatalf("the key renewed by the second Store: %v", err)
	}
	if got.Token != rec.Token {
		t.Fatalf("token %d; want %d (the key was deleted and granted again)", got.Token, rec.Token)
	}
}
