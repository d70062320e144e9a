package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestCeilingDoublesUpToCap(t *testing.T) {
	p := Policy{Base: 10 * time.Millisecond, Cap: 100 * time.Millisecond}
	want := []time.Duration{10, 20, 40, 80, 100, 100, 100}
	for i, w := range want {
		if got := p.Ceiling(i); got != w*time.Millisecond {
			t.Errorf("Ceiling(%d) = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	if got := p.Ceiling(1 << 20); got != p.Cap {
		t.Errorf("Ceiling(huge) = %v, want cap %v", got, p.Cap)
	}
}

func TestDelayStaysWithinCeilingAndSpreads(t *testing.T) {
	p := Policy{Base: time.Millisecond, Cap: 50 * time.Millisecond}
	seen := map[time.Duration]bool{}
	for i := 0; i < 1000; i++ {
		d := p.Delay(10)
		if d < 0 || d > p.Cap {
			t.Fatalf("Delay = %v outside [0, %v]", d, p.Cap)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Fatalf("only %d distinct delays in 1000 draws: no jitter", len(seen))
	}
	if d := (Policy{}).Delay(3); d != 0 {
		t.Fatalf("zero policy Delay = %v", d)
	}
}

// Wait sleeps within the ceiling, and returns ctx's cause at once when ctx
// has ended.
func TestWait(t *testing.T) {
	p := Policy{Base: time.Millisecond, Cap: time.Millisecond}
	if err := p.Wait(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stopped")
	cancel(stop)
	if err := (Policy{Base: time.Hour, Cap: time.Hour}).Wait(ctx, 3); !errors.Is(err, stop) {
		t.Fatalf("Wait on an ended context: %v", err)
	}
}
