package redis

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/internal/testserver"
)

// markHook holds back the calls of the script that marks a lease as
// watched until the call's context ends or proceed is closed, and counts
// those in flight.
type markHook struct {
	inFlight atomic.Int32
	entered  chan struct{}
	proceed  chan struct{}
}

func (h *markHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *markHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.isMark(cmd) {
			return next(ctx, cmd)
		}
		h.inFlight.Add(1)
		defer h.inFlight.Add(-1)
		select {
		case h.entered <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-h.proceed:
		}
		return next(ctx, cmd)
	}
}

func (h *markHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *markHook) isMark(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	name, _ := args[0].(string)
	arg, _ := args[1].(string)
	switch strings.ToLower(name) {
	case "evalsha":
		return arg == markScript.Hash()
	case "eval":
		return arg == markScript.src
	}
	return false
}

// A lease that watches its own release notifications (WithReleaseWatch)
// has the store mark it as watched; once the Locker's Close returned, no
// such call of the Store is in flight. The mark ran in a goroutine of its
// own that nothing waited for, so it could reach the server after Close
// had returned (and after the program closed the Store).
func TestWatchMarkEndsWithTheSubscription(t *testing.T) {
	raw := testserver.Env(t, "TENURE_REDIS", "redis")
	cfg, err := ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Prefix = "tenuretest:" + t.Name() + ":" + time.Now().Format("150405.000000") + ":"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hook := &markHook{entered: make(chan struct{}, 1), proceed: make(chan struct{})}
	s.single.AddHook(hook)
	defer close(hook.proceed)

	lk, err := tenure.New(s, tenure.WithReleaseWatch())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lk.TryAcquire(ctx, "r", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hook.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch never marked the lease")
	}
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
	defer ccancel()
	if err := lk.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := hook.inFlight.Load(); n != 0 {
		t.Fatalf("the Locker's Close returned with %d marks of a watched lease still in flight", n)
	}
}
