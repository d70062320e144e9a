package cassandra

import (
	"container/list"
	"context"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// stallAfter is how long a node may leave a request unanswered, while
// answering nothing else, before the store tries it last. A healthy node
// answers every connection's heartbeat within milliseconds; a long GC pause
// of a healthy node that trips it only moves requests to the other nodes
// while it lasts.
const stallAfter = 250 * time.Millisecond

// A node that stops answering without closing its connections (a long GC
// pause, a hung disk, a frozen VM: SIGSTOP) keeps its place in the driver's
// round robin until its connections fail their heartbeats or the other nodes'
// gossip reports it down, which takes 10 s or more; every request sent to it
// meanwhile waits out its whole timeout. gocql v2.1.2 has no policy that
// avoids such a node: the host-pool policy (package hostpool) needs another
// module, keys hosts by IP address, and the driver marks an attempt that
// ended with the caller's context as a success (Mark(nil)).
//
// So the store watches every request on every connection (the driver's
// StreamObserver: started, answered, abandoned when the connection closed)
// and wraps its round-robin policy: a node is stalled when a request to it
// has been unanswered for longer than stallAfter and the node answered
// nothing else in that time. Stalled nodes are tried last, after every node
// that answers, in the round-robin order; nothing else changes, so with every
// node stalled (or when the cluster is slow everywhere) the order is plain
// round robin. A stalled node is back in turn the moment it answers anything.
// Connections send a heartbeat (OPTIONS) every second, so an idle session
// notices a frozen node too. Nodes that have just come back up (a restart)
// are tried after the others for warmUp, before stalled ones.
//
// The tracker also tells the store which node a conditional write went to
// and whether that node still answers (writeProbe, Store.boundWrite), so
// that a write is given up early only when its coordinator went silent.

// stallTracker follows the requests in flight per node. It is safe for
// concurrent use.
type stallTracker struct {
	after time.Duration
	now   func() time.Time // time.Now; tests replace it
	mu    sync.Mutex
	nodes map[string]*nodeStreams // by host id
}

// nodeStreams are one node's requests in flight, oldest first, and the time
// of its last answer.
type nodeStreams struct {
	pending    list.List // of time.Time: when each unanswered request was sent
	lastAnswer time.Time
}

func newStallTracker(after time.Duration) *stallTracker {
	return &stallTracker{after: after, now: time.Now, nodes: map[string]*nodeStreams{}}
}

// stalled reports whether the node with this id has left a request
// unanswered for longer than t.after and answered nothing since t.after ago.
func (t *stallTracker) stalled(id string) bool { return t.silent(id) > t.after }

// silent returns for how long the node with this id has had a request
// unanswered and answered nothing: the time since its oldest unanswered
// request was sent or since its last answer, whichever is later; 0 when
// nothing is pending.
func (t *stallTracker) silent(id string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.nodes[id]
	if n == nil || n.pending.Len() == 0 {
		return 0
	}
	since := n.pending.Front().Value.(time.Time)
	if n.lastAnswer.After(since) {
		since = n.lastAnswer
	}
	return t.now().Sub(since)
}

// StreamContext implements gocql.StreamObserver.
func (t *stallTracker) StreamContext(ctx context.Context) gocql.StreamObserverContext {
	s := &trackedStream{t: t}
	if ctx != nil {
		s.probe, _ = ctx.Value(probeKey{}).(*writeProbe)
	}
	return s
}

// trackedStream is one request: StreamStarted, then StreamFinished (an
// answer) or StreamAbandoned (the connection closed first), each at most
// once (the driver's guarantee).
type trackedStream struct {
	t     *stallTracker
	id    string
	el    *list.Element
	probe *writeProbe // the conditional write it carries, if any
}

// writeProbe learns which node coordinates a conditional write: the store
// puts it in the write's context, which the driver passes to StreamContext.
type writeProbe struct {
	mu sync.Mutex
	id string
}

type probeKey struct{}

func (p *writeProbe) set(id string) {
	p.mu.Lock()
	p.id = id
	p.mu.Unlock()
}

// coordinator returns the host id of the node the write was sent to, once
// it was sent.
func (p *writeProbe) coordinator() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.id, p.id != ""
}

func (s *trackedStream) StreamStarted(o gocql.ObservedStream) {
	if o.Host == nil {
		return
	}
	id := o.Host.HostID()
	t := s.t
	t.mu.Lock()
	n := t.nodes[id]
	if n == nil {
		n = &nodeStreams{}
		t.nodes[id] = n
	}
	s.id, s.el = id, n.pending.PushBack(t.now())
	t.mu.Unlock()
	if s.probe != nil {
		s.probe.set(id)
	}
}

func (s *trackedStream) StreamFinished(gocql.ObservedStream) { s.end(true) }

func (s *trackedStream) StreamAbandoned(gocql.ObservedStream) { s.end(false) }

func (s *trackedStream) end(answered bool) {
	if s.el == nil {
		return
	}
	t := s.t
	t.mu.Lock()
	if n := t.nodes[s.id]; n != nil {
		n.pending.Remove(s.el)
		if answered {
			n.lastAnswer = t.now()
		}
	}
	t.mu.Unlock()
	s.el = nil
}

// chainObservers calls a, then b.
type chainObservers struct{ a, b gocql.StreamObserver }

func (c chainObservers) StreamContext(ctx context.Context) gocql.StreamObserverContext {
	x, y := c.a.StreamContext(ctx), c.b.StreamContext(ctx)
	switch {
	case x == nil:
		return y
	case y == nil:
		return x
	}
	return chainedStream{x, y}
}

type chainedStream struct{ a, b gocql.StreamObserverContext }

func (c chainedStream) StreamStarted(o gocql.ObservedStream) {
	c.a.StreamStarted(o)
	c.b.StreamStarted(o)
}

func (c chainedStream) StreamFinished(o gocql.ObservedStream) {
	c.a.StreamFinished(o)
	c.b.StreamFinished(o)
}

func (c chainedStream) StreamAbandoned(o gocql.ObservedStream) {
	c.a.StreamAbandoned(o)
	c.b.StreamAbandoned(o)
}

// warmUp is how long a node that has just come (back) up is tried after
// the others. A restarted Cassandra node is slow for a while (a cold JVM and
// caches, hints to replay): on the test machine its first 15 s had pauses of
// a second in which writes it coordinated timed out, while the other two
// nodes served every request.
const warmUp = 30 * time.Second

// stallAwarePolicy is a host selection policy that returns the hosts of the
// policy it wraps in that policy's order, except that stalled nodes, and
// nodes that came up less than warmUp ago while others have been up longer,
// come last. It is safe for concurrent use.
type stallAwarePolicy struct {
	gocql.HostSelectionPolicy
	t *stallTracker

	mu sync.Mutex
	up map[string]time.Time // host id → when the driver last reported it up
}

// HostUp implements gocql.HostSelectionPolicy: the node is warming up.
func (p *stallAwarePolicy) HostUp(h *gocql.HostInfo) {
	p.mu.Lock()
	if p.up == nil {
		p.up = map[string]time.Time{}
	}
	p.up[h.HostID()] = p.t.now()
	p.mu.Unlock()
	p.HostSelectionPolicy.HostUp(h)
}

// warming reports whether the node came up less than warmUp ago.
func (p *stallAwarePolicy) warming(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.up[id]
	return ok && p.t.now().Sub(at) < warmUp
}

// Pick implements gocql.HostSelectionPolicy: the wrapped policy's hosts in
// its order, first those that answer and are warm, then those warming up,
// then those that stopped answering.
func (p *stallAwarePolicy) Pick(q gocql.ExecutableStatement) gocql.NextHost {
	next := p.HostSelectionPolicy.Pick(q)
	var warm, stalled []gocql.SelectedHost
	done := false
	return func() gocql.SelectedHost {
		for !done {
			h := next()
			if h == nil {
				done = true
				break
			}
			info := h.Info()
			switch {
			case info == nil:
				return h
			case p.t.stalled(info.HostID()):
				stalled = append(stalled, h)
			case p.warming(info.HostID()):
				warm = append(warm, h)
			default:
				return h
			}
		}
		for _, l := range []*[]gocql.SelectedHost{&warm, &stalled} {
			if len(*l) > 0 {
				h := (*l)[0]
				*l = (*l)[1:]
				return h
			}
		}
		return nil
	}
}
