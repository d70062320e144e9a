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
// notices a frozen node too.

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
func (t *stallTracker) stalled(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.nodes[id]
	if n == nil || n.pending.Len() == 0 {
		return false
	}
	since := n.pending.Front().Value.(time.Time)
	if n.lastAnswer.After(since) {
		since = n.lastAnswer
	}
	return t.now().Sub(since) > t.after
}

// StreamContext implements gocql.StreamObserver.
func (t *stallTracker) StreamContext(context.Context) gocql.StreamObserverContext {
	return &trackedStream{t: t}
}

// trackedStream is one request: StreamStarted, then StreamFinished (an
// answer) or StreamAbandoned (the connection closed first), each at most
// once (the driver's guarantee).
type trackedStream struct {
	t  *stallTracker
	id string
	el *list.Element
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

// stallAwarePolicy is a host selection policy that returns the hosts of the
// policy it wraps in that policy's order, except that stalled nodes come
// last.
type stallAwarePolicy struct {
	gocql.HostSelectionPolicy
	t *stallTracker
}

// Pick implements gocql.HostSelectionPolicy.
func (p *stallAwarePolicy) Pick(q gocql.ExecutableStatement) gocql.NextHost {
	next := p.HostSelectionPolicy.Pick(q)
	var deferred []gocql.SelectedHost
	done := false
	return func() gocql.SelectedHost {
		for !done {
			h := next()
			if h == nil {
				done = true
				break
			}
			if info := h.Info(); info != nil && p.t.stalled(info.HostID()) {
				deferred = append(deferred, h)
				continue
			}
			return h
		}
		if len(deferred) == 0 {
			return nil
		}
		h := deferred[0]
		deferred = deferred[1:]
		return h
	}
}
