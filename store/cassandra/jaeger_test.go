package cassandra_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/cassandra"
)

// jaegerClient behaves as a Jaeger collector's Cassandra lock, with Jaeger's
// three statements in their documented form (insert if not exists with a
// TTL; update with a TTL if the owner matches; delete if the owner matches)
// and its flow: Acquire inserts, and when the row already names this owner,
// extends the lease with the update; TTLs are truncated to whole seconds.
type jaegerClient struct {
	session *gocql.Session
	owner   string
}

func newJaegerClient(s *gocql.Session, owner string) *jaegerClient {
	return &jaegerClient{session: s, owner: owner}
}

func (j *jaegerClient) table() string { return runKeyspace + "." + cassandra.DefaultJaegerTable }

func (j *jaegerClient) Acquire(resource string, ttl time.Duration) (bool, error) {
	ttlSec := int(ttl.Seconds())
	var name, owner string
	applied, err := j.session.Query(`INSERT INTO `+j.table()+` (name, owner) VALUES (?,?) IF NOT EXISTS USING TTL ?;`,
		resource, j.owner, ttlSec).SerialConsistency(gocql.Serial).ScanCAS(&name, &owner)
	if err != nil {
		return false, err
	}
	if applied {
		return true, nil
	}
	if owner == j.owner {
		var cur string
		applied, err := j.session.Query(`UPDATE `+j.table()+` USING TTL ? SET owner = ? WHERE name = ? IF owner = ?;`,
			ttlSec, j.owner, resource, j.owner).SerialConsistency(gocql.Serial).ScanCAS(&cur)
		if err != nil {
			return false, err
		}
		if !applied {
			return false, errors.New("this host does not own the resource lock")
		}
		return true, nil
	}
	return false, nil
}

func (j *jaegerClient) Forfeit(resource string) (bool, error) {
	var name, owner string
	applied, err := j.session.Query(`DELETE FROM `+j.table()+` WHERE name = ? IF owner = ?;`,
		resource, j.owner).SerialConsistency(gocql.Serial).ScanCAS(&name, &owner)
	if err != nil {
		return false, err
	}
	if !applied {
		return false, errors.New("this host does not own the resource lock")
	}
	return true, nil
}

// interval is one hold of the resource, on this process's monotonic clock.
type interval struct {
	who        string
	start, end time.Time
}

// TestJaegerInterop: a client issuing Jaeger's exact statements, a tenure
// Locker on a Jaeger-mode store and tenure's JaegerLock adapter contend for
// one resource on one `leases` table for many rounds; no two are ever
// holders at once. Each hold is recorded from the moment its holder learned
// it was granted to the moment before it asked to release, on the
// monotonic clock, and the intervals must not overlap.
func TestJaegerInterop(t *testing.T) {
	ctx := testCtx(t)
	_, js := stores(t)
	r := resource(t, "shared")
	const ttl = 5 * time.Second
	deadline := time.Now().Add(8 * time.Second)

	var (
		mu        sync.Mutex
		intervals []interval
		wg        sync.WaitGroup
		errs      = make(chan error, 16)
	)
	record := func(who string, start time.Time) {
		end := time.Now()
		mu.Lock()
		intervals = append(intervals, interval{who, start, end})
		mu.Unlock()
	}
	hold := func() {
		time.Sleep(time.Duration(2+rand.IntN(15)) * time.Millisecond)
	}
	idle := func() {
		time.Sleep(time.Duration(1+rand.IntN(10)) * time.Millisecond)
	}

	// Jaeger's statements.
	wg.Add(1)
	go func() {
		defer wg.Done()
		jc := newJaegerClient(js.Session(), "jaeger-collector-7f3a")
		for time.Now().Before(deadline) {
			ok, err := jc.Acquire(r, ttl)
			if err != nil {
				errs <- err
				return
			}
			if !ok {
				idle()
				continue
			}
			start := time.Now()
			hold()
			// Jaeger's renewal of a held lease (insert, then update).
			if ok, err := jc.Acquire(r, ttl); !ok || err != nil {
				errs <- errors.Join(errors.New("jaeger renewal failed"), err)
				return
			}
			hold()
			record("jaeger", start)
			if _, err := jc.Forfeit(r); err != nil {
				errs <- err
				return
			}
			idle()
		}
	}()

	// A tenure Locker.
	wg.Add(1)
	go func() {
		defer wg.Done()
		lk, err := tenure.New(js, tenure.WithOwnerID("tenure-locker"))
		if err != nil {
			errs <- err
			return
		}
		defer lk.Close(ctx)
		for time.Now().Before(deadline) {
			l, err := lk.TryAcquire(ctx, r, ttl)
			if errors.Is(err, tenure.ErrHeld) {
				idle()
				continue
			}
			if err != nil {
				errs <- err
				return
			}
			start := time.Now()
			hold()
			if err := l.Renew(ctx); err != nil {
				errs <- err
				return
			}
			hold()
			if l.Err() != nil {
				errs <- l.Err()
				return
			}
			record("locker", start)
			if err := l.Release(ctx); err != nil {
				errs <- err
				return
			}
			idle()
		}
	}()

	// tenure's adapter with Jaeger's method set.
	wg.Add(1)
	go func() {
		defer wg.Done()
		jl, err := cassandra.NewJaegerLock(js, "tenure-adapter")
		if err != nil {
			errs <- err
			return
		}
		for time.Now().Before(deadline) {
			ok, err := jl.Acquire(r, ttl)
			if err != nil {
				errs <- err
				return
			}
			if !ok {
				idle()
				continue
			}
			start := time.Now()
			hold()
			if ok, err := jl.Acquire(r, ttl); !ok || err != nil {
				errs <- errors.Join(errors.New("adapter renewal failed"), err)
				return
			}
			hold()
			record("adapter", start)
			if _, err := jl.Forfeit(r); err != nil {
				errs <- err
				return
			}
			idle()
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sort.Slice(intervals, func(i, j int) bool { return intervals[i].start.Before(intervals[j].start) })
	count := map[string]int{}
	for i, iv := range intervals {
		count[iv.who]++
		if i > 0 && intervals[i-1].end.After(iv.start) {
			t.Fatalf("two holders at once: %s held until %v after %s started", intervals[i-1].who, intervals[i-1].end.Sub(iv.start), iv.who)
		}
	}
	t.Logf("%d holds without overlap: %v", len(intervals), count)
	for _, who := range []string{"jaeger", "locker", "adapter"} {
		if count[who] < 3 {
			t.Errorf("%s held the resource only %d times", who, count[who])
		}
	}
}

// TestJaegerLockDifferences covers each deliberate difference of JaegerLock
// from Jaeger's lock.
func TestJaegerLockDifferences(t *testing.T) {
	_, js := stores(t)
	table := cassandra.DefaultJaegerTable

	t.Run("SubSecondTTLIsAnError", func(t *testing.T) {
		jl, _ := cassandra.NewJaegerLock(js, "a")
		r := resource(t, "r")
		for _, ttl := range []time.Duration{time.Millisecond, 500 * time.Millisecond, 999 * time.Millisecond, -time.Second} {
			if ok, err := jl.Acquire(r, ttl); ok || !errors.Is(err, tenure.ErrInvalidTTL) {
				t.Errorf("Acquire with TTL %v: %v, %v; want ErrInvalidTTL", ttl, ok, err)
			}
		}
		// Jaeger's own client truncates 500 ms to USING TTL 0: never expires.
		if got := int((500 * time.Millisecond).Seconds()); got != 0 {
			t.Fatalf("Jaeger's truncation gives %d", got)
		}
		if o, _ := serialJaegerOwner(t, js.Session(), table, r); o != "" {
			t.Fatalf("a rejected TTL wrote a lease for %q", o)
		}
	})

	// Each grant writes an owner string of its own: a request of an earlier
	// grant delivered late (here its release) never frees a later one, in
	// Jaeger mode too, where no fencing token tells them apart. Jaeger's lock
	// writes one owner string for every grant, so there it would.
	t.Run("LateRequestOfAnEarlierGrant", func(t *testing.T) {
		jl, _ := cassandra.NewJaegerLock(js, "a")
		r := resource(t, "r")
		ctx := testCtx(t)
		if ok, err := jl.Acquire(r, 10*time.Second); !ok || err != nil {
			t.Fatalf("Acquire: %v %v", ok, err)
		}
		first, err := js.Get(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := jl.Forfeit(r); !ok || err != nil {
			t.Fatalf("Forfeit: %v %v", ok, err)
		}
		if ok, err := jl.Acquire(r, 10*time.Second); !ok || err != nil {
			t.Fatalf("second Acquire: %v %v", ok, err)
		}
		// The first grant's release, delivered now.
		if err := js.Release(ctx, r, first.Owner, first.Token); !errors.Is(err, tenure.ErrLeaseLost) {
			t.Fatalf("late release of the first grant: %v; want ErrLeaseLost", err)
		}
		second, err := js.Get(ctx, r)
		if err != nil || second.Owner == first.Owner || !strings.HasPrefix(second.Owner, jl.Owner()+".") {
			t.Fatalf("after the late release: %+v, %v; want the second grant of %s", second, err, jl.Owner())
		}
		if ok, err := jl.Acquire(r, 10*time.Second); !ok || err != nil {
			t.Fatalf("renewal of the second grant: %v %v", ok, err)
		}
		jl.Forfeit(r)
	})

	t.Run("ZeroTTLIsJaegersDefault", func(t *testing.T) {
		jl, _ := cassandra.NewJaegerLock(js, "a")
		r := resource(t, "r")
		if ok, err := jl.Acquire(r, 0); !ok || err != nil {
			t.Fatalf("Acquire with TTL 0: %v %v", ok, err)
		}
		if _, ttl := serialJaegerOwner(t, js.Session(), table, r); ttl < 60 || ttl > 61 {
			t.Fatalf("TTL(owner) = %d; want the 60 s default plus one second", ttl)
		}
		jl.Forfeit(r)
	})

	t.Run("FractionalTTLRoundsUp", func(t *testing.T) {
		jl, _ := cassandra.NewJaegerLock(js, "a")
		r := resource(t, "r")
		if ok, err := jl.Acquire(r, 1900*time.Millisecond); !ok || err != nil {
			t.Fatalf("Acquire: %v %v", ok, err)
		}
		// ⌈1.9⌉ + 1 = 3 s; Jaeger's own client would write int(1.9) = 1.
		if _, ttl := serialJaegerOwner(t, js.Session(), table, r); ttl != 3 && ttl != 2 {
			t.Fatalf("TTL(owner) = %d; want 3 (2 if a second boundary passed)", ttl)
		}
		jc := newJaegerClient(js.Session(), "jaeger")
		r2 := resource(t, "r2")
		if ok, err := jc.Acquire(r2, 1900*time.Millisecond); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if _, ttl := serialJaegerOwner(t, js.Session(), table, r2); ttl > 1 {
			t.Fatalf("Jaeger's statements wrote TTL %d; expected the truncated 1", ttl)
		}
		jl.Forfeit(r)
	})

	t.Run("LossIsLoggedAndAnsweredAsJaegersLock", func(t *testing.T) {
		var logs syncBuffer
		jl, _ := cassandra.NewJaegerLock(js, "a", cassandra.WithJaegerLockLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		r := resource(t, "r")
		if ok, err := jl.Acquire(r, time.Second); !ok || err != nil {
			t.Fatalf("Acquire: %v %v", ok, err)
		}
		// The lease expires (store TTL 2 s) and another owner takes it.
		jc := newJaegerClient(js.Session(), "jaeger")
		waitUntil(t, 5*time.Second, func() bool { ok, _ := jc.Acquire(r, 10*time.Second); return ok })
		// Jaeger's lock answers false, nil here (its insert finds another
		// owner); so does the adapter, and it logs the loss.
		if ok, err := jl.Acquire(r, time.Second); ok || err != nil {
			t.Fatalf("renewal after the lease was taken: %v, %v; want false, nil (held by another)", ok, err)
		}
		if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "lease lost") || !strings.Contains(l, "jaeger") {
			t.Fatalf("the loss is not logged with its holder: %q", l)
		}
		// The next call is a plain attempt: held by the Jaeger client, and
		// nothing more to log.
		n := strings.Count(logs.String(), "lease lost")
		if ok, err := jl.Acquire(r, time.Second); ok || err != nil {
			t.Fatalf("fresh attempt: %v, %v; want false, nil (held)", ok, err)
		}
		if m := strings.Count(logs.String(), "lease lost"); m != n {
			t.Fatalf("a plain refused attempt logged a loss")
		}
		if ok, err := jl.Forfeit(r); ok || !errors.Is(err, tenure.ErrLeaseLost) {
			t.Fatalf("Forfeit of a lease it does not hold: %v, %v; want ErrLeaseLost", ok, err)
		}
		jc.Forfeit(r)
	})

	t.Run("ExpiredLeaseIsTakenAgainAsJaegersLockDoes", func(t *testing.T) {
		ns, _ := stores(t)
		for name, st := range map[string]*cassandra.Store{"native": ns, "jaeger": js} {
			var logs syncBuffer
			jl, _ := cassandra.NewJaegerLock(st, "a", cassandra.WithJaegerLockLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			r := resource(t, "r")
			if ok, err := jl.Acquire(r, time.Second); !ok || err != nil {
				t.Fatalf("%s: Acquire: %v %v", name, ok, err)
			}
			tok1, _ := jl.Token(r)
			// The lease expires in the store (store TTL 2 s) while nobody
			// takes it; Jaeger's lock inserts again and answers true.
			waitUntil(t, 5*time.Second, func() bool {
				_, err := st.Get(context.Background(), r)
				return errors.Is(err, tenure.ErrNotHeld)
			})
			if ok, err := jl.Acquire(r, time.Second); !ok || err != nil {
				t.Fatalf("%s: renewal after the lease expired: %v, %v; want true, nil (taken again)", name, ok, err)
			}
			tok2, _ := jl.Token(r)
			if name == "native" && tok2 <= tok1 {
				t.Fatalf("tokens %d then %d: the new lease needs a new token", tok1, tok2)
			}
			if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "acquired again") {
				t.Fatalf("%s: the loss is not logged: %q", name, l)
			}
			if ok, err := jl.Forfeit(r); !ok || err != nil {
				t.Fatalf("%s: Forfeit: %v %v", name, ok, err)
			}
		}
	})

	t.Run("SameIDExcludes", func(t *testing.T) {
		a, _ := cassandra.NewJaegerLock(js, "same-host")
		b, _ := cassandra.NewJaegerLock(js, "same-host")
		r := resource(t, "r")
		if ok, err := a.Acquire(r, time.Minute); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ok, err := b.Acquire(r, time.Minute); ok || err != nil {
			t.Fatalf("second lock with the same id: %v, %v; want false, nil", ok, err)
		}
		a.Forfeit(r)
	})

	t.Run("NativeStoreGivesTokens", func(t *testing.T) {
		ns, _ := stores(t)
		jl, _ := cassandra.NewJaegerLock(ns, "a")
		r := resource(t, "r")
		if ok, err := jl.Acquire(r, time.Minute); !ok || err != nil {
			t.Fatal(ok, err)
		}
		tok1, _ := jl.Token(r)
		if ok, err := jl.Forfeit(r); !ok || err != nil {
			t.Fatal(ok, err)
		}
		jl.Acquire(r, time.Minute)
		tok2, _ := jl.Token(r)
		if tok1 == 0 || tok2 <= tok1 {
			t.Fatalf("tokens %d then %d", tok1, tok2)
		}
		jl.Forfeit(r)
	})
}

func waitUntil(t *testing.T, limit time.Duration, f func() bool) {
	t.Helper()
	end := time.Now().Add(limit)
	for !f() {
		if time.Now().After(end) {
			t.Fatalf("condition not met within %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// jaegerLockInterface has the method set of Jaeger's lock interface
// (jaegertracing/jaeger, internal/distributedlock/interface.go, Lock).
type jaegerLockInterface interface {
	Acquire(resource string, ttl time.Duration) (acquired bool, err error)
	Forfeit(resource string) (forfeited bool, err error)
}

// JaegerLock, and this file's stand-in for Jaeger's own Cassandra lock,
// satisfy Jaeger's lock interface.
var (
	_ jaegerLockInterface = (*cassandra.JaegerLock)(nil)
	_ jaegerLockInterface = (*jaegerClient)(nil)
)

// jaegerLoop is a participant loop shaped like Jaeger's
// DistributedElectionParticipant (internal/leaderelection): each attempt
// calls Acquire with the follower interval as the TTL; a nil error sets
// IsLeader to the answer, an error leaves it as it was; the next attempt
// comes after the leader interval while leading and after the follower
// interval otherwise. Stopping it forfeits the lock when leading, as
// Jaeger's Close does since its 2026 fix.
type jaegerLoop struct {
	lock             jaegerLockInterface
	resource         string
	leader, follower time.Duration

	isLeader atomic.Bool
	attempts chan attempt // every attempt's outcome, in order
	stop     chan struct{}
	done     chan struct{}
}

type attempt struct {
	end      time.Time // when IsLeader took the attempt's outcome
	acquired bool
	err      error
	leader   bool // IsLeader after the attempt
}

func startJaegerLoop(lock jaegerLockInterface, resource string, leader, follower time.Duration) *jaegerLoop {
	j := &jaegerLoop{lock: lock, resource: resource, leader: leader, follower: follower,
		attempts: make(chan attempt, 1000), stop: make(chan struct{}), done: make(chan struct{})}
	go j.run()
	return j
}

func (j *jaegerLoop) run() {
	defer close(j.done)
	for {
		acquired, err := j.lock.Acquire(j.resource, j.follower)
		if err == nil {
			j.isLeader.Store(acquired)
		}
		leading := j.isLeader.Load()
		j.attempts <- attempt{end: time.Now(), acquired: acquired, err: err, leader: leading}
		next := j.follower
		if leading {
			next = j.leader
		}
		t := time.NewTimer(next)
		select {
		case <-t.C:
		case <-j.stop:
			t.Stop()
			return
		}
	}
}

func (j *jaegerLoop) close() {
	close(j.stop)
	<-j.done
	if j.isLeader.Swap(false) {
		j.lock.Forfeit(j.resource)
	}
}

// next returns the loop's next attempt.
func (j *jaegerLoop) next(t *testing.T) attempt {
	t.Helper()
	select {
	case a := <-j.attempts:
		return a
	case <-time.After(4 * j.follower):
		t.Fatalf("no attempt within %v", 4*j.follower)
	}
	panic("unreachable")
}

// TestJaegerParticipantStepsDownAtNextTick: a loop shaped like Jaeger's
// participant, over tenure's JaegerLock, steps down at its first attempt
// after another owner took the lock, as over Jaeger's own lock. Before,
// JaegerLock answered that attempt with (false, ErrLeaseLost); Jaeger's loop
// keeps IsLeader on an error, so it stepped down one leader interval later.
//
// Each round waits for one of the leader's renewals, then, right after it,
// frees the leader's lease as an operator would (a conditional delete
// naming the leader) and has another owner take it. The step-down time runs
// from the moment the other owner's grant was confirmed to the moment the
// loop's IsLeader turned false.
func TestJaegerParticipantStepsDownAtNextTick(t *testing.T) {
	native, js := stores(t)
	const leaderEvery, followerEvery = time.Second, 2 * time.Second
	const rounds = 3
	type variant struct {
		name  string
		store *cassandra.Store // for the other owner's grant
		// lock returns the participant's lock and a function that frees
		// its lease as an operator would.
		lock func(t *testing.T, r string, logs *syncBuffer) (jaegerLockInterface, func() error)
	}
	tenureLock := func(st *cassandra.Store) func(t *testing.T, r string, logs *syncBuffer) (jaegerLockInterface, func() error) {
		return func(t *testing.T, r string, logs *syncBuffer) (jaegerLockInterface, func() error) {
			jl, err := cassandra.NewJaegerLock(st, "collector-1", cassandra.WithJaegerLockLogger(slog.New(slog.NewTextHandler(logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			return jl, func() error {
				// An operator frees whatever grant holds it.
				rec, err := st.Get(context.Background(), r)
				if err != nil {
					return err
				}
				return st.Release(context.Background(), r, rec.Owner, rec.Token)
			}
		}
	}
	for _, v := range []variant{
		{"JaegerLock on a Jaeger-mode store", js, tenureLock(js)},
		{"JaegerLock on a native store", native, tenureLock(native)},
		{"Jaeger's own statements", js, func(t *testing.T, r string, _ *syncBuffer) (jaegerLockInterface, func() error) {
			id := "jaeger-collector-" + randHex(4)
			return newJaegerClient(js.Session(), id), func() error {
				_, err := newJaegerClient(js.Session(), id).Forfeit(r)
				return err
			}
		}},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			r := resource(t, "sampling")
			var logs syncBuffer
			lock, free := v.lock(t, r, &logs)
			other, err := cassandra.NewJaegerLock(v.store, "collector-2")
			if err != nil {
				t.Fatal(err)
			}
			loop := startJaegerLoop(lock, r, leaderEvery, followerEvery)
			defer loop.close()
			var figures []time.Duration
			for round := 0; len(figures) < rounds; round++ {
				if round >= 2*rounds {
					t.Fatalf("only %d of %d rounds had a clean takeover", len(figures), rounds)
				}
				// Wait for a renewal, then take the lock right after it.
				for a := loop.next(t); !(a.leader && a.acquired); a = loop.next(t) {
				}
				if err := free(); err != nil {
					t.Fatalf("freeing the leader's lease: %v", err)
				}
				ok, err := other.Acquire(r, followerEvery)
				taken := time.Now()
				if err != nil || !ok {
					t.Logf("round %d: the other owner did not get the lock (%v, %v); again", round, ok, err)
					continue
				}
				a := loop.next(t)
				if a.end.Before(taken) {
					t.Fatalf("round %d: an attempt ended during the takeover", round)
				}
				if a.leader {
					// Two attempts: what Jaeger's loop did over the old
					// adapter, which answered (false, ErrLeaseLost).
					b := loop.next(t)
					t.Fatalf("round %d: still leader after the first attempt after the takeover (answered %v, %v); stepped down at attempt 2 (%v, %v) after %v",
						round, a.acquired, a.err, b.acquired, b.err, b.end.Sub(taken))
				}
				if a.err != nil {
					t.Fatalf("round %d: the attempt failed: %v", round, a.err)
				}
				took := a.end.Sub(taken)
				if took >= 2*leaderEvery {
					t.Fatalf("round %d: stepped down %v after the takeover; want within 2 ticks (%v)", round, took, 2*leaderEvery)
				}
				figures = append(figures, took)
				if ok, err := other.Forfeit(r); !ok || err != nil {
					t.Fatalf("round %d: the other owner's forfeit: %v %v", round, ok, err)
				}
				// The loop, following, takes the lock again at its next
				// attempt, one follower interval later.
				for a := loop.next(t); !a.leader; a = loop.next(t) {
				}
			}
			t.Logf("%s: leader interval %v, follower interval (TTL) %v: stepped down at the first attempt after the takeover, %v after it", v.name, leaderEvery, followerEvery, figures)
			if _, ok := lock.(*cassandra.JaegerLock); ok && strings.Count(logs.String(), "lease lost") < rounds {
				t.Fatalf("the losses are not logged: %q", logs.String())
			}
		})
	}
}
