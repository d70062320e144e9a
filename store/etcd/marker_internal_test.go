package etcd

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

// delayKV holds back a Store's move Txns (a put conditioned on three or
// more compares; an acquire's create Txn has one): the caller is told that
// the request failed in transit (Unavailable: an unknown outcome), and the
// test delivers it later, as a slow network delivers a request after its
// sender gave up.
type delayKV struct {
	clientv3.KV
	mu   sync.Mutex
	hold bool
	held []func() (*clientv3.TxnResponse, error)
}

type delayTxn struct {
	clientv3.Txn
	k            *delayKV
	cmps         []clientv3.Cmp
	thens, elses []clientv3.Op
}

func (k *delayKV) Txn(ctx context.Context) clientv3.Txn {
	return &delayTxn{Txn: k.KV.Txn(ctx), k: k}
}

func (t *delayTxn) If(c ...clientv3.Cmp) clientv3.Txn { t.cmps = c; t.Txn = t.Txn.If(c...); return t }

func (t *delayTxn) Then(o ...clientv3.Op) clientv3.Txn {
	t.thens = o
	t.Txn = t.Txn.Then(o...)
	return t
}

func (t *delayTxn) Else(o ...clientv3.Op) clientv3.Txn {
	t.elses = o
	t.Txn = t.Txn.Else(o...)
	return t
}

func (t *delayTxn) Commit() (*clientv3.TxnResponse, error) {
	isPut := false
	for _, o := range t.thens {
		isPut = isPut || o.IsPut()
	}
	t.k.mu.Lock()
	hold := isPut && t.k.hold && len(t.cmps) >= 3
	if hold {
		kv, cmps, thens, elses := t.k.KV, t.cmps, t.thens, t.elses
		t.k.held = append(t.k.held, func() (*clientv3.TxnResponse, error) {
			return kv.Txn(context.Background()).If(cmps...).Then(thens...).Else(elses...).Commit()
		})
	}
	t.k.mu.Unlock()
	if hold {
		return nil, status.Error(codes.Unavailable, "injected: request delayed in the network")
	}
	return t.Txn.Commit()
}

// TestLateMarkerMoveAfterARenewalIsRefused: a semaphore's marker has one
// owner string for every holder on every host. Store A's renewal of it (the
// acquire keepMarker makes) moves the key onto A's etcd lease; its request
// is delayed, A gives up (unknown outcome), and the request arrives after
// holder B's next confirmed marker renewal. It must change nothing. B's
// renewal used to be a read that changed nothing (the key on B's own
// etcd lease), so the late move applied: the marker went onto A's etcd
// lease, which A's clean-up of its unknown write (or the lease's expiry,
// had A died) then deleted while B trusted its slot for up to 10 s more, and
// a holder of 1 slot was granted beside B's 2-slot holder (adversarial
// review, on a real server). Now every renewal by an acquire is a write, and
// a move applies only over the mod_revision it read.
func TestLateMarkerMoveAfterARenewalIsRefused(t *testing.T) {
	sB := openInternal(t, "marker-b")
	sA := openInternal(t, "marker-a")
	sA.prefix = sB.prefix
	dk := &delayKV{KV: sA.cli.KV}
	sA.cli.KV = dk
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const r = "backups"
	lkB, err := tenure.New(sB, tenure.WithOwnerID("holder-b"))
	if err != nil {
		t.Fatal(err)
	}
	defer lkB.Close(ctx)
	semB, _ := lkB.Semaphore(r, 2)
	t0 := time.Now()
	slB, err := semB.TryAcquire(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A, a 2-slot holder on another host, renews the marker; its request is
	// held back, and A gives up.
	dk.mu.Lock()
	dk.hold = true
	dk.mu.Unlock()
	actx, acancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = sA.Acquire(actx, naming.MarkerName(r), markerOwnerOf(2), naming.MarkerTTL)
	acancel()
	dk.mu.Lock()
	dk.hold = false
	held := dk.held
	dk.mu.Unlock()
	if !errors.Is(err, driver.ErrUnknownOutcome) || len(held) != 1 {
		t.Fatalf("A's marker renewal: %v with %d requests held; want an unknown outcome with its move held", err, len(held))
	}
	// B's holder renews the marker naming.MarkerTTL/3 after its grant; deliver A's
	// request once that renewal is confirmed.
	deadline := slB.Deadline()
	for !slB.Deadline().After(deadline.Add(5 * time.Second)) {
		if time.Since(t0) > 20*time.Second {
			t.Fatalf("B's marker renewal was not confirmed within 20 s (deadline %v)", slB.Deadline())
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := held[0]()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Fatalf("A's marker move, sent before B's confirmed renewal and delivered after it at +%v, was applied: the marker is now on A's etcd lease", time.Since(t0).Round(time.Millisecond))
	}
	if err := slB.Err(); err != nil {
		t.Fatalf("B's slot: %v", err)
	}
}

// markerOwnerOf is the owner string of the marker of a semaphore of n
// slots, as tenure's semaphore writes it.
func markerOwnerOf(n int) string {
	return "tenure semaphore of " + string(rune('0'+n)) + " slots"
}
