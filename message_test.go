package tenure_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/store/memory"
)

// The messages of the errors that wrap another of tenure's errors name
// tenure once: each layer of a message names itself once, so
// "tenure: release "r": tenure: lease released by its holder" reads
// "tenure: release "r": lease released by its holder".

// namesTenureOnce fails the test when msg does not start with "tenure: " or
// names it again.
func namesTenureOnce(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "tenure: ") || strings.Count(msg, "tenure: ") != 1 {
		t.Errorf("%s: %q names tenure %d times; want once, at the start", what, msg, strings.Count(msg, "tenure: "))
	}
}

func TestMessageOfAReleasedLease(t *testing.T) {
	ctx := ctxT(t)
	lk, _ := tenure.New(memory.New())
	l, err := lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"Release":      l.Release(ctx),
		"ReleaseAfter": l.ReleaseAfter(ctx, time.Minute),
		"Abandon":      l.Abandon(),
	} {
		if !errors.Is(err, tenure.ErrReleased) || errors.Is(err, tenure.ErrLeaseLost) {
			t.Errorf("%s after Release: %v; want ErrReleased, not ErrLeaseLost", what, err)
		}
		namesTenureOnce(t, what+" after Release", err)
	}
	if err := l.Release(ctx); err.Error() != `tenure: release "r": lease released by its holder` {
		t.Errorf("Release after Release: %q", err)
	}
}

func TestMessageOfALostLease(t *testing.T) {
	ctx := ctxT(t)
	mem := memory.New()
	lk, _ := tenure.New(mem)
	l, err := lk.TryAcquire(ctx, "r", ttl)
	if err != nil {
		t.Fatal(err)
	}
	// An operator frees it; the holder's next renewal finds it gone.
	if err := mem.Release(ctx, "r", l.Owner(), l.Token()); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); !errors.Is(err, tenure.ErrNotHolder) {
		t.Fatalf("Renew after a forced release: %v", err)
	}
	cause := context.Cause(l.Context())
	namesTenureOnce(t, "the cause", cause)
	if n := strings.Count(cause.Error(), "lost"); n != 1 {
		t.Errorf("the cause %q says lost %d times", cause, n)
	}
	for what, err := range map[string]error{
		"Release":      l.Release(ctx),
		"ReleaseAfter": l.ReleaseAfter(ctx, time.Minute),
		"Abandon":      l.Abandon(),
	} {
		if !errors.Is(err, tenure.ErrLeaseLost) {
			t.Errorf("%s after the loss: %v; want ErrLeaseLost", what, err)
		}
		namesTenureOnce(t, what+" after the loss", err)
	}
}

// lateStore answers an acquire after moving the fake clock past the
// lease's TTL: an answer that arrived too late to be trusted.
type lateStore struct {
	*memory.Store
	fc *clock.Fake
}

func (s *lateStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (tenure.Record, error) {
	rec, err := s.Store.Acquire(ctx, resource, owner, ttl)
	s.fc.Advance(ttl + time.Second)
	return rec, err
}

func TestMessageOfALateAnswer(t *testing.T) {
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	lk, _ := tenure.New(&lateStore{Store: mem, fc: fc}, tenure.WithClock(fc))
	_, err := lk.TryAcquire(ctxT(t), "r", ttl)
	if !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("an acquire answered past its deadline: %v; want ErrLeaseLost", err)
	}
	namesTenureOnce(t, "an acquire answered past its deadline", err)
}

func TestMessageOfASemaphoreRefused(t *testing.T) {
	ctx := ctxT(t)
	mem := memory.New()
	lk, _ := tenure.New(mem)
	_, err := lk.Semaphore(strings.Repeat("x", tenure.MaxResourceLen-5), 3)
	if !errors.Is(err, tenure.ErrInvalidResource) {
		t.Fatalf("slot names too long: %v", err)
	}
	namesTenureOnce(t, "slot names too long", err)

	// Another program holds the marker's name.
	if _, err := mem.Acquire(ctx, "s/slots", "someone#else.1", ttl); err != nil {
		t.Fatal(err)
	}
	sem, _ := lk.Semaphore("s", 2)
	_, err = sem.TryAcquire(ctx, ttl)
	if !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("marker held by another program: %v", err)
	}
	namesTenureOnce(t, "marker held by another program", err)
}
