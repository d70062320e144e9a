package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// waitFor polls cond (a test of the gate's queues, no clock involved) until
// it holds.
func waitFor(t *testing.T, g *gate, cond func() bool) {
	t.Helper()
	for i := 0; ; i++ {
		g.mu.Lock()
		ok := cond()
		g.mu.Unlock()
		if ok {
			return
		}
		if i > 100000 {
			t.Fatal("the gate's queues never got there")
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// TestGateReleasesFirst: when a slot comes free, waiting releases take it
// before statements that came earlier, each class in arrival order.
func TestGateReleasesFirst(t *testing.T) {
	g := newGate(1)
	ctx := context.Background()
	if err := g.enter(ctx, false); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	start := func(name string, release bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.enter(ctx, release); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			g.leave()
		}()
	}
	start("acquire1", false)
	waitFor(t, g, func() bool { return len(g.others) == 1 })
	start("acquire2", false)
	waitFor(t, g, func() bool { return len(g.others) == 2 })
	start("release1", true)
	waitFor(t, g, func() bool { return len(g.first) == 1 })
	start("release2", true)
	waitFor(t, g, func() bool { return len(g.first) == 2 })
	g.leave()
	wg.Wait()
	want := []string{"release1", "release2", "acquire1", "acquire2"}
	if len(order) != len(want) {
		t.Fatalf("order %v; want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v; want %v", order, want)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.free != 1 || len(g.first)+len(g.others) != 0 {
		t.Fatalf("after all left: %d free, %d and %d waiting; want 1 free, none waiting", g.free, len(g.first), len(g.others))
	}
}

// TestGateCancelledWaiter: a waiter whose context ends returns its error,
// holds nothing, and leaves the queue; the slot goes to the next waiter.
func TestGateCancelledWaiter(t *testing.T) {
	g := newGate(1)
	if err := g.enter(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.enter(ctx, true) }()
	waitFor(t, g, func() bool { return len(g.first) == 1 })
	next := make(chan error, 1)
	go func() { next <- g.enter(context.Background(), false) }()
	waitFor(t, g, func() bool { return len(g.others) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v; want context.Canceled", err)
	}
	waitFor(t, g, func() bool { return len(g.first) == 0 })
	g.leave()
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	g.leave()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.free != 1 {
		t.Fatalf("%d free; want 1", g.free)
	}
}

// TestGateSlotHandedAsContextEnds: a slot handed to a waiter whose context
// has ended is passed on, never lost.
func TestGateSlotHandedAsContextEnds(t *testing.T) {
	for i := 0; i < 200; i++ {
		g := newGate(1)
		if err := g.enter(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.enter(ctx, i%2 == 0) }()
		waitFor(t, g, func() bool { return len(g.first)+len(g.others) == 1 })
		go cancel()
		g.leave()
		if err := <-done; err == nil {
			g.leave()
		}
		g.mu.Lock()
		free, waiting := g.free, len(g.first)+len(g.others)
		g.mu.Unlock()
		if free != 1 || waiting != 0 {
			t.Fatalf("round %d: %d free, %d waiting; want 1 free, none waiting", i, free, waiting)
		}
	}
}
