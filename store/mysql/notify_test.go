package mysql_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/mysql"
)

// A waiter on another Store (another process) learns of a release from its
// Store's poll: it is granted within a poll interval and a round trip or
// two, although its own backoff is an hour.
func TestPollWakesWaiterOfAnotherStore(t *testing.T) {
	poll := 200 * time.Millisecond
	sa := open(t)
	sb := open(t, func(c *mysql.Config) { c.PollInterval = poll })
	d := testserver.WakeOnce(t, sa, sb, testserver.Resource(t))
	t.Logf("granted %v after the release (poll interval %v)", d, poll)
	if d > 5*poll {
		t.Fatalf("waiter granted %v after the release; the poll interval is %v", d, poll)
	}
}

// An expiry wakes a waiter too: the poll finds the resource free.
func TestPollWakesWaiterOnExpiry(t *testing.T) {
	ctx := testserver.Ctx(t)
	sa, sb := open(t), open(t)
	r := testserver.Resource(t)
	o := owner(t, "dead-holder")
	if _, err := sa.Acquire(ctx, r, o, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	b := testserver.Locker(t, sb, tenure.WithRetry(time.Hour, time.Hour))
	start := time.Now()
	l, err := b.Acquire(ctx, r, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	t.Logf("granted %v after the holder's grant (TTL 500ms)", d)
	if d > 5*time.Second {
		t.Fatalf("waiter granted %v after a 500ms lease's grant", d)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// With polling off, Subscribe says so at once (the Locker backs off), and
// so does a Store whose database cannot be reached when it first polls.
func TestSubscribeWithoutPolling(t *testing.T) {
	ctx := testserver.Ctx(t)
	s := open(t, func(c *mysql.Config) { c.PollInterval = -1 })
	if _, _, err := s.Subscribe(ctx, "r"); !errors.Is(err, driver.ErrNotListening) {
		t.Fatalf("Subscribe with polling off: %v; want ErrNotListening", err)
	}
	_, proxy := proxied(t, 0)
	p := open(t, func(c *mysql.Config) { c.MySQL.Addr = proxy.Addr(); c.MySQL.Timeout = time.Second })
	proxy.SetMode(netfault.Partition) // nothing answers any more
	proxy.Reset()
	start := time.Now()
	if _, _, err := p.Subscribe(ctx, "r"); !errors.Is(err, driver.ErrNotListening) {
		t.Fatalf("Subscribe with the database gone: %v; want ErrNotListening", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Subscribe took %v to give up", d)
	}
}
