package cassandra_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/cassandra"
)

// lwtCounter counts, through the driver's QueryObserver and BatchObserver,
// the lightweight transactions (statements or batches with an IF clause)
// and the serial reads sent to the lease tables, attempts included.
type lwtCounter struct {
	mu          sync.Mutex
	lwt, serial int
	log         []string
}

func (c *lwtCounter) ours(stmt string) bool {
	return strings.Contains(stmt, runKeyspace)
}

func (c *lwtCounter) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	if !c.ours(q.Statement) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case strings.Contains(q.Statement, " IF "):
		c.lwt++
		c.log = append(c.log, "LWT "+q.Statement)
	case q.Query != nil && (q.Query.GetConsistency() == gocql.Serial || q.Query.GetConsistency() == gocql.LocalSerial):
		c.serial++
		c.log = append(c.log, "SERIAL "+q.Statement)
	}
}

func (c *lwtCounter) ObserveBatch(_ context.Context, b gocql.ObservedBatch) {
	if len(b.Statements) == 0 || !c.ours(b.Statements[0]) {
		return
	}
	for _, s := range b.Statements {
		if strings.Contains(s, " IF ") {
			c.mu.Lock()
			c.lwt++
			c.log = append(c.log, "LWT BATCH "+strings.Join(b.Statements, "; "))
			c.mu.Unlock()
			return
		}
	}
}

// take returns the counts since the last call and resets them.
func (c *lwtCounter) take() (lwt, serial int, log []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lwt, serial, log = c.lwt, c.serial, c.log
	c.lwt, c.serial, c.log = 0, 0, nil
	return
}

func (c *lwtCounter) expect(t *testing.T, what string, lwt, serial int) {
	t.Helper()
	gotL, gotS, log := c.take()
	if gotL != lwt || gotS != serial {
		t.Errorf("%s: %d lightweight transactions and %d serial reads; want %d and %d:\n  %s", what, gotL, gotS, lwt, serial, strings.Join(log, "\n  "))
	} else {
		t.Logf("%s: %d LWT, %d serial reads", what, gotL, gotS)
	}
}

// expectResolved checks one LWT and its resolving serial read: one
// attempt, or up to three when the read went out on the connection that had
// just been reset (the driver's attempt on it, then the resend).
func (c *lwtCounter) expectResolved(t *testing.T, what string, reset bool) {
	t.Helper()
	if !reset {
		c.expect(t, what, 1, 1)
		return
	}
	gotL, gotS, log := c.take()
	if gotL != 1 || gotS < 1 || gotS > 3 {
		t.Errorf("%s: %d lightweight transactions and %d serial read attempts; want 1 and 1 to 3:\n  %s", what, gotL, gotS, strings.Join(log, "\n  "))
	} else {
		t.Logf("%s: %d LWT, %d serial read attempts", what, gotL, gotS)
	}
}

func observed(t *testing.T, mode cassandra.Mode) (*cassandra.Store, *lwtCounter) {
	c := &lwtCounter{}
	s := openStore(t, mode, func(cfg *cassandra.Config) {
		cfg.ClusterHook = func(cc *gocql.ClusterConfig) { cc.QueryObserver, cc.BatchObserver = c, c }
	})
	return s, c
}

// TestLWTCount counts the lightweight transactions of each operation on the
// real server, through the driver's observers.
func TestLWTCount(t *testing.T) {
	ctx := testCtx(t)
	t.Run("Native", func(t *testing.T) {
		s, c := observed(t, cassandra.ModeNative)
		a, b := owner(t, "a"), owner(t, "b")
		r := resource(t, "r")
		rec, err := s.Acquire(ctx, r, a, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		c.expect(t, "acquire of a never-seen resource", 1, 0)
		if err := s.Renew(ctx, r, a, rec.Token, time.Minute); err != nil {
			t.Fatal(err)
		}
		c.expect(t, "renew", 1, 0)
		if _, err := s.Acquire(ctx, r, b, time.Minute); !errors.Is(err, tenure.ErrHeld) {
			t.Fatalf("acquire of a held resource: %v", err)
		}
		c.expect(t, "acquire of a resource held by another owner (current view)", 1, 0)
		if err := s.Release(ctx, r, a, rec.Token); err != nil {
			t.Fatal(err)
		}
		c.expect(t, "release", 1, 0)
		rec, err = s.Acquire(ctx, r, b, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		c.expect(t, "acquire of a free resource, current view", 1, 0)
		if _, err := s.Acquire(ctx, r, b, time.Minute); err != nil {
			t.Fatal(err)
		}
		c.expect(t, "acquire by the holder (the same lease, renewed)", 2, 0)
		if err := s.Release(ctx, r, b, rec.Token); err != nil {
			t.Fatal(err)
		}
		c.take()

		// Another store (another process): no cached token for r.
		s2, c2 := observed(t, cassandra.ModeNative)
		rec2, err := s2.Acquire(ctx, r, a, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if rec2.Token <= rec.Token {
			t.Fatalf("token %d after %d", rec2.Token, rec.Token)
		}
		c2.expect(t, "acquire of a free resource without a view of its token", 2, 0)
		if err := s2.Release(ctx, r, a, rec2.Token); err != nil {
			t.Fatal(err)
		}
		c2.take()
		// The first store's view is now stale (s2 granted token+1).
		rec3, err := s.Acquire(ctx, r, b, time.Minute)
		if err != nil || rec3.Token <= rec2.Token {
			t.Fatalf("acquire with a stale view: %+v, %v", rec3, err)
		}
		c.expect(t, "acquire of a free resource with a stale view", 2, 0)
		if _, err := s.Get(ctx, r); err != nil {
			t.Fatal(err)
		}
		c.expect(t, "get", 0, 1)
	})

	t.Run("Jaeger", func(t *testing.T) {
		s, c := observed(t, cassandra.ModeJaeger)
		a := owner(t, "a")
		r := resource(t, "r")
		if _, err := s.Acquire(ctx, r, a, time.Minute); err != nil {
			t.Fatal(err)
		}
		c.expect(t, "jaeger mode: acquire", 1, 0)
		if err := s.Renew(ctx, r, a, 0, time.Minute); err != nil {
			t.Fatal(err)
		}
		c.expect(t, "jaeger mode: renew", 1, 0)
		if err := s.Release(ctx, r, a, 0); err != nil {
			t.Fatal(err)
		}
		c.expect(t, "jaeger mode: release", 1, 0)

		// Jaeger's own statements renew a held lease with two.
		jc := newJaegerClient(s.Session(), "collector-1")
		r2 := resource(t, "r2")
		if ok, err := jc.Acquire(r2, time.Minute); !ok || err != nil {
			t.Fatalf("jaeger statements: acquire: %v %v", ok, err)
		}
		c.expect(t, "Jaeger's statements: acquire", 1, 0)
		if ok, err := jc.Acquire(r2, time.Minute); !ok || err != nil {
			t.Fatalf("jaeger statements: renew: %v %v", ok, err)
		}
		c.expect(t, "Jaeger's statements: renewal of a held lease", 2, 0)
		if ok, err := jc.Forfeit(r2); !ok || err != nil {
			t.Fatalf("jaeger statements: forfeit: %v %v", ok, err)
		}
		c.take()

		// tenure's adapter with Jaeger's method set renews with one.
		jl, err := cassandra.NewJaegerLock(s, "collector-2")
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := jl.Acquire(r2, time.Minute); !ok || err != nil {
			t.Fatalf("adapter: acquire: %v %v", ok, err)
		}
		c.expect(t, "JaegerLock: acquire", 1, 0)
		if ok, err := jl.Acquire(r2, time.Minute); !ok || err != nil {
			t.Fatalf("adapter: renew: %v %v", ok, err)
		}
		c.expect(t, "JaegerLock: renewal of a held lease", 1, 0)
		if ok, err := jl.Forfeit(r2); !ok || err != nil {
			t.Fatalf("adapter: forfeit: %v %v", ok, err)
		}
		c.expect(t, "JaegerLock: forfeit", 1, 0)
	})
}

// TestUnknownOutcomeLostReply proves on the real server that a conditional
// write whose reply is lost after Cassandra applied it is reported as what
// a serial read shows, never guessed: a proxy between the driver and
// Cassandra forwards the request and drops the answer (or resets the
// connection right after the request).
func TestUnknownOutcomeLostReply(t *testing.T) {
	ctx := testCtx(t)
	obs := &lwtCounter{}
	s, p := openProxied(t, cassandra.ModeNative, obs)
	direct, _ := stores(t)
	table := cassandra.DefaultNativeTable
	me, other := owner(t, "me"), owner(t, "other")

	mustLost := func(t *testing.T, what string) {
		t.Helper()
		if n := len(p.lost()); n == 0 {
			t.Fatalf("%s: the proxy lost no reply", what)
		}
	}

	for _, action := range []struct {
		name string
		a    proxyAction
	}{{"DropReply", dropNextReply}, {"ResetAfterRequest", resetAfterWrite}} {
		t.Run(action.name, func(t *testing.T) {
			t.Run("GrantNeverSeen", func(t *testing.T) {
				r := resource(t, "fresh")
				obs.take()
				p.arm(action.a)
				rec, err := s.Acquire(ctx, r, me, 30*time.Second)
				mustLost(t, "grant")
				if err != nil {
					t.Fatalf("Acquire whose reply was lost after it was applied: %v; want it resolved as granted", err)
				}
				row := serialRow(t, direct.Session(), table, r)
				if row.owner != me || uint64(row.token) != rec.Token || rec.Token == 0 {
					t.Fatalf("store answered %+v; serial read shows owner %q token %d", rec, row.owner, row.token)
				}
				obs.expectResolved(t, "grant whose reply was lost", action.a == resetAfterWrite)
				// Renewals work from then on.
				if err := s.Renew(ctx, r, me, rec.Token, 30*time.Second); err != nil {
					t.Fatal(err)
				}
			})

			t.Run("GrantFree", func(t *testing.T) {
				r := resource(t, "free")
				rec, err := s.Acquire(ctx, r, other, 30*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Release(ctx, r, other, rec.Token); err != nil {
					t.Fatal(err)
				}
				obs.take()
				p.arm(action.a)
				got, err := s.Acquire(ctx, r, me, 30*time.Second)
				mustLost(t, "grant")
				if err != nil {
					t.Fatalf("Acquire whose reply was lost: %v", err)
				}
				row := serialRow(t, direct.Session(), table, r)
				if row.owner != me || uint64(row.token) != got.Token || got.Token <= rec.Token {
					t.Fatalf("store answered %+v; serial read shows owner %q token %d", got, row.owner, row.token)
				}
				obs.expectResolved(t, "grant of a free resource whose reply was lost", action.a == resetAfterWrite)
			})

			t.Run("HeldByAnother", func(t *testing.T) {
				r := resource(t, "held")
				rec, err := s.Acquire(ctx, r, other, 30*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				p.arm(action.a)
				_, err = s.Acquire(ctx, r, me, 30*time.Second)
				mustLost(t, "grant")
				// The row still has the token the write is conditioned
				// on: once other's lease ends (release or expiry keep the
				// token), a request held up before its coordinator ran it
				// would apply. Not "held": the outcome is unknown.
				if !errors.Is(err, tenure.ErrUnknownOutcome) || errors.Is(err, tenure.ErrHeld) {
					t.Fatalf("Acquire of a held resource whose reply was lost: %v; want ErrUnknownOutcome", err)
				}
				if row := serialRow(t, direct.Session(), table, r); row.owner != other || uint64(row.token) != rec.Token {
					t.Fatalf("serial read: %+v; want %s's lease unchanged", row, other)
				}
			})

			t.Run("Renew", func(t *testing.T) {
				r := resource(t, "renew")
				rec, err := s.Acquire(ctx, r, me, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				obs.take()
				p.arm(action.a)
				if err := s.Renew(ctx, r, me, rec.Token, time.Hour); err != nil {
					t.Fatalf("Renew whose reply was lost after it was applied: %v; want it resolved as renewed", err)
				}
				mustLost(t, "renew")
				row := serialRow(t, direct.Session(), table, r)
				if row.owner != me || row.remaining < 3000 {
					t.Fatalf("serial read: owner %q, TTL %d s; want the renewal (about 3601 s) applied", row.owner, row.remaining)
				}
				obs.expectResolved(t, "renew whose reply was lost", action.a == resetAfterWrite)
			})

			t.Run("Release", func(t *testing.T) {
				r := resource(t, "release")
				rec, err := s.Acquire(ctx, r, me, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				obs.take()
				p.arm(action.a)
				if err := s.Release(ctx, r, me, rec.Token); err != nil {
					t.Fatalf("Release whose reply was lost after it was applied: %v; want it resolved as released", err)
				}
				mustLost(t, "release")
				if row := serialRow(t, direct.Session(), table, r); row.owner != "" || uint64(row.token) != rec.Token {
					t.Fatalf("serial read after release: %+v", row)
				}
				obs.expectResolved(t, "release whose reply was lost", action.a == resetAfterWrite)
			})
		})
	}

	t.Run("LostRequestIsUnknownNotGuessed", func(t *testing.T) {
		r := resource(t, "lost-request")
		p.arm(dropNextRequest)
		_, err := s.Acquire(ctx, r, me, 30*time.Second)
		mustLost(t, "grant")
		if !errors.Is(err, tenure.ErrUnknownOutcome) || errors.Is(err, tenure.ErrHeld) {
			t.Fatalf("Acquire whose request was lost: %v; want ErrUnknownOutcome (the write could still arrive)", err)
		}
		if row := serialRow(t, direct.Session(), table, r); row.found {
			t.Fatalf("serial read: %+v; want no row", row)
		}
		// A retry by the same owner (what the Locker does) settles it.
		rec, err := s.Acquire(ctx, r, me, 30*time.Second)
		if err != nil || rec.Owner != me {
			t.Fatalf("retry: %+v, %v", rec, err)
		}
		p.arm(dropNextRequest)
		err = s.Renew(ctx, r, me, rec.Token, time.Minute)
		if !errors.Is(err, tenure.ErrUnknownOutcome) || errors.Is(err, tenure.ErrLeaseLost) {
			t.Fatalf("Renew whose request was lost: %v; want ErrUnknownOutcome", err)
		}
	})

	t.Run("LockerGrantedOnFirstCall", func(t *testing.T) {
		lk, err := tenure.New(s)
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Close(ctx)
		r := resource(t, "locker")
		p.arm(dropNextReply)
		l, err := lk.TryAcquire(ctx, r, 30*time.Second)
		if err != nil {
			t.Fatalf("TryAcquire whose reply was lost: %v", err)
		}
		row := serialRow(t, direct.Session(), table, r)
		if row.owner != l.Owner() || uint64(row.token) != l.Token() {
			t.Fatalf("lease token %d; serial read %+v", l.Token(), row)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestUnknownOutcomeLostReplyJaeger: in Jaeger mode a row naming this owner
// does not prove which write made it, so the store reports the outcome as
// unknown, and the Locker's safe retry settles it.
func TestUnknownOutcomeLostReplyJaeger(t *testing.T) {
	ctx := testCtx(t)
	s, p := openProxied(t, cassandra.ModeJaeger, nil)
	_, direct := stores(t)
	me := owner(t, "me")
	r := resource(t, "r")
	p.arm(dropNextReply)
	_, err := s.Acquire(ctx, r, me, 30*time.Second)
	if !errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("Acquire whose reply was lost: %v; want ErrUnknownOutcome", err)
	}
	if o, _ := serialJaegerOwner(t, direct.Session(), cassandra.DefaultJaegerTable, r); o != me {
		t.Fatalf("serial read: owner %q", o)
	}
	// The same owner's retry renews it with a confirmed write.
	if _, err := s.Acquire(ctx, r, me, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	lk, err := tenure.New(s)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close(ctx)
	r2 := resource(t, "locker")
	p.arm(dropNextReply)
	l, err := lk.TryAcquire(ctx, r2, 30*time.Second)
	if err != nil {
		t.Fatalf("Locker TryAcquire whose first reply was lost: %v", err)
	}
	if o, _ := serialJaegerOwner(t, direct.Session(), cassandra.DefaultJaegerTable, r2); o != l.Owner() {
		t.Fatalf("serial read: owner %q; want %q", o, l.Owner())
	}
	p.arm(dropNextReply)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release whose first reply was lost: %v", err)
	}
	if o, _ := serialJaegerOwner(t, direct.Session(), cassandra.DefaultJaegerTable, r2); o != "" {
		t.Fatalf("after release, owner %q", o)
	}
}

// TestLocalConsistencies runs the store with LOCAL_SERIAL, LOCAL_QUORUM and
// DC-aware routing (the single node's data center is SimpleSnitch's
// "datacenter1").
func TestLocalConsistencies(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t, cassandra.ModeNative, func(c *cassandra.Config) {
		c.SerialConsistency = gocql.LocalSerial
		c.CommitConsistency = gocql.LocalQuorum
		c.LocalDC = "datacenter1"
	})
	r := resource(t, "r")
	a, b := owner(t, "a"), owner(t, "b")
	rec, err := s.Acquire(ctx, r, a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, r, b, time.Minute); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("second owner: %v", err)
	}
	if err := s.Renew(ctx, r, a, rec.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, r); err != nil || got.Owner != a {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	if recs, err := s.List(ctx, r); err != nil || len(recs) != 1 {
		t.Fatalf("List: %+v, %v", recs, err)
	}
	if err := s.Release(ctx, r, a, rec.Token); err != nil {
		t.Fatal(err)
	}
}

// batchHook runs fn after every batch a store's session completes (the
// driver calls a BatchObserver synchronously, before the caller sees the
// result).
type batchHook struct{ fn func() }

func (h batchHook) ObserveBatch(context.Context, gocql.ObservedBatch) { h.fn() }

// An Acquire whose first attempt finds the resource free with another token
// and whose second attempt then finds the grant's own write (an earlier
// call of the same grant, whose answer was lost, landing late) holds the
// same lease: it renews it (docs/design.md: a live lease of the same grant
// is the same lease, renewed), and never answers that the grant itself
// holds the resource.
func TestAcquireMeetsOwnGrantBetweenAttempts(t *testing.T) {
	ctx := testCtx(t)
	res := resource(t, "r")
	g := owner(t, "g")
	var armed atomic.Bool
	var late driver.Record
	var lateErr error
	var late1 *cassandra.Store // stands for the grant's earlier call
	a := openStore(t, cassandra.ModeNative, func(cfg *cassandra.Config) {
		cfg.ClusterHook = func(cc *gocql.ClusterConfig) {
			cc.BatchObserver = batchHook{func() {
				if armed.CompareAndSwap(true, false) {
					late, lateErr = late1.Acquire(context.Background(), res, g, 10*time.Second)
				}
			}}
		}
	})
	late1 = openStore(t, cassandra.ModeNative, nil)
	other := openStore(t, cassandra.ModeNative, nil)
	// a's token cache learns the resource's token; another grant and its
	// release move the token on, so a's first attempt is not applied.
	for _, s := range []*cassandra.Store{a, other} {
		rec, err := s.Acquire(ctx, res, owner(t, "x"), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, res, rec.Owner, rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	armed.Store(true)
	got, err := a.Acquire(ctx, res, g, 10*time.Second)
	if armed.Load() {
		t.Fatal("the earlier call's write was never made between the attempts")
	}
	if lateErr != nil {
		t.Fatalf("the earlier call's write: %v", lateErr)
	}
	if err != nil {
		t.Fatalf("Acquire after the grant's own write landed: %v; want the same lease, renewed (token %d)", err, late.Token)
	}
	if got.Owner != g || got.Token != late.Token {
		t.Fatalf("granted %s with token %d; want the same lease, token %d", got.Owner, got.Token, late.Token)
	}
}
