package tenure_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/store/memory"
)

// A lease given up with Abandon makes no store call, so Close has nothing
// to wait for on its account. Abandon used to count itself as store work
// that never ended, and Close waited until its context ended (forever with
// context.Background()): election's Close hung after a hand-over timeout.
func TestCloseAfterAbandon(t *testing.T) {
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	lk, err := tenure.New(mem, tenure.WithClock(fc))
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.TryAcquire(context.Background(), "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Abandon(); err != nil {
		t.Fatal(err)
	}
	if err := l.Abandon(); err == nil {
		t.Fatal("a second Abandon returned nil")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lk.Close(ctx); err != nil {
		t.Fatalf("Close after Abandon: %v", err)
	}
	if !errors.Is(l.Err(), tenure.ErrReleased) {
		t.Fatalf("abandoned lease's cause: %v; want ErrReleased", l.Err())
	}
	if rec, err := mem.Get(context.Background(), "r"); err != nil || rec.Token != l.Token() {
		t.Fatalf("the abandoned lease in the store: %+v, %v; want kept until its TTL", rec, err)
	}
}
