package cassandra

import (
	"context"
	"slices"
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

// fakeClock is the tracker's clock in tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
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
}

// The store installs the tracker as the driver's stream observer and its
// policy around round robin; a ClusterHook's observer is called too, and a
// ClusterHook's policy replaces the store's.
func TestStallPolicyWiring(t *testing.T) {
	r, err := Config{Hosts: []string{"127.0.0.1"}}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.cluster()
	if err != nil {
		t.Fatal(err)
	}
	p, ok := c.PoolConfig.HostSelectionPolicy.(*stallAwarePolicy)
	if !ok {
		t.Fatalf("policy %T, want *stallAwarePolicy", c.PoolConfig.HostSelectionPolicy)
	}
	if c.StreamObserver != gocql.StreamObserver(p.t) {
		t.Fatalf("stream observer %T is not the policy's tracker", c.StreamObserver)
	}

	var theirs countingObserver
	r.ClusterHook = func(cc *gocql.ClusterConfig) { cc.StreamObserver = &theirs }
	c, err = r.cluster()
	if err != nil {
		t.Fatal(err)
	}
	tr := c.PoolConfig.HostSelectionPolicy.(*stallAwarePolicy).t
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
	if c, err = r.cluster(); err != nil {
		t.Fatal(err)
	}
	if c.PoolConfig.HostSelectionPolicy != rr {
		t.Fatal("the hook's policy was not kept")
	}
}

type countingObserver struct{ started, finished, abandoned int }

func (o *countingObserver) StreamContext(context.Context) gocql.StreamObserverContext { return o }
func (o *countingObserver) StreamStarted(gocql.ObservedStream)                        { o.started++ }
func (o *countingObserver) StreamFinished(gocql.ObservedStream)                       { o.finished++ }
func (o *countingObserver) StreamAbandoned(gocql.ObservedStream)                      { o.abandoned++ }

// A conditional write is bounded by Timeout and by half the time left.
func TestWriteBound(t *testing.T) {
	s := &Store{cfg: resolved{Config: Config{Timeout: 10 * time.Second}}}
	if got := s.writeBound(context.Background()); got != 10*time.Second {
		t.Fatalf("no deadline: %v, want the timeout 10s", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if got := s.writeBound(ctx); got > 1500*time.Millisecond || got < 1400*time.Millisecond {
		t.Fatalf("3 s left: %v, want about 1.5s", got)
	}
	s.cfg.Timeout = time.Second
	if got := s.writeBound(ctx); got != time.Second {
		t.Fatalf("3 s left, timeout 1 s: %v, want 1s", got)
	}
	// Reads: speculation within a quarter of the time left.
	s.speculate = &gocql.SimpleSpeculativeExecution{NumAttempts: 1, TimeoutDelay: 2500 * time.Millisecond}
	if d := s.speculation(context.Background()).Delay(); d != 2500*time.Millisecond {
		t.Fatalf("no deadline: speculative delay %v, want 2.5s", d)
	}
	if d := s.speculation(ctx).Delay(); d > 750*time.Millisecond || d < 700*time.Millisecond {
		t.Fatalf("3 s left: speculative delay %v, want about 750ms", d)
	}
	short, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	if d := s.speculation(short).Delay(); d != minSpeculationDelay {
		t.Fatalf("1 ms left: speculative delay %v, want %v", d, minSpeculationDelay)
	}
}
