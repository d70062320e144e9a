package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/store/etcd"
	"github.com/tenure-go/tenure/store/storetest"
)

// url returns $TENURE_ETCD as an etcd:// URL (scripts/etcd prints a bare
// host:port), or skips the test.
func url(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("TENURE_ETCD")
	if u == "" {
		tb.Skip(`TENURE_ETCD is not set: these tests need a real etcd; ` +
			`start one with "scripts/etcd start" and run eval "$(scripts/etcd env)"`)
	}
	if !strings.HasPrefix(u, "etcd://") {
		u = "etcd://" + u
	}
	return u
}

// open returns a store on $TENURE_ETCD, closed at the end of the test.
func open(tb testing.TB, mod ...func(*etcd.Config)) *etcd.Store {
	tb.Helper()
	cfg, err := etcd.ParseURL(url(tb))
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range mod {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := etcd.New(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

var cfg = storetest.Config{
	New: func(t *testing.T) driver.Store { return open(t) },
	// The smallest TTL etcd accepts from tenure is 1 s. etcd raises it to
	// its minimum lease TTL (2 s with the default election timeout) and
	// revokes expired leases every 500 ms, so a 1 s lease vanishes 2.0 to
	// 2.5 s after it was granted (measured: TestExpiryTiming): the slack is
	// 1.5 s, plus the test's polling.
	ShortTTL:    time.Second,
	ExpirySlack: 1600 * time.Millisecond,
	InvalidTTLs: []time.Duration{time.Nanosecond, 500 * time.Millisecond, 999 * time.Millisecond},
}

func TestConformance(t *testing.T) {
	url(t) // skip once, not in every subtest
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

// proxied returns a store whose connections go through a netfault proxy.
func proxied(t *testing.T) (*etcd.Store, *netfault.Proxy) {
	t.Helper()
	base, err := etcd.ParseURL(url(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.Start(base.Client.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	return open(t, func(c *etcd.Config) {
		c.Client.Endpoints = []string{proxy.Addr()}
		c.Client.DialTimeout = 2 * time.Second
	}), proxy
}

// TestCaseC09ConnectionReset: a tenure lease on etcd is an etcd lease of its
// own, kept alive by the holder's renewals, not a session bound to a
// connection. The holder's connection is reset; the lease is unchanged,
// nobody else is granted it, the holder renews through a new connection, and
// after its release a waiter is granted at once.
func TestCaseC09ConnectionReset(t *testing.T) {
	ctx := ctxT(t)
	admin := open(t)
	hs, proxy := proxied(t)
	r := resource(t)
	a := locker(t, hs)
	b := locker(t, admin, tenure.WithRetry(time.Hour, time.Hour))
	la, err := a.TryAcquire(ctx, r, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Reset()
	if rec, err := admin.Get(ctx, r); err != nil || rec.Owner != la.Owner() || rec.Token != la.Token() {
		t.Fatalf("after the holder's connection was reset: Get = %+v, %v", rec, err)
	}
	if _, err := b.TryAcquire(ctx, r, 10*time.Second); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("B: %v; want ErrHeld", err)
	}
	var renewErr error
	for i := 0; i < 5; i++ { // the first call may meet the broken connection
		if renewErr = la.Renew(ctx); renewErr == nil {
			break
		}
		if errors.Is(renewErr, tenure.ErrLeaseLost) {
			t.Fatalf("renewal after the reset: %v", renewErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if renewErr != nil {
		t.Fatalf("renewal through a new connection: %v", renewErr)
	}
	got := make(chan *tenure.Lease, 1)
	waiting := make(chan struct{})
	go func() {
		var once sync.Once
		l, err := b.Acquire(ctx, r, 10*time.Second, tenure.OnWait(func(*tenure.HeldError, time.Duration) { once.Do(func() { close(waiting) }) }))
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
// within a moment of the release, by the watch.
func TestWakeOnRelease(t *testing.T) {
	s := open(t)
	d := wakeOnce(t, s, s, resource(t))
	if d > 2*time.Second {
		t.Fatalf("waiter granted %v after the release", d)
	}
	t.Logf("granted %v after the release", d)
}

// TestWakeOnExpiry: the watch also sees the key deleted when its holder's
// etcd lease expires.
func TestWakeOnExpiry(t *testing.T) {
	s := open(t)
	ctx := ctxT(t)
	r := resource(t)
	other, _ := tenure.NewOwner("gone")
	start := time.Now()
	if _, err := s.Acquire(ctx, r, other, time.Second); err != nil {
		t.Fatal(err)
	}
	b := locker(t, s, tenure.WithRetry(time.Hour, time.Hour))
	lb, err := b.Acquire(ctx, r, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	t.Logf("waiter granted %v after a 1s lease was taken", d)
	if d < time.Second || d > 4*time.Second {
		t.Fatalf("waiter granted %v after a 1s lease was taken", d)
	}
	_ = lb.Release(ctx)
}

// TestExpiryTiming measures when leases of 1 s, 2 s and 3 s really
// disappear from etcd: never before the requested TTL (the store keeps a
// lease at least that long), and at most 1.5 s after max(TTL, etcd's
// minimum of 2 s).
func TestExpiryTiming(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 10 s")
	}
	s := open(t)
	ctx := ctxT(t)
	for _, ttl := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		r := resource(t) + "/" + ttl.String()
		owner, _ := tenure.NewOwner("timing")
		tSend := time.Now()
		if _, err := s.Acquire(ctx, r, owner, ttl); err != nil {
			t.Fatal(err)
		}
		for {
			_, err := s.Get(ctx, r)
			if errors.Is(err, tenure.ErrNotHeld) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		gone := time.Since(tSend)
		t.Logf("TTL %v: gone %v after the acquire was sent", ttl, gone.Round(time.Millisecond))
		if gone < ttl {
			t.Fatalf("TTL %v lease gone after %v: shorter than requested", ttl, gone)
		}
		if limit := max(ttl, 2*time.Second) + 1500*time.Millisecond; gone > limit {
			t.Fatalf("TTL %v lease lived %v, more than %v", ttl, gone, limit)
		}
	}
}

// TestLostReplyIsUnknownOutcome: the reply to an applied transaction is lost
// (a proxy drops server-to-client bytes): the store reports an unknown
// outcome, never "released" or "lost", and the release was applied.
func TestLostReplyIsUnknownOutcome(t *testing.T) {
	ctx := ctxT(t)
	direct := open(t)
	s, proxy := proxied(t)
	r := resource(t)
	owner, _ := tenure.NewOwner("lost-reply")
	rec, err := s.Acquire(ctx, r, owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetMode(netfault.DropReplies)
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = s.Release(cctx, r, owner, rec.Token)
	cancel()
	if !errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("Release whose reply was lost: %v; want ErrUnknownOutcome", err)
	}
	if _, err := direct.Get(ctx, r); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("the lost release was applied, but Get = %v", err)
	}
	// An acquire whose replies are lost is never reported as held or
	// granted.
	cctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = s.Acquire(cctx, r, owner, time.Minute)
	cancel()
	if err == nil || errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("Acquire whose replies were lost: %v", err)
	}
}

// TestUnreachableFailsFast: New against a refused port or a black hole
// fails within the dial timeout.
func TestUnreachableFailsFast(t *testing.T) {
	base, err := etcd.ParseURL(url(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.Start(base.Client.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.SetMode(netfault.Blackhole)
	for name, u := range map[string]string{
		"refused":    "etcd://127.0.0.1:1?dial_timeout=1s",
		"black hole": "etcd://" + proxy.Addr() + "?dial_timeout=1s",
	} {
		start := time.Now()
		s, err := etcd.OpenURL(context.Background(), u)
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
	for _, bad := range []string{"", "http://h:2379", "etcd://", "etcd://h", "etcd://h:x", "etcd://h:2379/path",
		"etcd://h:2379?bogus=1", "etcd://h:2379?tls=maybe", "etcd://h:2379?cert=/c.pem", "etcd://h:2379?ca=/does/not/exist",
		"etcd://h:2379?dial_timeout=-1s"} {
		if _, err := etcd.ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q): no error", bad)
		}
	}
	cfg, err := etcd.ParseURL("etcd://root:s%40cret@h1:2379,h2:2379,[::1]:2379/?tls=true&dial_timeout=2s&prefix=/app/locks/")
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Client
	if fmt.Sprint(c.Endpoints) != "[h1:2379 h2:2379 [::1]:2379]" || c.Username != "root" || c.Password != "s@cret" ||
		c.TLS == nil || c.DialTimeout != 2*time.Second || cfg.Prefix != "/app/locks/" {
		t.Fatalf("parsed %+v", cfg)
	}
	cfg, err = etcd.ParseURL("etcd://h:2379?username=u&password=p")
	if err != nil || cfg.Client.Username != "u" || cfg.Client.Password != "p" || cfg.Client.TLS != nil {
		t.Fatalf("parsed %+v, %v", cfg, err)
	}
}

// TestRenewWithLongerTTL: a renewal with a longer TTL than the lease was
// granted with moves the key to a new etcd lease, keeping the token.
func TestRenewWithLongerTTL(t *testing.T) {
	s := open(t)
	ctx := ctxT(t)
	r := resource(t)
	owner, _ := tenure.NewOwner("longer")
	rec, err := s.Acquire(ctx, r, owner, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, r, owner, rec.Token, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	got, err := s.Get(ctx, r)
	if err != nil || got.Token != rec.Token || got.TTL != 30*time.Second {
		t.Fatalf("after renewing with 30s: %+v, %v", got, err)
	}
	// The same owner re-acquiring with a shorter TTL keeps the lease and token.
	again, err := s.Acquire(ctx, r, owner, 5*time.Second)
	if err != nil || again.Token != rec.Token {
		t.Fatalf("re-acquire: %+v, %v", again, err)
	}
}

// TestServerRestart (TENURE_SERVER_FAULTS=1, with the server from
// scripts/etcd): etcd is killed (SIGKILL) and restarted while A holds a
// lease. The lease is durable (a restart extends etcd leases by their TTL):
// A renews it with the same token, B is refused, and after A's release B's
// token is greater.
func TestServerRestart(t *testing.T) {
	url(t)
	script := serverScript(t, "etcd")
	ctx := ctxT(t)
	s := open(t)
	r := resource(t)
	a, b := locker(t, s), locker(t, s)
	la, err := a.TryAcquire(ctx, r, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	run(t, script, "restart")
	var renewErr error
	for i := 0; i < 20; i++ {
		if renewErr = la.Renew(ctx); renewErr == nil || errors.Is(renewErr, tenure.ErrLeaseLost) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if renewErr != nil {
		t.Fatalf("A's renewal after the restart: %v", renewErr)
	}
	if _, err := b.TryAcquire(ctx, r, 20*time.Second); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("B after the restart: %v; want ErrHeld", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, r, 20*time.Second)
	if err != nil || lb.Token() <= la.Token() {
		t.Fatalf("B after A's release: %v (A's token %d)", err, la.Token())
	}
}
