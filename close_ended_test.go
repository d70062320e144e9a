package tenure_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/memory"
)

// Close given a context that has already ended, on a Locker with nothing
// in flight, returns nil: nothing is left running, so there is nothing to
// report. Its wait used to pick at random between the idle channel and the
// context's end, both ready, and said "store calls still in flight" about
// half the time.
func TestCloseWithEndedContextWhenIdle(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 64 {
		lk, err := tenure.New(memory.New())
		if err != nil {
			t.Fatal(err)
		}
		l, err := lk.TryAcquire(context.Background(), "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := lk.Close(ended); err != nil {
			t.Fatalf("Close #%d with an ended context, nothing in flight: %v", i, err)
		}
	}
}
