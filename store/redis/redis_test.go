package redis_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/netfault"
	tredis "github.com/tenure-go/tenure/store/redis"
	"github.com/tenure-go/tenure/store/storetest"
)

// addr returns $TENURE_REDIS or skips the test.
func addr(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("TENURE_REDIS")
	if u == "" {
		tb.Skip(`TENURE_REDIS is not set: these tests need a real Redis server; ` +
			`start one with "scripts/redis start" and run eval "$(scripts/redis env)"`)
	}
	return u
}

// open returns a store on $TENURE_REDIS, closed at the end of the test.
func open(tb testing.TB, mod ...func(*tredis.Config)) *tredis.Store {
	tb.Helper()
	cfg, err := tredis.ParseURL(addr(tb))
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range mod {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := tredis.New(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
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
}

func TestConformance(t *testing.T) {
	addr(t) // skip once, not in every subtest
	storetest.Run(t, cfg)
}

func TestCaseC01CleanShutdown(t *testing.T)     { storetest.CaseC01CleanShutdown(t, cfg) }
func TestCaseC02UnknownOutcome(t *testing.T)    { storetest.CaseC02UnknownOutcome(t, cfg) }
func TestCaseC03SubSecondTTL(t *testing.T)      { storetest.CaseC03SubSecondTTL(t, cfg) }
func TestCaseC04RenewalsFail(t *testing.T)      { storetest.CaseC04RenewalsFail(t, cfg) }
func TestCaseC05BlackHole(t *testing.T)         { storetest.CaseC05BlackHole(t, cfg) }
func TestCaseC06cPauseBeforeWrite(t *testing.T) { storetest.CaseC06cPauseBeforeWrite(t, cfg) }
func TestCaseC07PartitionedHolderFencing(t *testing.T) {
	storetest.CaseC07PartitionedHolderFencing(t, cfg)
}
func TestCaseC08LateRenewal(t *testing.T) { storetest.CaseC08LateRenewal(t, cfg) }
func TestCaseC10SameOwnerID(t *testing.T) { storetest.CaseC10SameOwnerID(t, cfg) }

// killClients kills, with CLIENT KILL ID, every connection named name (and
// of type typ, when not empty), and returns how many.
func killClients(t *testing.T, admin *tredis.Store, name, typ string) int {
	t.Helper()
	ctx := ctxT(t)
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
	ctx := ctxT(t)
	admin := open(t)
	hs := open(t, clientName("tenure-c09-holder"))
	ws := open(t, clientName("tenure-c09-waiter"))
	r := resource(t)
	a := locker(t, hs)
	b := locker(t, ws, tenure.WithRetry(time.Hour, time.Hour))
	la, err := a.TryAcquire(ctx, r, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n := killClients(t, admin, "tenure-c09-holder", ""); n == 0 {
		t.Fatal("no connection of the holder found")
	}
	if rec, err := admin.Get(ctx, r); err != nil || rec.Owner != la.Owner() || rec.Token != la.Token() {
		t.Fatalf("after the holder's connections were killed: Get = %+v, %v", rec, err)
	}
	if _, err := b.TryAcquire(ctx, r, 30*time.Second); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("B: %v; want ErrHeld", err)
	}
	// The first call on a killed pooled connection may fail (transient, not
	// ErrLeaseLost); the Locker retries, so does this test.
	var renewErr error
	for i := 0; i < 3; i++ {
		if renewErr = la.Renew(ctx); renewErr == nil {
			break
		}
		if errors.Is(renewErr, tenure.ErrLeaseLost) {
			t.Fatalf("renewal after the connection was killed: %v", renewErr)
		}
	}
	if renewErr != nil {
		t.Fatalf("renewal through a new connection: %v", renewErr)
	}
	if err := la.Err(); err != nil {
		t.Fatal(err)
	}
	got := make(chan *tenure.Lease, 1)
	waiting := make(chan struct{})
	go func() {
		var once sync.Once
		l, err := b.Acquire(ctx, r, 30*time.Second, tenure.OnWait(func(*tenure.HeldError, time.Duration) { once.Do(func() { close(waiting) }) }))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	<-waiting
	released := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-got:
		if lb == nil {
			t.FailNow()
		}
		t.Logf("B granted %v after A's release", time.Since(released))
		if lb.Token() <= la.Token() {
			t.Fatalf("B's token %d <= A's %d", lb.Token(), la.Token())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("B not granted within 10 s of A's release")
	}
}

// TestWakeOnRelease: a waiting Acquire whose backoff is an hour is granted
// within a moment of the release, by the published message.
func TestWakeOnRelease(t *testing.T) {
	s := open(t)
	d := wakeOnce(t, s, s, resource(t))
	if d > 2*time.Second {
		t.Fatalf("waiter granted %v after the release", d)
	}
	t.Logf("granted %v after the release", d)
}

// TestWakeOnExpiry: with expired-key events enabled on the server, a waiter
// is woken when the holder's lease expires.
func TestWakeOnExpiry(t *testing.T) {
	s := open(t)
	ctx := ctxT(t)
	c := s.Client()
	old, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		t.Skipf("CONFIG GET: %v", err)
	}
	if err := c.ConfigSet(ctx, "notify-keyspace-events", "Ex").Err(); err != nil {
		t.Skipf("CONFIG SET: %v", err)
	}
	defer c.ConfigSet(context.Background(), "notify-keyspace-events", old["notify-keyspace-events"])
	r := resource(t)
	other, _ := tenure.NewOwner("gone")
	if _, err := s.Acquire(ctx, r, other, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	b := locker(t, s, tenure.WithRetry(time.Hour, time.Hour))
	start := time.Now()
	lb, err := b.Acquire(ctx, r, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Redis expires keys that nobody reads by sampling, about ten times a
	// second; the event comes when the key is deleted.
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("waiter granted %v after a 500ms lease began", d)
	}
	t.Logf("granted %v after a 500ms lease was taken", time.Since(start))
	_ = lb.Release(ctx)
}

// TestNotificationsSurviveListenerLoss: the pub/sub connection is killed;
// go-redis reconnects and resubscribes, the store wakes every subscriber,
// and a later release still wakes a waiter.
func TestNotificationsSurviveListenerLoss(t *testing.T) {
	admin := open(t)
	s := open(t, clientName("tenure-listener-test"))
	ctx := ctxT(t)
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
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after the pub/sub connection was re-established")
	}
	if d := wakeOnce(t, s, s, resource(t)); d > 2*time.Second {
		t.Fatalf("waiter granted %v after the release", d)
	}
}

// proxied returns a store whose single connection goes through a netfault
// proxy, and the proxy.
func proxied(t *testing.T) (*tredis.Store, *netfault.Proxy) {
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
	s := open(t, func(c *tredis.Config) {
		c.Options.Addr = proxy.Addr()
		c.Options.PoolSize = 1
		c.Options.DialTimeout = time.Second
	})
	return s, proxy
}

// TestLostReplyIsUnknownOutcome: the reply to an applied script is lost (a
// proxy drops server-to-client bytes); the store reports an unknown outcome,
// never "not acquired", and the write was applied. A black hole ends calls
// with their context; an unreachable server fails fast.
func TestLostReplyIsUnknownOutcome(t *testing.T) {
	ctx := ctxT(t)
	direct := open(t)
	s, proxy := proxied(t)
	r := resource(t)
	owner, _ := tenure.NewOwner("lost-reply")
	// Load the scripts first: a lost reply to EVALSHA's NOSCRIPT would
	// leave nothing applied.
	warmUp := func() {
		t.Helper()
		proxy.SetMode(netfault.Pass)
		warm, err := s.Acquire(ctx, r+"/warm", owner, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, r+"/warm", owner, warm.Token); err != nil {
			t.Fatal(err)
		}
		proxy.SetMode(netfault.DropReplies)
	}
	warmUp()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := s.Acquire(cctx, r, owner, time.Minute)
	cancel()
	if !errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("Acquire whose reply was lost: %v; want ErrUnknownOutcome", err)
	}
	rec, err := direct.Get(ctx, r)
	if err != nil || rec.Owner != owner {
		t.Fatalf("the lost acquire was applied, but Get = %+v, %v", rec, err)
	}
	warmUp() // the lost reply closed the connection
	cctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	err = s.Release(cctx, r, owner, rec.Token)
	cancel()
	if !errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("Release whose reply was lost: %v; want ErrUnknownOutcome", err)
	}
	if _, err := direct.Get(ctx, r); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("the lost release was applied, but Get = %v", err)
	}
	proxy.SetMode(netfault.Blackhole)
	cctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	_, err = s.Acquire(cctx, r, owner, time.Minute)
	cancel()
	if err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("Acquire into a black hole: %v after %v", err, time.Since(start))
	}
}

// TestUnreachableFailsFast: New against a refused port or a black hole
// fails within the dial timeout.
func TestUnreachableFailsFast(t *testing.T) {
	base, err := tredis.ParseURL(addr(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.Start(base.Options.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.SetMode(netfault.Blackhole)
	for name, url := range map[string]string{
		"refused":    "redis://127.0.0.1:1/0?dial_timeout=1s",
		"black hole": "redis://" + proxy.Addr() + "/0?dial_timeout=1s&read_timeout=1s",
	} {
		start := time.Now()
		s, err := tredis.OpenURL(context.Background(), url)
		if err == nil {
			s.Close()
			t.Fatalf("%s: New succeeded", name)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%s: New took %v", name, d)
		}
		t.Logf("%s: %v", name, err)
	}
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
	ctx := ctxT(t)
	old, err := admin.Client().ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		t.Skipf("CONFIG GET: %v", err)
	}
	if err := admin.Client().ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Skipf("CONFIG SET: %v", err)
	}
	defer admin.Client().ConfigSet(context.Background(), "maxmemory-policy", old["maxmemory-policy"])
	cfg, _ := tredis.ParseURL(addr(t))
	if s, err := tredis.New(ctx, cfg); !errors.Is(err, tredis.ErrEvictionPolicy) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("New on an allkeys-lru server: %v; want ErrEvictionPolicy", err)
	}
	cfg.AllowEviction = true
	s, err := tredis.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestServerRestart (TENURE_SERVER_FAULTS=1, with the server from
// scripts/redis) shows both sides of the documented failure mode.
// Without persistence, a restarted Redis is empty: the holder's next
// renewal is ErrLeaseLost, another owner is granted at once, and the token
// goes back. With appendonly yes and appendfsync always, the lease and its
// counter survive a crash: the holder renews with the same token, the other
// owner is refused, and the next token is greater.
func TestServerRestart(t *testing.T) {
	addr(t)
	script := serverScript(t, "redis")
	ctx := ctxT(t)
	defer func() {
		// Leave the server as scripts/redis starts it.
		os.Unsetenv("TENURE_REDIS_OPTS")
		run(t, script, "restart")
	}()

	t.Run("NoPersistence", func(t *testing.T) {
		t.Setenv("TENURE_REDIS_OPTS", "")
		run(t, script, "restart")
		s := open(t)
		r := resource(t)
		a, b := locker(t, s), locker(t, s)
		la, err := a.TryAcquire(ctx, r, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		run(t, script, "restart")
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
		t.Logf("after an empty restart: A's token %d, B's token %d (tokens went back: %v)", la.Token(), lb.Token(), lb.Token() <= la.Token())
	})

	t.Run("AppendFsyncAlways", func(t *testing.T) {
		t.Setenv("TENURE_REDIS_OPTS", "--appendonly yes --appendfsync always")
		run(t, script, "restart")
		s := open(t)
		r := resource(t)
		a, b := locker(t, s), locker(t, s)
		la, err := a.TryAcquire(ctx, r, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		run(t, script, "restart")
		var renewErr error
		for i := 0; i < 3; i++ {
			if renewErr = la.Renew(ctx); renewErr == nil || errors.Is(renewErr, tenure.ErrLeaseLost) {
				break
			}
		}
		if renewErr != nil {
			t.Fatalf("renewal after a crash with appendfsync always: %v", renewErr)
		}
		if _, err := b.TryAcquire(ctx, r, 30*time.Second); !errors.Is(err, tenure.ErrHeld) {
			t.Fatalf("B after the crash: %v; want ErrHeld", err)
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lb, err := b.TryAcquire(ctx, r, 30*time.Second)
		if err != nil || lb.Token() <= la.Token() {
			t.Fatalf("B after A's release: %v (A's token %d)", err, la.Token())
		}
	})
}
