package tenure

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenure-go/tenure/store/memory"
)

// A lease ended by another goroutine (the watchdog, a renewal's answer)
// that has set its cause but not yet cancelled its context: Err and the
// context must already agree, whichever the caller reads.
func TestLeaseErrAndContextAgree(t *testing.T) {
	for _, read := range []string{"Err", "Context().Err", "Done"} {
		t.Run(read, func(t *testing.T) {
			lk, err := New(memory.New())
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Close(context.Background())
			l, err := lk.TryAcquire(context.Background(), "r", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			// What lose does before it cancels the context.
			cause := &LostError{Resource: "r", Token: l.Token(), Reason: ErrLeaseExpired}
			l.mu.Lock()
			l.state = stateLost
			l.cause = cause
			l.mu.Unlock()
			switch read {
			case "Err":
				if err := l.Err(); !errors.Is(err, ErrLeaseLost) {
					t.Fatalf("Err = %v; want ErrLeaseLost", err)
				}
			case "Context().Err":
				_ = l.Context().Err()
			case "Done":
				_ = l.Done()
			}
			if err := l.Context().Err(); err == nil {
				t.Fatal("Err says lost; the lease's context is live")
			}
			if c := context.Cause(l.Context()); !errors.Is(c, ErrLeaseLost) {
				t.Fatalf("context cause %v; want ErrLeaseLost", c)
			}
			select {
			case <-l.Done():
			default:
				t.Fatal("Done not closed")
			}
		})
	}
}
