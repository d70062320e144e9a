package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-go/tenure/clock"
)

func TestFakeAdvanceFiresInOrder(t *testing.T) {
	f := clock.NewFake()
	start := f.Now()
	got := make(chan int, 3)
	f.AfterFunc(3*time.Second, func() { got <- 3 })
	f.AfterFunc(time.Second, func() { got <- 1 })
	tm := f.NewTimer(2 * time.Second)
	f.Advance(1500 * time.Millisecond)
	if v := <-got; v != 1 {
		t.Fatalf("first timer %d", v)
	}
	select {
	case <-tm.C():
		t.Fatal("2 s timer fired after 1.5 s")
	default:
	}
	f.Advance(time.Second)
	if at := <-tm.C(); !at.Equal(start.Add(2500 * time.Millisecond)) {
		t.Fatalf("timer delivered %v, want start+2.5s (the time after Advance)", at.Sub(start))
	}
	f.Advance(time.Second)
	if v := <-got; v != 3 {
		t.Fatalf("third timer %d", v)
	}
	if f.Pending() != 0 {
		t.Fatalf("%d timers pending", f.Pending())
	}
}

func TestFakeStopReset(t *testing.T) {
	f := clock.NewFake()
	fired := make(chan struct{}, 2)
	tm := f.AfterFunc(time.Second, func() { fired <- struct{}{} })
	if !tm.Stop() || tm.Stop() {
		t.Fatal("Stop should report true once")
	}
	f.Advance(2 * time.Second)
	select {
	case <-fired:
		t.Fatal("stopped timer fired")
	case <-time.After(20 * time.Millisecond):
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a stopped timer reported it active")
	}
	f.Advance(time.Second)
	<-fired
}

// A suspend moves the clock without firing anything, and delays every
// pending timer by the time suspended: Go's timers run on CLOCK_MONOTONIC.
func TestFakeSuspendDelaysTimers(t *testing.T) {
	f := clock.NewFake()
	start := f.Now()
	tm := f.NewTimer(3 * time.Second)
	f.Suspend(10 * time.Second)
	if d := f.Now().Sub(start); d != 10*time.Second {
		t.Fatalf("Now moved %v, want 10s", d)
	}
	f.Advance(2 * time.Second)
	select {
	case <-tm.C():
		t.Fatal("timer fired 2 s after resume; it had 3 s of monotonic time left")
	default:
	}
	f.Advance(time.Second)
	<-tm.C()
}

func TestFakeBlockUntil(t *testing.T) {
	f := clock.NewFake()
	done := make(chan error, 1)
	go func() { done <- f.BlockUntilContext(context.Background(), 2) }()
	f.NewTimer(time.Second)
	f.AfterFunc(time.Second, func() {})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.BlockUntilContext(ctx, 3); err == nil {
		t.Fatal("BlockUntilContext with a cancelled context returned nil")
	}
}

func TestRealNowTracksTimeNow(t *testing.T) {
	c := clock.Real()
	a := time.Now()
	n := c.Now()
	b := time.Now()
	// On a machine that has not been suspended while this test ran, the real
	// clock reads time.Now().
	if n.Before(a) || n.After(b.Add(time.Second)) {
		t.Fatalf("Now %v outside [%v, %v]", n, a, b)
	}
	prev := c.Now()
	for range 1000 {
		cur := c.Now()
		if cur.Before(prev) {
			t.Fatalf("real clock went back: %v after %v", cur, prev)
		}
		prev = cur
	}
}
