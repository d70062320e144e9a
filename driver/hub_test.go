package driver_test

import (
	"context"
	"testing"

	"github.com/tenure-go/tenure/driver"
)

func pending(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A release wakes every watcher and one waiter, the one that has waited
// longest; a waiter that leaves with a wake-up pending passes it on.
func TestHubWakesOneWaiter(t *testing.T) {
	var h driver.Hub
	h.SetListening(true, nil)
	ctx := context.Background()
	w1, stop1, err := h.Subscribe(ctx, "r", 0)
	if err != nil {
		t.Fatal(err)
	}
	w2, stop2, _ := h.Subscribe(ctx, "r", 0)
	w3, stop3, _ := h.Subscribe(ctx, "r", 0)
	defer stop3()
	watch, stopW, _ := h.Watch(ctx, "r", 0)
	defer stopW()
	other, stopO, _ := h.Subscribe(ctx, "other", 0)
	defer stopO()

	h.Wake("r")
	if !pending(w1) || pending(w2) || pending(w3) || !pending(watch) || pending(other) {
		t.Fatal("Wake should wake the first waiter and the watcher only")
	}
	// The first waiter keeps its place: the next release wakes it again.
	h.Wake("r")
	if !pending(w1) || pending(w2) {
		t.Fatal("the first waiter lost its place")
	}
	// It leaves with a wake-up pending: the next waiter gets it.
	h.Wake("r")
	stop1()
	if !pending(w2) || pending(w3) {
		t.Fatal("a wake-up pending on a waiter that left was not passed on")
	}
	stop2()
	h.Wake("r")
	if !pending(w3) {
		t.Fatal("the last waiter was not woken")
	}
	h.WakeAll()
	if !pending(w3) || !pending(watch) || !pending(other) {
		t.Fatal("WakeAll should wake everyone")
	}
}

// A waiter that took its wake-up and then gave up (its ctx ended before it
// ended the subscription) passes the wake-up on; one that took it and ends
// its subscription with ctx live (it was granted the resource, or found it
// held) passes nothing on.
func TestHubPassesOnAWakeUpTakenByAWaiterThatGaveUp(t *testing.T) {
	var h driver.Hub
	h.SetListening(true, nil)
	ctx1, giveUp := context.WithCancel(context.Background())
	w1, stop1, err := h.Subscribe(ctx1, "r", 0)
	if err != nil {
		t.Fatal(err)
	}
	w2, stop2, _ := h.Subscribe(context.Background(), "r", 0)
	w3, stop3, _ := h.Subscribe(context.Background(), "r", 0)
	defer stop3()

	h.Wake("r")
	if !pending(w1) { // taken
		t.Fatal("the first waiter was not woken")
	}
	giveUp()
	stop1()
	if !pending(w2) {
		t.Fatal("a wake-up taken by a waiter that gave up was lost")
	}
	// w2 took it and acted on it (ctx live): nothing passed on.
	stop2()
	if pending(w3) {
		t.Fatal("a waiter that acted on its wake-up passed one on")
	}
}
