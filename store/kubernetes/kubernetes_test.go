package kubernetes_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/kubernetes"
	"github.com/tenure-go/tenure/store/storetest"
)

var conformance = storetest.Config{
	New: func(t *testing.T) driver.Store { return open(t) },
	// leaseDurationSeconds is whole seconds. A Store takes a lease over
	// once it has seen the Lease unchanged for that long, counted from the
	// answer that showed it (the grant's own answer, for the Store that
	// granted it): so a 1 s lease is free for that Store about 1 s after
	// the grant, and the tests poll every 20 ms.
	ShortTTL:    time.Second,
	ExpirySlack: time.Second,
	InvalidTTLs: []time.Duration{time.Nanosecond, 500 * time.Millisecond, 999 * time.Millisecond},
}

func TestConformance(t *testing.T) {
	storeURL(t)
	storetest.Run(t, conformance)
}

func ctxT(tb testing.TB) context.Context { return testserver.Ctx(tb) }

// owner returns an owner string as a Locker makes one: id, "#", and a
// random 64-bit nonce in hex.
func owner(tb testing.TB, id string) string {
	tb.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	return id + "#" + hex.EncodeToString(b[:])
}

// TestTakeOverCountsFromObservation: a Store takes a held Lease over only
// after it has itself seen the Lease unchanged for its duration, on its own
// clock: a holder's renewTime far in the past (a skewed clock) frees
// nothing, every write restarts the count, and the count is the Store's
// own (a fake clock here, which the test moves).
func TestTakeOverCountsFromObservation(t *testing.T) {
	ctx := ctxT(t)
	fake := clock.NewFakeAt(time.Now())
	holder := open(t)
	contender := open(t, func(c *kubernetes.Config) { c.Clock = fake })
	r := testserver.Resource(t)
	a, b := owner(t, "a"), owner(t, "b")
	rec, err := holder.Acquire(ctx, r, a, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The holder's clock says its last renewal was long ago.
	cs, _ := admin(t)
	leases := cs.CoordinationV1().Leases(testNamespace)
	obj, err := leases.Get(ctx, kubernetes.LeaseName(r), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := metav1.NewMicroTime(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	obj.Spec.RenewTime, obj.Spec.AcquireTime = &old, &old
	if _, err := leases.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var held *tenure.HeldError
	if _, err := contender.Acquire(ctx, r, b, 10*time.Second); !errors.As(err, &held) || held.Holder.Owner != a || held.Holder.Token != rec.Token {
		t.Fatalf("contender's first look at a lease renewed (by its holder's clock) in 2000: %v; want held by %s", err, a)
	}
	if held.Holder.Remaining != 10*time.Second {
		t.Errorf("first look: Remaining %v; want the whole duration, 10s", held.Holder.Remaining)
	}
	fake.Advance(9 * time.Second)
	if _, err := contender.Acquire(ctx, r, b, 10*time.Second); !errors.As(err, &held) || held.Holder.Remaining != time.Second {
		t.Fatalf("after 9 s of 10: %v; want held, 1s left", err)
	}
	// A renewal restarts the count.
	if err := holder.Renew(ctx, r, a, rec.Token, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	fake.Advance(2 * time.Second)
	if _, err := contender.Acquire(ctx, r, b, 10*time.Second); !errors.As(err, &held) || held.Holder.Remaining != 10*time.Second {
		t.Fatalf("2 s after the renewal, first seen now: %v; want held, 10s left", err)
	}
	fake.Advance(10 * time.Second)
	got, err := contender.Acquire(ctx, r, b, 10*time.Second)
	if err != nil {
		t.Fatalf("after seeing the renewal unchanged for 10 s: %v", err)
	}
	if got.Token <= rec.Token {
		t.Fatalf("take-over token %d, not above %d", got.Token, rec.Token)
	}
	if err := holder.Renew(ctx, r, a, rec.Token, 10*time.Second); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("the old holder's renewal after the take-over: %v; want ErrLeaseLost", err)
	} else if var2 := (*tenure.HeldError)(nil); !errors.As(err, &var2) || var2.Holder.Owner != b {
		t.Fatalf("the old holder's renewal: %v; want it to name %s", err, b)
	}
}

// TestTokensSurviveDeletion: a grant after the Lease was deleted (released
// or held) gets a token above every earlier one: the token is above the
// resourceVersion of a list made after the deletion.
func TestTokensSurviveDeletion(t *testing.T) {
	ctx := ctxT(t)
	s := open(t)
	cs, _ := admin(t)
	leases := cs.CoordinationV1().Leases(testNamespace)
	r := testserver.Resource(t)
	var last uint64
	for i := range 4 {
		o := owner(t, "a")
		rec, err := s.Acquire(ctx, r, o, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Token <= last {
			t.Fatalf("grant %d: token %d after %d", i, rec.Token, last)
		}
		last = rec.Token
		if i%2 == 0 {
			if err := s.Release(ctx, r, o, rec.Token); err != nil {
				t.Fatal(err)
			}
		}
		// An operator deletes the Lease (held, every other time).
		if err := leases.Delete(ctx, kubernetes.LeaseName(r), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if err := s.Renew(ctx, r, o, rec.Token, time.Minute); !errors.Is(err, tenure.ErrLeaseLost) {
				t.Fatalf("renewal of a deleted Lease: %v; want ErrLeaseLost", err)
			}
		}
	}
}

// TestClientGoFields: what tenure writes is what client-go's leader
// election reads: the holder, a duration in whole seconds (rounded up),
// acquire and renew times, and a transition count that grows with each new
// holder; a release clears the holder.
func TestClientGoFields(t *testing.T) {
	ctx := ctxT(t)
	s := open(t)
	cs, _ := admin(t)
	leases := cs.CoordinationV1().Leases(testNamespace)
	r := "tenure-fields-" + randSuffix()
	a, b := owner(t, "a"), owner(t, "b")
	get := func() *coordinationv1.Lease {
		obj, err := leases.Get(ctx, r, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	rec, err := s.Acquire(ctx, r, a, 2500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	obj := get()
	if obj.Name != r || *obj.Spec.HolderIdentity != a || *obj.Spec.LeaseDurationSeconds != 3 || *obj.Spec.LeaseTransitions != 0 ||
		obj.Spec.AcquireTime == nil || obj.Spec.RenewTime == nil {
		t.Fatalf("after the grant: %+v", obj.Spec)
	}
	if err := s.Release(ctx, r, a, rec.Token); err != nil {
		t.Fatal(err)
	}
	if obj = get(); *obj.Spec.HolderIdentity != "" || *obj.Spec.LeaseTransitions != 0 {
		t.Fatalf("after the release: %+v", obj.Spec)
	}
	if _, err := s.Acquire(ctx, r, b, 4*time.Second); err != nil {
		t.Fatal(err)
	}
	if obj = get(); *obj.Spec.HolderIdentity != b || *obj.Spec.LeaseTransitions != 1 || *obj.Spec.LeaseDurationSeconds != 4 {
		t.Fatalf("after the second grant: %+v", obj.Spec)
	}
}

// randSuffix returns 8 random lower-case hex digits, for Lease names that
// are valid object names.
func randSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
