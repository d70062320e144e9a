package etcd

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
)

// hookKV lets a test lose the answer of a put and hold a delete Txn.
type hookKV struct {
	clientv3.KV
	mu          sync.Mutex
	losePut     bool          // next put Txn: apply it, report Unavailable
	holdDelete  chan struct{} // delete Txns wait for it to close
	deleteReady chan struct{} // closed when a delete Txn reaches Commit
	once        sync.Once
}

func (k *hookKV) Txn(ctx context.Context) clientv3.Txn {
	return &hookTxn{Txn: k.KV.Txn(ctx), k: k}
}

type hookTxn struct {
	clientv3.Txn
	k   *hookKV
	ops []clientv3.Op
}

func (t *hookTxn) If(c ...clientv3.Cmp) clientv3.Txn  { t.Txn = t.Txn.If(c...); return t }
func (t *hookTxn) Then(o ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(o...); t.ops = o; return t }
func (t *hookTxn) Else(o ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(o...); return t }
func (t *hookTxn) Commit() (*clientv3.TxnResponse, error) {
	isDel, isPut := false, false
	for _, o := range t.ops {
		isDel = isDel || o.IsDelete()
		isPut = isPut || o.IsPut()
	}
	t.k.mu.Lock()
	lose := isPut && t.k.losePut
	if lose {
		t.k.losePut = false
	}
	hold := t.k.holdDelete
	t.k.mu.Unlock()
	if isDel && hold != nil {
		t.k.once.Do(func() { close(t.k.deleteReady) })
		<-hold
	}
	r, err := t.Txn.Commit()
	if lose && err == nil {
		return nil, status.Error(codes.Unavailable, "injected: answer lost")
	}
	return r, err
}

func openInternal(t *testing.T, name string) *Store {
	u := testserver.Env(t, "TENURE_ETCD", "etcd")
	if !strings.HasPrefix(u, "etcd://") {
		u = "etcd://" + u
	}
	cfg, err := ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Prefix = "/tenure-test/" + name + "/" + time.Now().Format("150405.000000000") + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestGhostDeleteNotRacedByAdopt: an acquire whose answer was lost
// leaves a ghost; when the ghost is due, the reaper's exorcise finds the
// key without a grant and deletes it. A retry by the same owner that adopts
// the key while that delete is in flight must not be confirmed: the delete
// lands after it, and another owner is then granted the resource while the
// first trusts it. Found by a review; fails on the code before addChecked
// (the retry was granted, then owner-b too).
func TestGhostDeleteNotRacedByAdopt(t *testing.T) {
	s := openInternal(t, "ghost")
	fc := clock.NewFake()
	s.clock = fc
	hk := &hookKV{KV: s.cli.KV, deleteReady: make(chan struct{})}
	s.cli.KV = hk
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	hk.losePut = true
	if _, err := s.Acquire(ctx, "r", "owner-a", 2*time.Second); !errors.Is(err, driver.ErrUnknownOutcome) {
		t.Fatalf("first acquire: %v; want an unknown outcome", err)
	}
	// The ghost is due a TTL after it was recorded; hold its delete.
	hk.mu.Lock()
	hk.holdDelete = make(chan struct{})
	hk.mu.Unlock()
	fc.Advance(2 * time.Second)
	select {
	case <-hk.deleteReady:
	case <-time.After(5 * time.Second):
		t.Fatal("the ghost's delete did not start")
	}
	rec, err := s.Acquire(ctx, "r", "owner-a", 2*time.Second)
	close(hk.holdDelete) // the delete lands
	if err == nil {
		// Granted: then nobody else may be.
		time.Sleep(300 * time.Millisecond)
		s2 := openInternal(t, "ghost-other")
		s2.prefix = s.prefix
		if rec2, err2 := s2.Acquire(ctx, "r", "owner-b", 2*time.Second); err2 == nil {
			t.Fatalf("owner-b granted token %d while owner-a's grant (token %d, just confirmed) is trusted", rec2.Token, rec.Token)
		}
		return
	}
	if !errors.Is(err, driver.ErrUnknownOutcome) {
		t.Fatalf("retry while the ghost's delete is in flight: %v; want an unknown outcome", err)
	}
}

// blockKA holds keep-alives until release closes.
type blockKA struct {
	clientv3.Lease
	release chan struct{}
}

func (l *blockKA) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	select {
	case <-l.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return l.Lease.KeepAliveOnce(ctx, id)
}

// TestReapedAcquireIsUnknown: an acquire whose put was applied waits for a
// keep-alive longer than the TTL, and the reaper deletes the key meanwhile:
// the call had visible effects, so it reports an unknown outcome, not a
// plain failure. Found by a review; fails on the old code.
func TestReapedAcquireIsUnknown(t *testing.T) {
	s := openInternal(t, "reap")
	fc := clock.NewFake()
	s.clock = fc
	ka := &blockKA{Lease: s.cli.Lease, release: make(chan struct{})}
	s.cli.Lease = ka
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Acquire(ctx, "a", "owner-a", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	fc.Advance(1500 * time.Millisecond) // the next acquire needs a keep-alive
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, "b", "owner-b", 2*time.Second)
		done <- err
	}()
	waitKey := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			r, err := s.cli.Get(ctx, s.key("b"))
			if err == nil && len(r.Kvs) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("key b: want %d kvs", want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitKey(1)                          // the put is applied; the keep-alive is held
	fc.Advance(2100 * time.Millisecond) // the keep-alive takes longer than the TTL
	waitKey(0)                          // the reaper took the grant
	close(ka.release)
	if err := <-done; !errors.Is(err, driver.ErrUnknownOutcome) {
		t.Fatalf("acquire whose applied put was reaped: %v; want an unknown outcome", err)
	}
}
