package mysql

import (
	"context"
	"sync"
)

// gate admits the Store's statements to the pool's connections, at most
// size at a time, and lets releases pass everything else that waits: when a
// connection comes free, the oldest waiting release takes it, and only when
// none waits does the oldest other statement. Among releases, and among the
// others, the order is first come, first served.
//
// Why: under load every statement queues for a connection (32 callers on the
// default 4 connections wait about 8 statements' time each), and a release
// that waits in that queue keeps its resource from the next holder while it
// does. A release is one short statement and comes at most once per grant,
// so releases cannot starve the other statements; the wait they no longer
// have moves to the statements they pass. (The same gate as the PostgreSQL
// store's.)
//
// The gate orders this Store's own statements only: connections that the
// application takes from Store.DB wait in database/sql's queue as before.
// It is safe for concurrent use.
type gate struct {
	mu     sync.Mutex
	free   int             // connections no statement of this Store holds
	first  []chan struct{} // waiting releases, oldest first
	others []chan struct{} // waiting statements that are not releases
}

func newGate(size int) *gate { return &gate{free: max(size, 1)} }

// enter waits for a connection slot, ahead of every non-release waiter when
// release is set. It returns ctx's error, holding nothing, when ctx ends
// first. Each nil return must be paired with one leave.
func (g *gate) enter(ctx context.Context, release bool) error {
	g.mu.Lock()
	if g.free > 0 {
		g.free--
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	if release {
		g.first = append(g.first, ch)
	} else {
		g.others = append(g.others, ch)
	}
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	select {
	case <-ch:
		// Handed a slot as ctx ended: pass it on.
		g.mu.Unlock()
		g.leave()
		return ctx.Err()
	default:
	}
	if release {
		g.first = remove(g.first, ch)
	} else {
		g.others = remove(g.others, ch)
	}
	g.mu.Unlock()
	return ctx.Err()
}

// leave gives the slot of a statement that finished to the next waiter, a
// release first.
func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case len(g.first) > 0:
		close(g.first[0])
		g.first = g.first[1:]
	case len(g.others) > 0:
		close(g.others[0])
		g.others = g.others[1:]
	default:
		g.free++
	}
}

func remove(q []chan struct{}, ch chan struct{}) []chan struct{} {
	for i, c := range q {
		if c == ch {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}
