// Package storetest is the conformance suite that every driver.Store must
// pass, on its real server, as testing/fstest.TestFS is for file systems. A
// store's test calls Run once:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Config{New: func(t *testing.T) driver.Store { ... }})
//	}
//
// Run runs, as subtests, the store operations of the lease contract (grant,
// held by another owner with the holder's details, acquire by the same
// owner, renew, release, expiry, stale owners and tokens, fencing tokens
// that strictly increase across release and expiry, bad input rejected
// before any write, many goroutines contending with at most one holder at a
// time, Get and List; semaphores and shared/exclusive locks, which are
// built on those operations) and every failure scenario of the field
// (docs/cases.md) that applies, each named after its id:
//
//	go test -run 'TestConformance/C03_SubSecondTTL' ./store/sqlite/
//
// The scenarios drive a tenure.Locker against the store, with faults
// injected between the two by Faulty. A store opts out of a scenario that
// does not apply through Config (NoFencing, Skip), never by leaving it out,
// so a new scenario reaches every store.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/testserver"
)

// Config describes the store under test.
type Config struct {
	// New returns the store for one test. It registers its own clean-up
	// (t.Cleanup). Stores may be shared between tests: every test uses
	// resource names under a prefix of its own.
	New func(t *testing.T) driver.Store

	// ShortTTL is the TTL of leases that the tests let expire. It must be one
	// the store accepts. Default 300 ms.
	ShortTTL time.Duration

	// ExpirySlack is how long after ShortTTL the store may still report an
	// expired lease as live (for example Cassandra's whole-second TTL clock).
	// Default 250 ms.
	ExpirySlack time.Duration

	// Advance, when set, moves the store's clock forward instead of the tests
	// waiting in real time (stores with an injectable clock).
	Advance func(d time.Duration)

	// NoFencing says that the store mode keeps no fencing token: Record.Token
	// is always zero.
	NoFencing bool

	// InvalidTTLs are positive TTLs the store must reject with
	// tenure.ErrInvalidTTL (for example 500 ms on Cassandra).
	InvalidTTLs []time.Duration

	// Fresh, when set, returns a store that only the calling test uses, which
	// it may close: for stores whose New shares one store between tests. When
	// nil, New's store must be the test's own (it is closed by the test).
	Fresh func(t *testing.T) driver.Store

	// Reopen, when set, returns another handle on the store that s is on,
	// as another process would open it (a new connection to the same
	// server and table or keyspace, the same SQLite file), which the test
	// may close. The hold test keeps a lease through it and closes it, as
	// a program that ends after Lease.ReleaseAfter does, and reads through
	// s; when Reopen is nil, it does all through s.
	Reopen func(t *testing.T, s driver.Store) driver.Store

	// HoldResolution is how much later than asked a hold
	// (driver.Keeper, Lease.ReleaseAfter) may end on this store: its TTL
	// resolution and the time its expiry takes to apply. Default 50 ms.
	HoldResolution time.Duration

	// Contenders and Rounds size the contention test (defaults 8 and 20).
	Contenders, Rounds int

	// SharedOwnerUnknown, when set, says why the store may answer
	// handles that write one lease at once under one owner string with
	// tenure.ErrUnknownOutcome (a Cassandra cluster, whose Paxos rounds
	// time out under such contention): SharedOwnerAtOnce then accepts
	// those answers, and still refuses a held answer or a fresh token.
	SharedOwnerUnknown string

	// Skip names the tests that do not apply to this store, by name
	// ("Contention") or case id ("C02"), each with the reason, which the
	// skipped subtest reports. The field cases are skipped anyway when
	// Advance is set (they need the store's clock to run in real time), and
	// C07 when NoFencing is.
	Skip map[string]string
}

func (c Config) withDefaults() Config {
	if c.ShortTTL == 0 {
		c.ShortTTL = 300 * time.Millisecond
	}
	if c.ExpirySlack == 0 {
		c.ExpirySlack = 250 * time.Millisecond
	}
	if c.HoldResolution == 0 {
		c.HoldResolution = 50 * time.Millisecond
	}
	if c.Contenders == 0 {
		c.Contenders = 8
	}
	if c.Rounds == 0 {
		c.Rounds = 20
	}
	return c
}

// longTTL never expires during a test.
const longTTL = 60 * time.Second

// Run runs the conformance tests and the field cases as subtests of t:
// "Grant", ..., "GetAndList", then "C01_CleanShutdown", ...,
// "C10_SameOwnerID".
func Run(t *testing.T, cfg Config) {
	cfg = cfg.withDefaults()
	for k := range cfg.Skip {
		if !slices.ContainsFunc(tests, func(tc test) bool { return tc.name == k || tc.id == k }) {
			t.Fatalf("storetest: Config.Skip names %q, which is neither a test nor a case id", k)
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if why := cfg.skip(tc); why != "" {
				t.Skip(why)
			}
			tc.f(t, cfg)
		})
	}
}

// test is one conformance test or field case.
type test struct {
	name string // subtest name
	id   string // field case id, "" for the conformance tests
	f    func(*testing.T, Config)
	// fencing says that the case needs fencing tokens.
	fencing bool
}

var tests = []test{
	{name: "ReopenIsTheSameStore", f: testReopenIsTheSameStore},
	{name: "Grant", f: testGrant},
	{name: "HeldByOther", f: testHeldByOther},
	{name: "SameOwnerAcquire", f: testSameOwnerAcquire},
	{name: "SharedOwnerAtOnce", f: testSharedOwnerAtOnce},
	{name: "Renew", f: testRenew},
	{name: "Release", f: testRelease},
	{name: "ReleaseTwice", f: testReleaseTwice},
	{name: "CancelledCallNotLost", f: testCancelledCallNotLost},
	{name: "ExpiryFreesResource", f: testExpiry},
	{name: "StaleOwnerOrToken", f: testStale},
	{name: "RenewNeverRevives", f: testRenewNeverRevives},
	{name: "KeepOutlivesLateRenewal", f: testKeep},
	{name: "HoldEndsWhenAsked", f: testHoldEndsWhenAsked},
	{name: "TokensIncrease", f: testTokensIncrease},
	{name: "BadInputRejectedBeforeWrite", f: testBadInput},
	{name: "Contention", f: testContention},
	{name: "GetAndList", f: testGetList},
	{name: "ClosedStoreUnusable", f: testClosedStoreUnusable},
	{name: "NotificationWakesWaiter", f: testNotificationWakesWaiter},
	{name: "HandOverWakesOneWaiter", f: testHandOverWakesOneWaiter},
	{name: "ReservedForWaiter", f: testReservation},
	{name: "WakeUpPassedOn", f: testWakeUpPassedOn},
	{name: "SemaphoreWakesAsManyAsFreed", f: testSemaphoreWakesAsManyAsFreed},
	{name: "SemaphoreAtMostN", f: testSemaphoreAtMostN},
	{name: "SemaphoreFullAndHolders", f: testSemaphoreFullAndHolders},
	{name: "SemaphoreSlotsMismatch", f: testSemaphoreSlotsMismatch},
	{name: "SemaphoreSlotTrustedAtAnyTTL", f: testSemaphoreSlotTrustedAtAnyTTL},
	{name: "SemaphoreKeptSlotsKeepTheCount", f: testSemaphoreKeptSlotsKeepTheCount},
	{name: "SemaphoreClosedLockerWritesNothing", f: testSemaphoreClosedLockerWritesNothing},
	{name: "RWSharedTogether", f: testRWSharedTogether},
	{name: "RWNeverSharedBesideExclusive", f: testRWNeverSharedBesideExclusive},
	{name: "RWExclusiveWaiterNotStarved", f: testRWExclusiveWaiterNotStarved},
	{name: "RWLastSharedReleaseWakesExclusive", f: testRWLastSharedReleaseWakesExclusive},
	{name: "RWKilledSharedHolderFreedByTTL", f: testRWKilledSharedHolderFreedByTTL},
	{name: "RWClosedLockerWritesNothing", f: testRWClosedLockerWritesNothing},
	{name: "C01_CleanShutdown", id: "C01", f: caseC01CleanShutdown},
	{name: "C02_UnknownOutcome", id: "C02", f: caseC02UnknownOutcome},
	{name: "C03_SubSecondTTL", id: "C03", f: caseC03SubSecondTTL},
	{name: "C04_RenewalsFail", id: "C04", f: caseC04RenewalsFail},
	{name: "C05_BlackHole", id: "C05", f: caseC05BlackHole},
	{name: "C06c_PauseBeforeWrite", id: "C06c", f: caseC06cPauseBeforeWrite},
	{name: "C07_PartitionedHolderFencing", id: "C07", f: caseC07PartitionedHolderFencing, fencing: true},
	{name: "C08_LateRenewal", id: "C08", f: caseC08LateRenewal},
	{name: "C10_SameOwnerID", id: "C10", f: caseC10SameOwnerID},
}

// skip returns why tc does not apply to the store, or "".
func (c Config) skip(tc test) string {
	if why, ok := c.Skip[tc.name]; ok {
		return why
	}
	if why, ok := c.Skip[tc.id]; ok && tc.id != "" {
		return why
	}
	switch {
	case tc.id != "" && c.Advance != nil:
		return "the field cases need the store's clock to run in real time (Config.Advance is set)"
	case tc.fencing && c.NoFencing:
		return "this store mode keeps no fencing token (Config.NoFencing)"
	}
	return ""
}

// env is one test's store and resource prefix.
type env struct {
	t      *testing.T
	cfg    Config
	store  driver.Store
	prefix string
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	cfg = cfg.withDefaults()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	if len(name) > 120 {
		name = name[len(name)-120:]
	}
	return &env{t: t, cfg: cfg, store: cfg.New(t), prefix: "storetest/" + name + "/" + hex.EncodeToString(b[:]) + "/"}
}

func (e *env) res(name string) string { return e.prefix + name }

func (e *env) owner(id string) string {
	e.t.Helper()
	o, err := naming.NewOwner(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return o
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// acquire acquires through the store, resolving unknown outcomes by
// retrying as the same owner (safe by the contract). It fails the test on
// any other error than *HeldError, which it returns.
func (e *env) acquire(ctx context.Context, resource, owner string, ttl time.Duration) (tenure.Record, error) {
	e.t.Helper()
	for i := 0; ; i++ {
		rec, err := e.store.Acquire(ctx, resource, owner, ttl)
		if err == nil || errors.Is(err, tenure.ErrHeld) {
			return rec, err
		}
		if !errors.Is(err, tenure.ErrUnknownOutcome) || i >= 20 {
			e.t.Fatalf("Acquire(%q, %q): %v", resource, owner, err)
		}
	}
}

func (e *env) mustAcquire(ctx context.Context, resource, owner string, ttl time.Duration) tenure.Record {
	e.t.Helper()
	rec, err := e.acquire(ctx, resource, owner, ttl)
	if err != nil {
		e.t.Fatalf("Acquire(%q, %q): %v", resource, owner, err)
	}
	if rec.Resource != resource || rec.Owner != owner {
		e.t.Fatalf("Acquire(%q, %q) returned record %+v", resource, owner, rec)
	}
	if e.cfg.NoFencing {
		if rec.Token != 0 {
			e.t.Fatalf("store without fencing returned token %d", rec.Token)
		}
	} else if rec.Token == 0 {
		e.t.Fatalf("Acquire(%q) returned token 0", resource)
	}
	return rec
}

func (e *env) mustHeldBy(ctx context.Context, resource, owner string, token uint64) tenure.Record {
	e.t.Helper()
	rec, err := e.store.Get(ctx, resource)
	if err != nil {
		e.t.Fatalf("Get(%q): %v; want held by %s", resource, err, owner)
	}
	if rec.Owner != owner || rec.Token != token {
		e.t.Fatalf("Get(%q) = owner %q token %d; want %q token %d", resource, rec.Owner, rec.Token, owner, token)
	}
	return rec
}

// mustHeldByLocker checks that a grant of lk holds resource with token.
func (e *env) mustHeldByLocker(ctx context.Context, resource string, lk *tenure.Locker, token uint64) tenure.Record {
	e.t.Helper()
	rec, err := e.store.Get(ctx, resource)
	if err != nil {
		e.t.Fatalf("Get(%q): %v; want held by a grant of %s", resource, err, lk.Owner())
	}
	if !lk.Owns(rec.Owner) || rec.Token != token {
		e.t.Fatalf("Get(%q) = owner %q token %d; want a grant of %q, token %d", resource, rec.Owner, rec.Token, lk.Owner(), token)
	}
	return rec
}

func (e *env) mustFree(ctx context.Context, resource string) {
	e.t.Helper()
	rec, err := e.store.Get(ctx, resource)
	if !errors.Is(err, tenure.ErrNotHeld) {
		e.t.Fatalf("Get(%q) = %+v, %v; want ErrNotHeld", resource, rec, err)
	}
}

// waitExpiry lets ttl pass on the store's clock: Advance when the store
// takes a clock, otherwise real time until the lease is gone.
func (e *env) waitExpiry(ctx context.Context, resource string, ttl time.Duration) {
	e.t.Helper()
	if e.cfg.Advance != nil {
		e.cfg.Advance(ttl + time.Millisecond)
		e.mustFree(ctx, resource)
		return
	}
	limit := time.Now().Add(ttl + e.cfg.ExpirySlack + 5*time.Second)
	for {
		_, err := e.store.Get(ctx, resource)
		if errors.Is(err, tenure.ErrNotHeld) {
			return
		}
		if err != nil {
			e.t.Fatalf("Get(%q): %v", resource, err)
		}
		if time.Now().After(limit) {
			e.t.Fatalf("lease on %q (TTL %v) still live after %v", resource, ttl, ttl+e.cfg.ExpirySlack+5*time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testGrant(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	a := e.owner("a")
	rec := e.mustAcquire(ctx, e.res("r"), a, longTTL)
	got := e.mustHeldBy(ctx, e.res("r"), a, rec.Token)
	if got.Remaining < 0 || got.Remaining > longTTL+time.Second {
		t.Fatalf("Get: Remaining %v outside [0, %v]", got.Remaining, longTTL)
	}
}

func testHeldByOther(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	a, b := e.owner("a"), e.owner("b")
	rec := e.mustAcquire(ctx, e.res("r"), a, longTTL)
	_, err := e.acquire(ctx, e.res("r"), b, longTTL)
	if !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("second owner's Acquire: %v; want ErrHeld", err)
	}
	var held *tenure.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("error %v is not a *HeldError", err)
	}
	if held.Holder.Owner != a || held.Holder.Token != rec.Token || held.Holder.Resource != e.res("r") {
		t.Fatalf("HeldError names %+v; want owner %q token %d", held.Holder, a, rec.Token)
	}
	if held.Holder.Remaining < 0 || held.Holder.Remaining > longTTL+time.Second {
		t.Fatalf("HeldError Remaining %v outside [0, %v]", held.Holder.Remaining, longTTL)
	}
	e.mustHeldBy(ctx, e.res("r"), a, rec.Token)
}

func testSameOwnerAcquire(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	a := e.owner("a")
	first := e.mustAcquire(ctx, e.res("r"), a, e.cfg.ShortTTL)
	if e.cfg.Advance != nil {
		e.cfg.Advance(e.cfg.ShortTTL / 2)
	}
	second := e.mustAcquire(ctx, e.res("r"), a, longTTL)
	if second.Token != first.Token {
		t.Fatalf("same owner re-acquire: token %d, want the same lease's %d", second.Token, first.Token)
	}
	// The re-acquire renewed the lease with the new TTL: it outlives ShortTTL.
	if e.cfg.Advance != nil {
		e.cfg.Advance(e.cfg.ShortTTL)
	} else {
		time.Sleep(e.cfg.ShortTTL + e.cfg.ExpirySlack)
	}
	e.mustHeldBy(ctx, e.res("r"), a, first.Token)
}

// testSharedOwnerAtOnce: handles (one per process, with Config.Reopen)
// that acquire one resource under an owner string they share, all at once
// and again and again (every holder of a semaphore renews its marker so),
// are each answered with the one lease: never held by its own owner, never
// a fresh token, never an unknown outcome for writes that merely met each
// other.
func testSharedOwnerAtOnce(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	const rounds = 5
	n := e.cfg.Contenders
	handles := make([]driver.Store, n)
	for i := range handles {
		handles[i] = e.store
		if e.cfg.Reopen != nil && i > 0 {
			handles[i] = e.cfg.Reopen(t, e.store)
		}
	}
	r, shared := e.res("r"), "storetest shared owner"
	first := e.mustAcquire(ctx, r, shared, longTTL)
	for round := range rounds {
		var wg sync.WaitGroup
		recs, errs := make([]driver.Record, n), make([]error, n)
		start := make(chan struct{})
		for i, h := range handles {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				recs[i], errs[i] = h.Acquire(ctx, r, shared, longTTL)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			switch {
			case err != nil && errors.Is(err, tenure.ErrUnknownOutcome) && e.cfg.SharedOwnerUnknown != "":
				t.Logf("round %d, handle %d (%s): %v", round, i, e.cfg.SharedOwnerUnknown, err)
			case err != nil:
				t.Errorf("round %d, handle %d: %v", round, i, err)
			case recs[i].Token != first.Token:
				t.Errorf("round %d, handle %d: token %d; want the lease's %d", round, i, recs[i].Token, first.Token)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	e.mustHeldBy(ctx, r, shared, first.Token)
}

func testRenew(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	a := e.owner("a")
	rec := e.mustAcquire(ctx, e.res("r"), a, e.cfg.ShortTTL)
	if err := e.store.Renew(ctx, e.res("r"), a, rec.Token, longTTL); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if e.cfg.Advance != nil {
		e.cfg.Advance(e.cfg.ShortTTL)
	} else {
		time.Sleep(e.cfg.ShortTTL + e.cfg.ExpirySlack)
	}
	got := e.mustHeldBy(ctx, e.res("r"), a, rec.Token)
	if got.Remaining != 0 && got.Remaining <= e.cfg.ShortTTL {
		t.Fatalf("after Renew(%v), Remaining %v", longTTL, got.Remaining)
	}
}

func testRelease(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	a, b := e.owner("a"), e.owner("b")
	rec := e.mustAcquire(ctx, e.res("r"), a, longTTL)
	if err := e.store.Release(ctx, e.res("r"), a, rec.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	e.mustFree(ctx, e.res("r"))
	next := e.mustAcquire(ctx, e.res("r"), b, longTTL)
	if !e.cfg.NoFencing && next.Token <= rec.Token {
		t.Fatalf("token after release %d, want > %d", next.Token, rec.Token)
	}
}

func testReleaseTwice(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	a := e.owner("a")
	rec := e.mustAcquire(ctx, e.res("r"), a, longTTL)
	if err := e.store.Release(ctx, e.res("r"), a, rec.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := e.store.Release(ctx, e.res("r"), a, rec.Token); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("second Release: %v; want ErrLeaseLost", err)
	}
	if err := e.store.Renew(ctx, e.res("r"), a, rec.Token, longTTL); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("Renew after Release: %v; want ErrLeaseLost", err)
	}
	e.mustFree(ctx, e.res("r"))
}

// testCancelledCallNotLost: a call on a live lease whose context was
// cancelled with a cause that wraps ErrLeaseLost (a Locker cancels its
// renewals so when the lease is released or lost) either succeeds or fails
// without wrapping ErrLeaseLost: only the store's answer may say that a
// lease is lost, and the lease stays held. Seen on etcd: a renewal cut short
// by a release returned the cause, which read as "lost".
func testCancelledCallNotLost(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	a := e.owner("a")
	rec := e.mustAcquire(ctx, e.res("r"), a, longTTL)
	cause := fmt.Errorf("%w: released by its holder (test)", tenure.ErrLeaseLost)
	cctx, cancel := context.WithCancelCause(ctx)
	cancel(cause)
	if err := e.store.Renew(cctx, e.res("r"), a, rec.Token, longTTL); errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("Renew on a cancelled context: %v; an error that wraps ErrLeaseLost says the store answered so", err)
	}
	if err := e.store.Release(cctx, e.res("r"), a, rec.Token); errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("Release on a cancelled context: %v; an error that wraps ErrLeaseLost says the store answered so", err)
	}
	if _, err := e.store.Acquire(cctx, e.res("other"), a, longTTL); errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("Acquire on a cancelled context: %v", err)
	}
	// Whatever the cancelled Release did, the lease was live: held, or
	// freed by that Release.
	got, err := e.store.Get(ctx, e.res("r"))
	switch {
	case err == nil && (got.Owner != a || got.Token != rec.Token):
		t.Fatalf("after the cancelled calls: held by %q token %d; want %q token %d or free", got.Owner, got.Token, a, rec.Token)
	case err != nil && !errors.Is(err, tenure.ErrNotHeld):
		t.Fatalf("Get: %v", err)
	}
}

func testExpiry(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	a, b := e.owner("a"), e.owner("b")
	tSend := time.Now()
	rec := e.mustAcquire(ctx, e.res("r"), a, e.cfg.ShortTTL)
	e.waitExpiry(ctx, e.res("r"), e.cfg.ShortTTL)
	next := e.mustAcquire(ctx, e.res("r"), b, longTTL)
	if e.cfg.Advance == nil {
		// Mutual exclusion on one reference clock: the store kept A's lease
		// at least TTL after A sent its request (so at least TTL·(1−ρ), the
		// time A trusts it).
		if held := time.Since(tSend); held < time.Duration(float64(e.cfg.ShortTTL)*(1-tenure.DefaultDriftBound)) {
			t.Fatalf("B was granted %v after A sent its acquire with TTL %v", held, e.cfg.ShortTTL)
		}
	}
	if !e.cfg.NoFencing && next.Token <= rec.Token {
		t.Fatalf("token after expiry %d, want > %d", next.Token, rec.Token)
	}
	if err := e.store.Renew(ctx, e.res("r"), a, rec.Token, longTTL); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("expired holder's Renew: %v; want ErrLeaseLost", err)
	}
	e.mustHeldBy(ctx, e.res("r"), b, next.Token)
}

func testStale(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	a, b := e.owner("a"), e.owner("b")
	rec := e.mustAcquire(ctx, e.res("r"), a, longTTL)
	if err := e.store.Renew(ctx, e.res("r"), b, rec.Token, longTTL); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Errorf("Renew by another owner: %v; want ErrLeaseLost", err)
	}
	if err := e.store.Release(ctx, e.res("r"), b, rec.Token); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Errorf("Release by another owner: %v; want ErrLeaseLost", err)
	}
	if !e.cfg.NoFencing {
		if err := e.store.Renew(ctx, e.res("r"), a, rec.Token+1, longTTL); !errors.Is(err, tenure.ErrLeaseLost) {
			t.Errorf("Renew with a wrong token: %v; want ErrLeaseLost", err)
		}
		if err := e.store.Release(ctx, e.res("r"), a, rec.Token-1); !errors.Is(err, tenure.ErrLeaseLost) {
			t.Errorf("Release with an old token: %v; want ErrLeaseLost", err)
		}
	}
	// Owner ids are compared whole: the readable id alone proves nothing.
	if err := e.store.Release(ctx, e.res("r"), tenure.OwnerID(a), rec.Token); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Errorf("Release by the readable id without nonce: %v; want ErrLeaseLost", err)
	}
	e.mustHeldBy(ctx, e.res("r"), a, rec.Token)
	if err := e.store.Renew(ctx, e.res("never-held"), a, rec.Token, longTTL); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Errorf("Renew of a never-held resource: %v; want ErrLeaseLost", err)
	}
	e.mustFree(ctx, e.res("never-held"))
}

// testKeep: driver.Keeper (Lease.ReleaseAfter) hands the live lease of a
// grant to another owner string with the same token and the hold's TTL; a
// renewal or release of the grant that arrives afterwards (a request
// delivered late) is ErrLeaseLost and changes nothing, so the hold is never
// cut back to the grant's TTL; another owner is refused meanwhile. Keep of
// a grant that does not hold the resource, and bad input, change nothing.
func testKeep(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	k, ok := e.store.(driver.Keeper)
	if !ok {
		t.Skip("the store does not implement driver.Keeper: Lease.ReleaseAfter renews instead")
	}
	a, b := e.owner("a"), e.owner("b")
	r := e.res("r")
	rec := e.mustAcquire(ctx, r, a, e.cfg.ShortTTL)
	kept := naming.KeptOwner(a)
	hold := 4 * longTTL / 3
	// Bad input changes nothing.
	for _, bad := range []struct {
		name, keeper string
		ttl          time.Duration
	}{{"empty keeper", "", hold}, {"the grant's own owner string", a, hold}, {"keeper with NUL", "x\x00", hold}, {"TTL 0", kept, 0}} {
		if err := k.Keep(ctx, r, a, rec.Token, bad.keeper, bad.ttl); err == nil {
			t.Errorf("Keep with %s: no error", bad.name)
		}
	}
	e.mustHeldBy(ctx, r, a, rec.Token)
	if err := k.Keep(ctx, r, b, rec.Token, naming.KeptOwner(b), hold); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Errorf("Keep by another owner: %v; want ErrLeaseLost", err)
	}
	if err := k.Keep(ctx, e.res("never-held"), a, rec.Token, kept, hold); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Errorf("Keep of a never-held resource: %v; want ErrLeaseLost", err)
	}
	e.mustFree(ctx, e.res("never-held"))
	if err := k.Keep(ctx, r, a, rec.Token, kept, hold); err != nil {
		t.Fatalf("Keep: %v", err)
	}
	got := e.mustHeldBy(ctx, r, kept, rec.Token)
	if got.Remaining != 0 && got.Remaining <= e.cfg.ShortTTL+e.cfg.ExpirySlack {
		t.Errorf("kept lease: Remaining %v; want about %v", got.Remaining, hold)
	}
	// The grant's renewal, delivered late, and its release.
	if err := e.store.Renew(ctx, r, a, rec.Token, e.cfg.ShortTTL); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Errorf("the grant's renewal after Keep: %v; want ErrLeaseLost", err)
	}
	if err := e.store.Release(ctx, r, a, rec.Token); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Errorf("the grant's release after Keep: %v; want ErrLeaseLost", err)
	}
	if err := k.Keep(ctx, r, a, rec.Token, kept+"2", hold); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Errorf("Keep again after Keep: %v; want ErrLeaseLost", err)
	}
	got = e.mustHeldBy(ctx, r, kept, rec.Token)
	if got.Remaining != 0 && got.Remaining <= e.cfg.ShortTTL+e.cfg.ExpirySlack {
		t.Errorf("kept lease after the late renewal: Remaining %v; want about %v", got.Remaining, hold)
	}
	var held *tenure.HeldError
	if _, err := e.store.Acquire(ctx, r, b, longTTL); !errors.As(err, &held) || held.Holder.Owner != kept {
		t.Errorf("Acquire by another owner while kept: %v; want held by %q", err, kept)
	}
	if e.cfg.Advance == nil {
		// After the grant's TTL, the hold still holds.
		time.Sleep(e.cfg.ShortTTL + e.cfg.ExpirySlack)
		e.mustHeldBy(ctx, r, kept, rec.Token)
	}
}

// testReopenIsTheSameStore: Config.Reopen opens another handle on the
// store that New opened, not another store: a lease acquired through one
// is seen through the other. (A Reopen that reaches another server makes
// the tests that use it pass or fail for the wrong reason.)
func testReopenIsTheSameStore(t *testing.T, cfg Config) {
	if cfg.Reopen == nil || cfg.Advance != nil {
		t.Skip("no Config.Reopen")
	}
	e, ctx := newEnv(t, cfg), ctxT(t)
	other := cfg.Reopen(t, e.store)
	defer other.Close()
	r := e.res("r")
	rec, err := e.store.Acquire(ctx, r, e.owner("a"), longTTL)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	got, err := other.Get(ctx, r)
	if err != nil || got.Owner != rec.Owner || got.Token != rec.Token {
		t.Fatalf("through Reopen's handle: %+v, %v; want the lease acquired through New's (%+v): Reopen must open the same store", got, err, rec)
	}
}

// testHoldEndsWhenAsked: a hold (driver.Keeper, as Lease.ReleaseAfter and
// the CLI's --hold-at-least make it) keeps the resource from everyone else
// for the time asked and ends then, within the store's resolution
// (Config.HoldResolution), also when the program that made it has ended
// (its store is closed): no margin of the store lengthens it. An acquire
// answered before the time asked had passed since Keep was called finds the
// resource held; one sent once the time asked and the resolution have
// passed since Keep returned is granted. Neither depends on how fast the
// test runs.
func testHoldEndsWhenAsked(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	if _, ok := e.store.(driver.Keeper); !ok {
		t.Skip("the store does not implement driver.Keeper: Lease.ReleaseAfter renews instead")
	}
	const hold = 3 * time.Second
	a, b := e.owner("a"), e.owner("b")
	r := e.res("r")
	// The hold is made through a handle of its own, closed once it kept
	// the lease; the test's store reads.
	keeping, reading := e.store, e.store
	if e.cfg.Reopen != nil && e.cfg.Advance == nil {
		keeping = e.cfg.Reopen(t, e.store)
	}
	rec, err := keeping.Acquire(ctx, r, a, longTTL)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	kept := naming.KeptOwner(a)
	begin := time.Now()
	if err := keeping.(driver.Keeper).Keep(ctx, r, a, rec.Token, kept, hold); err != nil {
		t.Fatalf("Keep: %v", err)
	}
	returned := time.Now()
	if reading != keeping {
		if err := keeping.Close(); err != nil {
			t.Fatalf("closing the store that kept the lease: %v", err)
		}
	}
	if e.cfg.Advance != nil {
		e.cfg.Advance(hold - time.Millisecond)
		e.mustHeldBy(ctx, r, kept, rec.Token)
		e.cfg.Advance(e.cfg.HoldResolution + time.Millisecond)
		if _, err := reading.Acquire(ctx, r, b, longTTL); err != nil {
			t.Fatalf("Acquire after the hold: %v", err)
		}
		return
	}
	// Just before the hold ends: held, if the answer came in time to tell.
	time.Sleep(time.Until(begin.Add(hold - 300*time.Millisecond)))
	var held *tenure.HeldError
	_, err = reading.Acquire(ctx, r, b, longTTL)
	switch answered := time.Now(); {
	case !answered.Before(begin.Add(hold)):
		t.Logf("the acquire just before the hold's end was answered too late to tell (%v after Keep was called)", answered.Sub(begin))
		if err == nil {
			t.Skip("the acquire just before the hold's end was answered late and granted; nothing to check")
		}
	case err == nil:
		t.Fatalf("another owner was granted the resource %v after Keep(%v) was called", answered.Sub(begin), hold)
	case !errors.As(err, &held) || held.Holder.Owner != kept:
		t.Fatalf("Acquire during the hold: %v; want held by %q", err, kept)
	}
	// Once the hold and the store's resolution have passed: granted.
	end := returned.Add(hold + e.cfg.HoldResolution + hold/100)
	time.Sleep(time.Until(end))
	if _, err := reading.Acquire(ctx, r, b, longTTL); err != nil {
		rec, gerr := reading.Get(ctx, r)
		t.Fatalf("Acquire sent %v after Keep(%v) returned: %v (Get: %+v, %v); the hold outlived its time by more than the store's resolution (%v)",
			time.Since(returned).Round(time.Millisecond), hold, err, rec, gerr, e.cfg.HoldResolution)
	}
}

// testRenewNeverRevives is case C08 at the store level: a renewal that
// arrives after the lease expired, or after another owner took and freed
// it, is ErrLeaseLost and creates nothing.
func testRenewNeverRevives(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	a, b := e.owner("a"), e.owner("b")
	rec := e.mustAcquire(ctx, e.res("r"), a, e.cfg.ShortTTL)
	e.waitExpiry(ctx, e.res("r"), e.cfg.ShortTTL)
	if err := e.store.Renew(ctx, e.res("r"), a, rec.Token, longTTL); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("Renew after expiry: %v; want ErrLeaseLost", err)
	}
	e.mustFree(ctx, e.res("r"))

	rec = e.mustAcquire(ctx, e.res("r2"), a, e.cfg.ShortTTL)
	e.waitExpiry(ctx, e.res("r2"), e.cfg.ShortTTL)
	brec := e.mustAcquire(ctx, e.res("r2"), b, longTTL)
	if err := e.store.Release(ctx, e.res("r2"), b, brec.Token); err != nil {
		t.Fatalf("B's Release: %v", err)
	}
	if err := e.store.Renew(ctx, e.res("r2"), a, rec.Token, longTTL); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("late Renew after another owner took and freed the lease: %v; want ErrLeaseLost", err)
	}
	if err := e.store.Release(ctx, e.res("r2"), a, rec.Token); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("late Release: %v; want ErrLeaseLost", err)
	}
	e.mustFree(ctx, e.res("r2"))
}

func testTokensIncrease(t *testing.T, cfg Config) {
	if cfg.NoFencing {
		t.Skip("this store mode keeps no fencing token")
	}
	e, ctx := newEnv(t, cfg), ctxT(t)
	owners := []string{e.owner("a"), e.owner("b"), e.owner("c")}
	var last uint64
	check := func(rec tenure.Record, how string) {
		t.Helper()
		if rec.Token <= last {
			t.Fatalf("token %d after %s, want > %d", rec.Token, how, last)
		}
		last = rec.Token
	}
	for i := 0; i < 6; i++ {
		rec := e.mustAcquire(ctx, e.res("r"), owners[i%3], longTTL)
		check(rec, "release")
		// Renewing and re-acquiring by the holder keep the token.
		if err := e.store.Renew(ctx, e.res("r"), owners[i%3], rec.Token, longTTL); err != nil {
			t.Fatal(err)
		}
		if again := e.mustAcquire(ctx, e.res("r"), owners[i%3], longTTL); again.Token != rec.Token {
			t.Fatalf("re-acquire changed the token %d -> %d", rec.Token, again.Token)
		}
		if err := e.store.Release(ctx, e.res("r"), owners[i%3], rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		rec := e.mustAcquire(ctx, e.res("r"), owners[i%3], e.cfg.ShortTTL)
		check(rec, "expiry")
		e.waitExpiry(ctx, e.res("r"), e.cfg.ShortTTL)
	}
	// The same owner re-acquiring after its own lease expired gets a new
	// grant, so a new token.
	rec := e.mustAcquire(ctx, e.res("r"), owners[1], longTTL)
	check(rec, "expiry and re-acquire by the same owner")
	// Tokens are per resource but never shared: another resource starts on its own.
	other := e.mustAcquire(ctx, e.res("other"), owners[0], longTTL)
	if other.Token == 0 {
		t.Fatal("token 0 on a new resource")
	}
}

func testBadInput(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	a := e.owner("a")
	badResources := map[string]string{
		"empty":        "",
		"too long":     e.prefix + strings.Repeat("x", tenure.MaxResourceLen),
		"invalid utf8": e.prefix + "\xff\xfe",
		"NUL":          e.prefix + "a\x00b",
	}
	for name, r := range badResources {
		if _, err := e.store.Acquire(ctx, r, a, longTTL); !errors.Is(err, tenure.ErrInvalidResource) {
			t.Errorf("Acquire with %s resource: %v; want ErrInvalidResource", name, err)
		}
		if err := e.store.Renew(ctx, r, a, 1, longTTL); !errors.Is(err, tenure.ErrInvalidResource) {
			t.Errorf("Renew with %s resource: %v; want ErrInvalidResource", name, err)
		}
		if err := e.store.Release(ctx, r, a, 1); !errors.Is(err, tenure.ErrInvalidResource) {
			t.Errorf("Release with %s resource: %v; want ErrInvalidResource", name, err)
		}
		if _, err := e.store.Get(ctx, r); !errors.Is(err, tenure.ErrInvalidResource) {
			t.Errorf("Get with %s resource: %v; want ErrInvalidResource", name, err)
		}
	}
	longest := e.prefix + strings.Repeat("x", tenure.MaxResourceLen-len(e.prefix))
	rec := e.mustAcquire(ctx, longest, a, longTTL)
	if err := e.store.Release(ctx, longest, a, rec.Token); err != nil {
		t.Errorf("a resource of exactly %d bytes: %v", tenure.MaxResourceLen, err)
	}
	for _, o := range []string{"", strings.Repeat("o", driver.MaxOwnerLen+1), "\xff", "a\x00"} {
		if _, err := e.store.Acquire(ctx, e.res("bad-owner"), o, longTTL); !errors.Is(err, tenure.ErrInvalidOwner) {
			t.Errorf("Acquire with owner %q: %v; want ErrInvalidOwner", o, err)
		}
	}
	ttls := append([]time.Duration{0, -time.Second}, e.cfg.InvalidTTLs...)
	if c, ok := e.store.(driver.TTLChecker); ok {
		for _, ttl := range ttls {
			if err := c.CheckTTL(ttl); !errors.Is(err, tenure.ErrInvalidTTL) {
				t.Errorf("CheckTTL(%v): %v; want ErrInvalidTTL", ttl, err)
			}
		}
		if err := c.CheckTTL(longTTL); err != nil {
			t.Errorf("CheckTTL(%v): %v", longTTL, err)
		}
	}
	for _, ttl := range ttls {
		if _, err := e.store.Acquire(ctx, e.res("bad-ttl"), a, ttl); !errors.Is(err, tenure.ErrInvalidTTL) {
			t.Errorf("Acquire with TTL %v: %v; want ErrInvalidTTL", ttl, err)
		}
	}
	if _, err := e.store.List(ctx, "\xff"); err == nil {
		t.Errorf("List with an invalid prefix: no error")
	}
	// Nothing was written.
	if recs, err := e.store.List(ctx, e.prefix); err != nil || len(recs) != 0 {
		t.Fatalf("after bad input, List(%q) = %v, %v; want nothing", e.prefix, recs, err)
	}
	// Bad input against a held lease changes nothing.
	rec = e.mustAcquire(ctx, e.res("held"), a, longTTL)
	for _, ttl := range ttls {
		if err := e.store.Renew(ctx, e.res("held"), a, rec.Token, ttl); !errors.Is(err, tenure.ErrInvalidTTL) {
			t.Errorf("Renew with TTL %v: %v; want ErrInvalidTTL", ttl, err)
		}
	}
	got := e.mustHeldBy(ctx, e.res("held"), a, rec.Token)
	if got.Remaining != 0 && got.Remaining < longTTL/2 {
		t.Fatalf("a rejected Renew changed the lease: Remaining %v", got.Remaining)
	}
}

func testContention(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	resource := e.res("contended")
	var (
		holders atomic.Int32
		grants  atomic.Int32
		mu      sync.Mutex
		tokens  []uint64
		wg      sync.WaitGroup
		errOnce sync.Once
		failure string
	)
	fail := func(msg string) { errOnce.Do(func() { failure = msg }) }
	for i := 0; i < e.cfg.Contenders; i++ {
		owner := e.owner("c")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < e.cfg.Rounds; {
				rec, err := e.store.Acquire(ctx, resource, owner, longTTL)
				if errors.Is(err, tenure.ErrHeld) || errors.Is(err, tenure.ErrUnknownOutcome) {
					// Unknown: retrying as the same owner resolves it below.
					if errors.Is(err, tenure.ErrUnknownOutcome) {
						continue
					}
					round++
					continue
				}
				if err != nil {
					fail("Acquire: " + err.Error())
					return
				}
				if n := holders.Add(1); n != 1 {
					fail("two holders at once")
				}
				mu.Lock()
				tokens = append(tokens, rec.Token)
				mu.Unlock()
				grants.Add(1)
				holders.Add(-1)
				for {
					err := e.store.Release(ctx, resource, owner, rec.Token)
					if err == nil || errors.Is(err, tenure.ErrLeaseLost) {
						break
					}
					if !errors.Is(err, tenure.ErrUnknownOutcome) {
						fail("Release: " + err.Error())
						return
					}
				}
				round++
			}
		}()
	}
	wg.Wait()
	if failure != "" {
		t.Fatal(failure)
	}
	if grants.Load() < 2 {
		t.Fatalf("only %d grants among %d contenders", grants.Load(), e.cfg.Contenders)
	}
	if !e.cfg.NoFencing {
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("grant %d got token %d after %d", i, tokens[i], tokens[i-1])
			}
		}
	}
	t.Logf("%d grants, %d contenders", grants.Load(), e.cfg.Contenders)
}

func testGetList(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	a, b := e.owner("a"), e.owner("b")
	x := e.mustAcquire(ctx, e.res("g/x"), a, longTTL)
	y := e.mustAcquire(ctx, e.res("g/y"), b, longTTL)
	z := e.mustAcquire(ctx, e.res("h/z"), a, longTTL)
	short := e.mustAcquire(ctx, e.res("g/short"), a, e.cfg.ShortTTL)
	e.waitExpiry(ctx, short.Resource, e.cfg.ShortTTL)

	recs, err := e.store.List(ctx, e.res("g/"))
	if err != nil {
		t.Fatal(err)
	}
	want := []tenure.Record{x, y}
	if len(recs) != len(want) {
		t.Fatalf("List(g/) = %+v; want %+v", recs, want)
	}
	for i := range want {
		if recs[i].Resource != want[i].Resource || recs[i].Owner != want[i].Owner || recs[i].Token != want[i].Token {
			t.Fatalf("List(g/)[%d] = %+v; want %+v", i, recs[i], want[i])
		}
	}
	all, err := e.store.List(ctx, e.prefix)
	if err != nil || len(all) != 3 || all[2].Resource != z.Resource {
		t.Fatalf("List(prefix) = %+v, %v; want x, y, z", all, err)
	}
	if err := e.store.Release(ctx, x.Resource, a, x.Token); err != nil {
		t.Fatal(err)
	}
	recs, err = e.store.List(ctx, e.res("g/"))
	if err != nil || len(recs) != 1 || recs[0].Resource != y.Resource {
		t.Fatalf("List(g/) after releasing x = %+v, %v; want y", recs, err)
	}
	e.mustHeldBy(ctx, z.Resource, a, z.Token)
	e.mustFree(ctx, x.Resource)
	e.mustFree(ctx, e.res("g/never"))
}

// testNotificationWakesWaiter: on a store that implements driver.Notifier,
// a waiting Acquire whose backoff is an hour is granted within a moment of
// the release, woken by the store's notification.
func testNotificationWakesWaiter(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	if _, ok := e.store.(driver.Notifier); !ok {
		t.Skip("the store does not implement driver.Notifier")
	}
	d := testserver.WakeOnce(t, e.store, e.store, e.res("r"))
	t.Logf("granted %v after the release", d)
	if d > 2*time.Second {
		t.Fatalf("waiter granted %v after the release", d)
	}
}

// countingStore counts Acquire calls and keeps the store's notifications.
type countingStore struct {
	driver.Store
	acquires atomic.Int64
}

func (c *countingStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (tenure.Record, error) {
	c.acquires.Add(1)
	return c.Store.Acquire(ctx, resource, owner, ttl)
}

func (c *countingStore) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return c.Store.(driver.Notifier).Subscribe(ctx, resource)
}

func (c *countingStore) Watch(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return c.Store.(driver.Watcher).Watch(ctx, resource)
}

func (c *countingStore) CheckTTL(ttl time.Duration) error {
	if tc, ok := c.Store.(driver.TTLChecker); ok {
		return tc.CheckTTL(ttl)
	}
	return nil
}

// testHandOverWakesOneWaiter: on a store whose notifications wake one waiter
// per release (driver.Watcher), handing a resource down a queue of waiters
// in one process costs about one acquire call per hand-over, whatever the
// number of waiters, and they are served in the order they came.
func testHandOverWakesOneWaiter(t *testing.T, cfg Config) {
	e := newEnv(t, cfg)
	if _, ok := e.store.(driver.Watcher); !ok {
		t.Skip("the store's notifications do not wake one waiter (no driver.Watcher)")
	}
	ctx := ctxT(t)
	s := &countingStore{Store: e.store}
	r := e.res("r")
	holder := e.locker(s)
	first, err := holder.TryAcquire(ctx, r, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		waiting := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			l, err := e.locker(s).Acquire(ctx, r, longTTL, tenure.OnWait(func(*tenure.HeldError, time.Duration) { once.Do(func() { close(waiting) }) }))
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
		// The next waiter comes once this one waits: OnWait comes after
		// the attempt right after it subscribed. (Counting the store's
		// acquire calls would also count an earlier waiter's, woken.)
		select {
		case <-waiting:
		case <-ctx.Done():
			t.Fatalf("waiter %d never waited", i)
		}
	}
	time.Sleep(100 * time.Millisecond)
	before := s.acquires.Load()
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	calls := s.acquires.Load() - before
	t.Logf("%d acquire calls for %d hand-overs", calls, n)
	if calls > 2*n {
		t.Fatalf("%d acquire calls to hand the resource down %d waiters; want about one per hand-over", calls, n)
	}
	next := 0
	for i := range order {
		if i != next {
			t.Fatalf("waiter %d granted when waiter %d was next: not in arrival order", i, next)
		}
		next++
	}
}

// A closed store answers an acquire with an error matching
// driver.ErrStoreUnusable, so that a Locker waiting for a resource on it
// returns instead of retrying until its context ends.
func testClosedStoreUnusable(t *testing.T, cfg Config) {
	e, ctx := newEnv(t, cfg), ctxT(t)
	s := e.store
	if cfg.Fresh != nil {
		s = cfg.Fresh(t)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Acquire(ctx, e.res("r"), e.owner("a"), longTTL); !errors.Is(err, driver.ErrStoreUnusable) {
		t.Fatalf("Acquire on a closed store: %v; want an error matching driver.ErrStoreUnusable", err)
	}
	lk, err := tenure.New(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lk.Acquire(ctx, e.res("r"), longTTL); !errors.Is(err, tenure.ErrStoreUnusable) || ctx.Err() != nil {
		t.Fatalf("Locker.Acquire on a closed store: %v; want ErrStoreUnusable at once", err)
	}
}
