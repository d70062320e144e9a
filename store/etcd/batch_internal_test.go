package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
)

// A large batch (a listing instead of a read per key) answers every
// renewal: a grant that the listing marks suspect while the batch waits for
// the keep-alive is not left with a nil answer (renewed) that nobody wrote;
// here the keep-alive fails for every grant, and the grant whose key was
// deleted must not be reported renewed (adversarial review).
func TestLargeBatchAnswersAGrantMarkedSuspectMidBatch(t *testing.T) {
	s := openInternal(t, "batch-suspect")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fc := clock.NewFake()
	s.clock = fc

	const n = listAtLeast + 2
	const ttl = 10 * time.Second
	batch := make([]driver.Renewal, n)
	for i := range batch {
		name := fmt.Sprintf("r%03d", i)
		owner := fmt.Sprintf("owner-%03d", i)
		rec, err := s.Acquire(ctx, name, owner, ttl)
		if err != nil {
			t.Fatal(err)
		}
		batch[i] = driver.Renewal{Resource: name, Owner: owner, Token: rec.Token, TTL: ttl}
	}
	// An operator deletes one key by hand.
	const victim = 7
	if _, err := s.cli.KV.Delete(ctx, s.key(batch[victim].Resource)); err != nil {
		t.Fatal(err)
	}
	// 2 s on: the shared etcd lease (11 s, granted at 0) no longer covers a
	// renewal for 10 s, so the batch needs a keep-alive; a listing is due.
	fc.Advance(2 * time.Second)
	fake := &blockedLease{Lease: s.cli.Lease, release: make(chan struct{}), fail: true}
	s.cli.Lease = fake

	// Once the listing has marked the victim suspect, let the keep-alive
	// answer (with an error).
	go releaseWhenSuspect(ctx, s, s.key(batch[victim].Resource), fake.release)
	errs := s.RenewBatch(ctx, batch)

	failed := 0
	for i, err := range errs {
		if i != victim && err != nil {
			failed++
		}
	}
	t.Logf("%d of %d other renewals failed (the keep-alive failed)", failed, n-1)
	if errs[victim] == nil {
		t.Fatalf("the renewal of %q, whose key was deleted and whose keep-alive failed, is reported confirmed (nil error)", batch[victim].Resource)
	}
}

// Through a Locker: a lease whose key was deleted and taken by another
// owner is lost at the large batch's renewal, not trusted on (adversarial
// review: its deadline moved while the store named the other owner).
func TestLockerLosesATakenLeaseInALargeBatch(t *testing.T) {
	s := openInternal(t, "batch-locker")
	other, err := Open(context.Background(), Config{Client: clientv3.Config{Endpoints: s.cli.Endpoints()}, Prefix: s.prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fc := clock.NewFake()
	s.clock = fc
	t0 := fc.Now()
	lk, err := tenure.New(s, tenure.WithClock(fc))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close(context.Background())

	const n = listAtLeast + 2
	const ttl = 10 * time.Second
	leases := make([]*tenure.Lease, n)
	for i := range leases {
		l, err := lk.TryAcquire(ctx, fmt.Sprintf("r%03d", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	victim := leases[n-1]
	if _, err := s.cli.KV.Delete(ctx, s.key(victim.Resource())); err != nil {
		t.Fatal(err)
	}
	took, err := other.Acquire(ctx, victim.Resource(), "taker", ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%q taken by another owner, token %d (the Locker's token %d)", victim.Resource(), took.Token, victim.Token())
	// The batch's keep-alive answers once the batch's listing has found the
	// key changed: the order in which a slow keep-alive lets it be seen.
	fake := &blockedLease{Lease: s.cli.Lease, release: make(chan struct{})}
	s.cli.Lease = fake
	go releaseWhenSuspect(ctx, s, s.key(victim.Resource()), fake.release)
	before := victim.Deadline()
	fc.Advance(ttl / 3) // every lease due: one batch
	for victim.Err() == nil && victim.Deadline().Equal(before) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	if victim.Err() == nil {
		rec, _ := other.Get(ctx, victim.Resource())
		t.Fatalf("the Locker trusts %q (token %d, Err nil, deadline moved from %v to %v on the fake clock) while the store says %q holds it (token %d)",
			victim.Resource(), victim.Token(), before.Sub(t0), victim.Deadline().Sub(t0), rec.Owner, rec.Token)
	}
	t.Logf("lost as it should be: %v", victim.Err())
}

// releaseWhenSuspect closes release once a listing has marked the grant of
// key suspect (its key not as the Store left it), or when ctx ends.
func releaseWhenSuspect(ctx context.Context, s *Store, key string, release chan struct{}) {
	defer close(release)
	for ctx.Err() == nil {
		s.mu.Lock()
		g := s.grants[key]
		suspect := g != nil && g.suspect
		s.mu.Unlock()
		if suspect {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
