package redis_test

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/internal/testserver"
	tredis "github.com/tenure-go/tenure/store/redis"
	"github.com/tenure-go/tenure/store/storetest"
)

// addr returns $TENURE_REDIS or skips the test.
func addr(tb testing.TB) string { return testserver.Env(tb, "TENURE_REDIS", "redis") }

// open returns a store on $TENURE_REDIS, closed at the end of the test.
func open(tb testing.TB, mod ...func(*tredis.Config)) *tredis.Store {
	return testserver.Open(tb, addr(tb), tredis.ParseURL, tredis.Open, mod...)
}

func clientName(name string) func(*tredis.Config) {
	return func(c *tredis.Config) { c.Options.ClientName = name }
}

var cfg = storetest.Config{
	New: func(t *testing.T) driver.Store { return open(t) },
	// PX expiry is exact to the millisecond on the server's clock (Redis
	// also expires keys on access, so a read never sees an expired lease);
	// the slack covers only the test's polling.
	ShortTTL:    300 * time.Millisecond,
	ExpirySlack: 250 * time.Millisecond,
	InvalidTTLs: []time.Duration{time.Nanosecond, time.Millisecond - 1},
	Reopen:      func(t *testing.T, _ driver.Store) driver.Store { return open(t) },
}

func TestConformance(t *testing.T) {
	addr(t) // skip once, not in every subtest
	storetest.Run(t, cfg)
}

// killClients kills, with CLIENT KILL ID, every connection named name (and
// of type typ, when not empty), and returns how many.
func killClients(t *testing.T, admin *tredis.Store, name, typ string) int {
	t.Helper()
	ctx := testserver.Ctx(t)
	list, err := admin.Client().ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(list))
	for sc.Scan() {
		f := map[string]string{}
		for _, kv := range strings.Fields(sc.Text()) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if f["name"] != name || (typ != "" && !strings.Contains(f["flags"], typ)) {
			continue
		}
		if err := admin.Client().Do(ctx, "CLIENT", "KILL", "ID", f["id"]).Err(); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// TestCaseC09ConnectionKilled: Redis leases are not tied to a connection.
// The server kills the holder's connections (CLIENT KILL, as a timeout or a
// proxy would); the lease is unchanged, nobody else is granted it, the
// holder renews through a new connection, and after its release a waiter is
// granted at once.
func TestCaseC09ConnectionKilled(t *testing.T) {
	admin := open(t)
	holder := open(t, clientName("tenure-c09-holder"))
	waiter := open(t, clientName("tenure-c09-waiter"))
	testserver.ConnectionsKilled(t, admin, holder, waiter, 30*time.Second, func() {
		if n := killClients(t, admin, "tenure-c09-holder", ""); n == 0 {
			t.Fatal("no connection of the holder found")
		}
	}, 3, false)
}

// TestWakeOnExpiry: with expired-key events enabled on the server, a waiter
// is woken when the holder's lease expires.
func TestWakeOnExpiry(t *testing.T) {
	s := open(t)
	ctx := testserver.Ctx(t)
	c := s.Client()
	old, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		t.Skipf("CONFIG GET: %v", err)
	}
	if err := c.ConfigSet(ctx, "notify-keyspace-events", "Ex").Err(); err != nil {
		t.Skipf("CONFIG SET: %v", err)
	}
	defer c.ConfigSet(context.Background(), "notify-keyspace-events", old["notify-keyspace-events"])
	r := testserver.Resource(t)
	other, _ := naming.NewOwner("gone")
	if _, err := s.Acquire(ctx, r, other, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// The waiter's clock never moves: only the expired-key event wakes it
	// (without it, the waiter gives up when ctx ends).
	b := testserver.Locker(t, s, tenure.WithClock(clock.NewFake()))
	start := time.Now()
	lb, err := b.Acquire(ctx, r, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Redis expires keys that nobody reads by sampling, about ten times a
	// second; the event comes when the key is deleted.
	t.Logf("granted %v after a 500ms lease was taken", time.Since(start))
	_ = lb.Release(ctx)
}

// TestNotificationsSurviveListenerLoss: the pub/sub connection is killed;
// go-redis reconnects and resubscribes, the store wakes every subscriber,
// and a later release still wakes a waiter.
func TestNotificationsSurviveListenerLoss(t *testing.T) {
	admin := open(t)
	s := open(t, clientName("tenure-listener-test"))
	ctx := testserver.Ctx(t)
	ch, stop, err := s.Subscribe(ctx, "warm-up")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if n := killClients(t, admin, "tenure-listener-test", "P"); n != 1 {
		t.Fatalf("killed %d pub/sub connections, want 1", n)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("no wake-up after the pub/sub connection was re-established")
	}
	t.Logf("waiter granted %v after the release", testserver.WakeOnce(t, s, s, testserver.Resource(t)))
}

// proxied returns a store whose single connection goes through a netfault
// proxy, and the proxy.
func proxied(t *testing.T, mod ...func(*tredis.Config)) (*tredis.Store, *netfault.Proxy) {
	t.Helper()
	base, err := tredis.ParseURL(addr(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.Start(base.Options.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	s := open(t, append([]func(*tredis.Config){func(c *tredis.Config) {
		c.Options.Addr = proxy.Addr()
		c.Options.PoolSize = 1
		c.Options.DialTimeout = time.Second
	}}, mod...)...)
	return s, proxy
}

// TestHalfOpenPubSub: the pub/sub connection goes half-open (a proxy drops
// its bytes, and only its, without FIN or reset). The store pings it after
// ListenCheck of silence, replaces it when nothing answers, says so in its
// log, and wakes its waiters, so the release whose notification was lost
// still reaches the waiter, and later releases wake later waiters through
// the new connection.
func TestHalfOpenPubSub(t *testing.T) {
	var log testserver.LogRecorder
	s, proxy := proxied(t, func(c *tredis.Config) { c.Logger = log.Logger() })
	tredis.SetListenCheck(s, time.Second)
	direct := open(t)
	testserver.HalfOpenNotifications(t, s, direct, time.Minute, func() int { return proxy.Silence([]byte("subscribe")) }, 20*time.Second)
	if !log.Has(slog.LevelWarn, "pub/sub connection") || !log.Has(slog.LevelInfo, "listening again") {
		t.Errorf("the store did not log the silent connection and its replacement; it logged:\n%s", log.String())
	}
}

// TestLostReplyIsUnknownOutcome: the reply to an applied script is lost (a
// proxy drops server-to-client bytes); the store reports an unknown outcome,
// never "not acquired", and the write was applied. A black hole ends calls
// with their context; an unreachable server fails fast.
func TestLostReplyIsUnknownOutcome(t *testing.T) {
	ctx := testserver.Ctx(t)
	direct := open(t)
	s, proxy := proxied(t)
	// The warm-up loads the scripts first: a lost reply to EVALSHA's
	// NOSCRIPT would leave nothing applied.
	testserver.LostReplies(ctx, t, s, direct, proxy, 300*time.Millisecond, 3*time.Second)
}

// TestBoundedWhenPartitioned: a Locker's calls end by their bounds when new
// connections hang (go-redis dials in a goroutine of its own, which only
// ctx.Done() lets a caller stop waiting for).
func TestBoundedWhenPartitioned(t *testing.T) {
	s, proxy := proxied(t)
	testserver.BoundedWhenPartitioned(t, s, proxy)
}

// TestUnreachableFailsFast: New against a refused port or a black hole
// fails within the dial timeout.
func TestUnreachableFailsFast(t *testing.T) {
	base, err := tredis.ParseURL(addr(t))
	if err != nil {
		t.Fatal(err)
	}
	testserver.FailsFast(t, base.Options.Addr,
		func(addr string) string { return "redis://" + addr + "/0?dial_timeout=1s&read_timeout=1s" },
		tredis.OpenURL)
}

func TestParseURL(t *testing.T) {
	for _, bad := range []string{"", "http://x", "redis://h:notaport", "redis://h/notadb", "redis://h/0?bogus=1",
		"redis://h/0?ca=/x.pem", "rediss://h/0?cert=/x.pem", "rediss://h/0?ca=/does/not/exist.pem", "redis://h/0?allow_eviction=maybe", "%zz"} {
		if _, err := tredis.ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q): no error", bad)
		}
	}
	cfg, err := tredis.ParseURL("rediss://user:secret@cache.example:6380/3?prefix=app:&dial_timeout=2s&allow_eviction=true")
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Options
	if o.Addr != "cache.example:6380" || o.DB != 3 || o.Username != "user" || o.Password != "secret" ||
		o.TLSConfig == nil || o.DialTimeout != 2*time.Second || cfg.Prefix != "app:" || !cfg.AllowEviction {
		t.Fatalf("parsed %+v %+v", cfg, o)
	}
}

// TestEvictionPolicyRefused: a server that may evict keys is refused,
// unless the caller accepts the risk.
func TestEvictionPolicyRefused(t *testing.T) {
	admin := open(t)
	ctx := testserver.Ctx(t)
	old, err := admin.Client().ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		t.Skipf("CONFIG GET: %v", err)
	}
	if err := admin.Client().ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Skipf("CONFIG SET: %v", err)
	}
	defer admin.Client().ConfigSet(context.Background(), "maxmemory-policy", old["maxmemory-policy"])
	cfg, _ := tredis.ParseURL(addr(t))
	if s, err := tredis.Open(ctx, cfg); !errors.Is(err, tredis.ErrEvictionPolicy) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("New on an allkeys-lru server: %v; want ErrEvictionPolicy", err)
	}
	cfg.AllowEviction = true
	s, err := tredis.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestServerRestart (TENURE_SERVER_FAULTS=1, with the server from
// scripts/redis) shows both sides of the documented failure mode.
// Without persistence, a restarted Redis is empty: the holder's next
// renewal is ErrLeaseLost, another owner is granted at once, and its token
// is still greater (the server's clock is the floor of the counter that
// was lost). With appendonly yes and appendfsync always, the lease and its
// counter survive a crash: the holder renews with the same token, the other
// owner is refused, and the next token is greater.
func TestServerRestart(t *testing.T) {
	addr(t)
	script := testserver.ServerScript(t, "redis")
	ctx := testserver.Ctx(t)
	defer func() {
		// Leave the server as scripts/redis starts it.
		os.Unsetenv("TENURE_REDIS_OPTS")
		testserver.Run(t, script, "restart")
	}()

	t.Run("NoPersistence", func(t *testing.T) {
		t.Setenv("TENURE_REDIS_OPTS", "")
		testserver.Run(t, script, "restart")
		s := open(t)
		r := testserver.Resource(t)
		a, b := testserver.Locker(t, s), testserver.Locker(t, s)
		la, err := a.TryAcquire(ctx, r, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		testserver.Run(t, script, "restart")
		var renewErr error
		for i := 0; i < 3; i++ { // the first call may meet the dead connection
			if renewErr = la.Renew(ctx); errors.Is(renewErr, tenure.ErrLeaseLost) {
				break
			}
		}
		if !errors.Is(renewErr, tenure.ErrLeaseLost) {
			t.Fatalf("renewal after an empty restart: %v; want ErrLeaseLost", renewErr)
		}
		lb, err := b.TryAcquire(ctx, r, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// The counter is gone with everything else; the server's clock is
		// the token's floor.
		if lb.Token() <= la.Token() {
			t.Fatalf("after an empty restart: B's token %d <= A's %d", lb.Token(), la.Token())
		}
		t.Logf("after an empty restart: A's token %d, B's token %d", la.Token(), lb.Token())
	})

	t.Run("AppendFsyncAlways", func(t *testing.T) {
		t.Setenv("TENURE_REDIS_OPTS", "--appendonly yes --appendfsync always")
		testserver.Run(t, script, "restart")
		testserver.SurvivesRestart(ctx, t, open(t), 30*time.Second, func() { testserver.Run(t, script, "restart") }, 3)
	})
}

func BenchmarkWakeOnRelease(b *testing.B) {
	testserver.BenchWakeOnRelease(b, func(tb testing.TB) driver.Store { return open(tb) })
}
