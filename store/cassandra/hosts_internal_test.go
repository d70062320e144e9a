package cassandra

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

func testHost(t *testing.T, id string) *gocql.HostInfo {
	t.Helper()
	h, err := gocql.NewTestHostInfoFromRow(map[string]any{"host_id": id, "peer": "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

const (
	idA = "00000000-0000-0000-0000-00000000000a"
	idB = "00000000-0000-0000-0000-00000000000b"
	idC = "00000000-0000-0000-0000-00000000000c"
)

// fakeClock is the tracker's clock in tests. It is safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newFakeTracker() (*stallTracker, *fakeClock) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	tr := newStallTracker(stallAfter)
	tr.now = c.now
	return tr, c
}

func start(tr *stallTracker, h *gocql.HostInfo) gocql.StreamObserverContext {
	s := tr.StreamContext(context.Background())
	s.StreamStarted(gocql.ObservedStream{Host: h})
	return s
}

// A node is stalled when a request has been unanswered for longer than
// stallAfter and the node answered nothing else meanwhile; an answer or a
// closed connection ends it.
func TestStallTracker(t *testing.T) {
	tr, clock := newFakeTracker()
	a, b := testHost(t, idA), testHost(t, idB)
	if tr.stalled(idA) {
		t.Fatal("a node never used is stalled")
	}
	first := start(tr, a)
	clock.add(stallAfter)
	if tr.stalled(idA) {
		t.Fatal("stalled after exactly stallAfter")
	}
	clock.add(time.Millisecond)
	if !tr.stalled(idA) {
		t.Fatal("a request unanswered for longer than stallAfter: not stalled")
	}
	// Another node's answers change nothing for A.
	start(tr, b).StreamFinished(gocql.ObservedStream{Host: b})
	if !tr.stalled(idA) || tr.stalled(idB) {
		t.Fatalf("A stalled %v, B stalled %v; want true, false", tr.stalled(idA), tr.stalled(idB))
	}
	// A answers another request: a slow request on a node that answers is
	// no stall, until the node is silent for stallAfter again.
	start(tr, a).StreamFinished(gocql.ObservedStream{Host: a})
	if tr.stalled(idA) {
		t.Fatal("stalled right after an answer")
	}
	clock.add(stallAfter + time.Millisecond)
	if !tr.stalled(idA) {
		t.Fatal("silent again for longer than stallAfter with a request pending: not stalled")
	}
	first.StreamFinished(gocql.ObservedStream{Host: a})
	if tr.stalled(idA) {
		t.Fatal("stalled with nothing pending")
	}
	// A connection that closes abandons its requests: nothing is pending.
	s := start(tr, a)
	clock.add(time.Second)
	if !tr.stalled(idA) {
		t.Fatal("not stalled")
	}
	s.StreamAbandoned(gocql.ObservedStream{Host: a})
	if tr.stalled(idA) {
		t.Fatal("stalled after its only request was abandoned")
	}
	// The oldest pending request counts.
	old := start(tr, a)
	clock.add(200 * time.Millisecond)
	recent := start(tr, a)
	clock.add(100 * time.Millisecond)
	if !tr.stalled(idA) {
		t.Fatal("the oldest request is 300 ms old: not stalled")
	}
	old.StreamFinished(gocql.ObservedStream{Host: a})
	clock.add(200 * time.Millisecond)
	if tr.stalled(idA) {
		t.Fatal("stalled 200 ms after an answer")
	}
	clock.add(100 * time.Millisecond)
	if !tr.stalled(idA) {
		t.Fatal("the recent request is 400 ms old, the last answer 300 ms: not stalled")
	}
	recent.StreamFinished(gocql.ObservedStream{Host: a})
	// Streams that never started (the driver may drop the context) and
	// hosts without an id do not count.
	tr.StreamContext(context.Background()).StreamFinished(gocql.ObservedStream{Host: a})
	start(tr, nil)
	if tr.stalled(idA) || tr.stalled("") {
		t.Fatal("stalled by streams that never started")
	}
}

// listPolicy is a host selection policy that returns its hosts in order.
type listPolicy struct {
	gocql.HostSelectionPolicy
	hosts []*gocql.HostInfo
}

func (p listPolicy) Pick(gocql.ExecutableStatement) gocql.NextHost {
	i := 0
	return func() gocql.SelectedHost {
		if i == len(p.hosts) {
			return nil
		}
		i++
		return selected{p.hosts[i-1]}
	}
}

func (p listPolicy) HostUp(*gocql.HostInfo) {}

type selected struct{ h *gocql.HostInfo }

func (s selected) Info() *gocql.HostInfo { return s.h }
func (s selected) Mark(error)            {}

func picked(p gocql.HostSelectionPolicy) []string {
	var ids []string
	next := p.Pick(nil)
	for h := next(); h != nil; h = next() {
		ids = append(ids, h.Info().HostID()[len(idA)-1:])
	}
	return ids
}

// The policy keeps the wrapped policy's order but tries stalled nodes last.
func TestStallAwarePolicy(t *testing.T) {
	tr, clock := newFakeTracker()
	a, b, c := testHost(t, idA), testHost(t, idB), testHost(t, idC)
	p := &stallAwarePolicy{HostSelectionPolicy: listPolicy{hosts: []*gocql.HostInfo{a, b, c}}, t: tr}
	check := func(want ...string) {
		t.Helper()
		if got := picked(p); !slices.Equal(got, want) {
			t.Fatalf("picked %v, want %v", got, want)
		}
	}
	check("a", "b", "c")
	sa := start(tr, a)
	clock.add(time.Second)
	check("b", "c", "a")
	sc := start(tr, c)
	clock.add(time.Second)
	check("b", "a", "c")
	sb := start(tr, b)
	clock.add(time.Second)
	check("a", "b", "c") // every node stalled: the wrapped order
	sa.StreamFinished(gocql.ObservedStream{Host: a})
	check("a", "b", "c")
	sb.StreamFinished(gocql.ObservedStream{Host: b})
	check("a", "b", "c")
	clock.add(time.Second)
	check("a", "b", "c")
	sc.StreamAbandoned(gocql.ObservedStream{Host: c})
	check("a", "b", "c")

	// A node that has just come (back) up is tried after the warm ones,
	// before those that stopped answering, for warmUp.
	p.HostUp(b)
	check("a", "c", "b")
	sa = start(tr, a)
	clock.add(time.Second)
	check("c", "b", "a")
	p.HostUp(a)
	p.HostUp(c)
	check("b", "c", "a") // every node warming: the stalled a last
	sa.StreamFinished(gocql.ObservedStream{Host: a})
	check("a", "b", "c")
	clock.add(warmUp)
	check("a", "b", "c")
	p.HostUp(c)
	check("a", "b", "c")
	clock.add(warmUp - time.Millisecond)
	check("a", "b", "c")
	p.HostUp(a)
	clock.add(warmUp / 2)
	check("b", "c", "a")
	clock.add(warmUp / 2)
	check("a", "b", "c")
}

// The store installs the tracker as the driver's stream observer and its
// policy around round robin; a ClusterHook's observer is called too, and a
// ClusterHook's policy replaces the store's.
func TestStallPolicyWiring(t *testing.T) {
	r, err := Config{Hosts: []string{"127.0.0.1"}}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	c, stalls, err := r.cluster()
	if err != nil {
		t.Fatal(err)
	}
	p, ok := c.PoolConfig.HostSelectionPolicy.(*stallAwarePolicy)
	if !ok {
		t.Fatalf("policy %T, want *stallAwarePolicy", c.PoolConfig.HostSelectionPolicy)
	}
	if c.StreamObserver != gocql.StreamObserver(p.t) || p.t != stalls {
		t.Fatalf("stream observer %T is not the policy's tracker", c.StreamObserver)
	}

	var theirs countingObserver
	r.ClusterHook = func(cc *gocql.ClusterConfig) { cc.StreamObserver = &theirs }
	c, tr, err := r.cluster()
	if err != nil {
		t.Fatal(err)
	}
	tr.after = 0
	a := testHost(t, idA)
	s := c.StreamObserver.StreamContext(context.Background())
	s.StreamStarted(gocql.ObservedStream{Host: a})
	time.Sleep(time.Millisecond)
	if !tr.stalled(idA) || theirs.started != 1 {
		t.Fatalf("after a start: stalled %v, hook's observer saw %d starts", tr.stalled(idA), theirs.started)
	}
	s.StreamFinished(gocql.ObservedStream{Host: a})
	if tr.stalled(idA) || theirs.finished != 1 {
		t.Fatalf("after the answer: stalled %v, hook's observer saw %d answers", tr.stalled(idA), theirs.finished)
	}

	rr := gocql.RoundRobinHostPolicy()
	r.ClusterHook = func(cc *gocql.ClusterConfig) { cc.PoolConfig.HostSelectionPolicy = rr }
	if c, tr, err = r.cluster(); err != nil {
		t.Fatal(err)
	}
	if c.PoolConfig.HostSelectionPolicy != rr || c.StreamObserver != gocql.StreamObserver(tr) {
		t.Fatal("the hook's policy was not kept, or the tracker is not the stream observer")
	}
}

type countingObserver struct{ started, finished, abandoned int }

func (o *countingObserver) StreamContext(context.Context) gocql.StreamObserverContext { return o }
func (o *countingObserver) StreamStarted(gocql.ObservedStream)                        { o.started++ }
func (o *countingObserver) StreamFinished(gocql.ObservedStream)                       { o.finished++ }
func (o *countingObserver) StreamAbandoned(gocql.ObservedStream)                      { o.abandoned++ }

// A conditional write takes at most Timeout and three quarters of the time
// left; from half the time left, it is given up when its coordinator stopped
// answering. Reads speculate within a quarter of the time left.
func TestWriteBounds(t *testing.T) {
	s := &Store{cfg: resolved{Config: Config{Timeout: 10 * time.Second}}}
	if hard, soft := s.writeBounds(context.Background()); hard != 10*time.Second || soft != 0 {
		t.Fatalf("no deadline: %v, %v; want 10s (the timeout), no soft bound", hard, soft)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	if hard, soft := s.writeBounds(ctx); hard > 3*time.Second || hard < 2900*time.Millisecond ||
		soft > 2*time.Second || soft < 1900*time.Millisecond {
		t.Fatalf("4 s left: %v, %v; want about 3s and 2s", hard, soft)
	}
	s.cfg.Timeout = time.Second
	if hard, soft := s.writeBounds(ctx); hard != time.Second || soft != 0 {
		t.Fatalf("4 s left, timeout 1 s: %v, %v; want 1s, no soft bound", hard, soft)
	}
	// Reads: speculation within a quarter of the time left.
	s.speculate = &gocql.SimpleSpeculativeExecution{NumAttempts: 1, TimeoutDelay: 2500 * time.Millisecond}
	if d := s.speculation(context.Background()).Delay(); d != 2500*time.Millisecond {
		t.Fatalf("no deadline: speculative delay %v, want 2.5s", d)
	}
	if d := s.speculation(ctx).Delay(); d > time.Second || d < 950*time.Millisecond {
		t.Fatalf("4 s left: speculative delay %v, want about 1s", d)
	}
	short, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	if d := s.speculation(short).Delay(); d != minSpeculationDelay {
		t.Fatalf("1 ms left: speculative delay %v, want %v", d, minSpeculationDelay)
	}
}

// boundWrite gives a write up from half the time left when its coordinator
// has been silent for a quarter of the time left, and lets it run to three
// quarters otherwise. The tracker's clock is
// fake, so whether a node stopped answering does not depend on timing.
func TestBoundWrite(t *testing.T) {
	tr, clock := newFakeTracker()
	s := &Store{cfg: resolved{Config: Config{Timeout: 10 * time.Second}}, stalls: tr}
	a := testHost(t, idA)
	run := func(t *testing.T, send bool, silentFor time.Duration) (err error, took time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
		defer cancel()
		start := time.Now()
		qctx, explain, release := s.boundWrite(ctx)
		defer release()
		if send {
			st := tr.StreamContext(qctx) // as the driver does, with the write's context
			st.StreamStarted(gocql.ObservedStream{Host: a})
			defer st.StreamFinished(gocql.ObservedStream{Host: a})
			clock.add(silentFor)
		}
		<-qctx.Done()
		return explain(qctx.Err()), time.Since(start)
	}
	t.Run("Frozen", func(t *testing.T) {
		err, took := run(t, true, time.Second)
		if !errors.Is(err, errCoordinatorStalled) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), idA) {
			t.Fatalf("err %v after %v; want the coordinator %s stopped answering", err, took, idA)
		}
	})
	t.Run("NotSentYet", func(t *testing.T) {
		// No coordinator yet (the driver is waiting for a connection or a
		// statement to be prepared): the second bound.
		if err, took := run(t, false, 0); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errCoordinatorStalled) {
			t.Fatalf("err %v after %v; want the deadline", err, took)
		}
	})
	t.Run("BrieflySilent", func(t *testing.T) {
		// Silent for less than a quarter of the time left (200 ms of 800):
		// a hiccup, not a frozen node.
		if err, took := run(t, true, 150*time.Millisecond); errors.Is(err, errCoordinatorStalled) {
			t.Fatalf("err %v after %v; want the deadline", err, took)
		}
	})
	t.Run("Answering", func(t *testing.T) {
		err, took := run(t, true, 0) // the clock stands still: never stalled
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errCoordinatorStalled) || took < 550*time.Millisecond {
			t.Fatalf("err %v after %v; want the deadline at three quarters of 800ms", err, took)
		}
	})
}
