package cassandra_test

import (
	"errors"
	"math/rand/v2"
	"sort"
	"sync"
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

	t.Run("LossIsReported", func(t *testing.T) {
		jl, _ := cassandra.NewJaegerLock(js, "a")
		r := resource(t, "r")
		if ok, err := jl.Acquire(r, time.Second); !ok || err != nil {
			t.Fatalf("Acquire: %v %v", ok, err)
		}
		// The lease expires (store TTL 2 s) and another owner takes it.
		jc := newJaegerClient(js.Session(), "jaeger")
		waitUntil(t, 5*time.Second, func() bool { ok, _ := jc.Acquire(r, 10*time.Second); return ok })
		ok, err := jl.Acquire(r, time.Second)
		if ok || !errors.Is(err, tenure.ErrLeaseLost) {
			t.Fatalf("renewal after the lease was taken: %v, %v; want false and ErrLeaseLost", ok, err)
		}
		// The next call is a fresh attempt: held by the Jaeger client.
		if ok, err := jl.Acquire(r, time.Second); ok || err != nil {
			t.Fatalf("fresh attempt: %v, %v; want false, nil (held)", ok, err)
		}
		if ok, err := jl.Forfeit(r); ok || !errors.Is(err, tenure.ErrLeaseLost) {
			t.Fatalf("Forfeit of a lease it does not hold: %v, %v; want ErrLeaseLost", ok, err)
		}
		jc.Forfeit(r)
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
