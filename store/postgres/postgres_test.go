package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/postgres"
	"github.com/tenure-go/tenure/store/storetest"
)

// dsn returns $TENURE_POSTGRES or skips the test.
func dsn(tb testing.TB) string { return testserver.Env(tb, "TENURE_POSTGRES", "postgres") }

var initOnce sync.Once

// open returns a store on $TENURE_POSTGRES with the schema created, closed
// at the end of the test.
func open(tb testing.TB, mod ...func(*postgres.Config)) *postgres.Store {
	tb.Helper()
	s := testserver.Open(tb, dsn(tb), postgres.ParseURL, postgres.Open, mod...)
	var initErr error
	initOnce.Do(func() { initErr = postgres.Init(testserver.Ctx(tb), config(tb)) })
	if initErr != nil {
		tb.Fatal(initErr)
	}
	return s
}

// config returns the Config of $TENURE_POSTGRES, changed by mod.
func config(tb testing.TB, mod ...func(*postgres.Config)) postgres.Config {
	tb.Helper()
	cfg, err := postgres.ParseURL(dsn(tb))
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range mod {
		m(&cfg)
	}
	return cfg
}

func appName(name string) func(*postgres.Config) {
	return func(c *postgres.Config) { c.Pool.ConnConfig.RuntimeParams["application_name"] = name }
}

var cfg = storetest.Config{
	New: func(t *testing.T) driver.Store { return open(t) },
	// Expiry is exact to the millisecond on the database's clock; the slack
	// covers only the test's polling.
	ShortTTL:    300 * time.Millisecond,
	ExpirySlack: 250 * time.Millisecond,
	InvalidTTLs: []time.Duration{time.Nanosecond, time.Millisecond - 1},
	Reopen:      func(t *testing.T, _ driver.Store) driver.Store { return open(t) },
}

func TestConformance(t *testing.T) {
	dsn(t) // skip once, not in every subtest
	storetest.Run(t, cfg)
}

// terminate kills, with pg_terminate_backend, every backend whose
// application_name is app, and returns how many it killed.
func terminate(t *testing.T, admin *postgres.Store, where string, args ...any) int {
	t.Helper()
	var n int
	err := admin.Pool().QueryRow(testserver.Ctx(t), `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND `+where+`) k`, args...).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCaseC09BackendKilled: the database kills the holder's connections
// (pg_terminate_backend, as an idle-session cull or a failover would). The
// lease is not tied to a session: it stays in the table unchanged, nobody
// else is granted it, the holder's next renewal goes through a new
// connection, and after the holder releases, a waiter is granted at once.
func TestCaseC09BackendKilled(t *testing.T) {
	admin := open(t)
	holder := open(t, appName("tenure-c09-holder"))
	waiter := open(t, appName("tenure-c09-waiter"))
	// Killed again before the release: the release goes through too, and
	// the waiter is woken by the notification.
	testserver.ConnectionsKilled(t, admin, holder, waiter, 30*time.Second, func() {
		if n := terminate(t, admin, "application_name = $1", "tenure-c09-holder"); n == 0 {
			t.Fatal("no backend of the holder was found to terminate")
		}
	}, 1, true)
}

// TestNotificationsSurviveListenerLoss: the listening connection is killed;
// the store reconnects and a later release still wakes a waiter.
func TestNotificationsSurviveListenerLoss(t *testing.T) {
	admin := open(t)
	s := open(t, appName("tenure-listener-test"))
	ctx := testserver.Ctx(t)
	ch, stop, err := s.Subscribe(ctx, "warm-up")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if n := terminate(t, admin, "application_name = $1 AND query ILIKE 'LISTEN%'", "tenure-listener-test"); n != 1 {
		t.Fatalf("terminated %d listening backends, want 1", n)
	}
	// The reconnection wakes subscribers: a release may have been missed.
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after the listener reconnected")
	}
	d := testserver.WakeOnce(t, s, s, testserver.Resource(t))
	if d > 2*time.Second {
		t.Fatalf("waiter granted %v after the release", d)
	}
}

// TestLostReplyIsUnknownOutcome: the reply to an applied statement is lost
// (a proxy drops server-to-client bytes); the store reports an unknown
// outcome, never "not acquired", and the write was applied.
func TestLostReplyIsUnknownOutcome(t *testing.T) {
	ctx := testserver.Ctx(t)
	direct := open(t)
	s, proxy := proxied(t, 1)
	// The warm-up fills the connection's statement cache: otherwise the
	// lost reply is the one to the statement's preparation, and nothing is
	// applied.
	testserver.LostReplies(ctx, t, s, direct, proxy, 500*time.Millisecond, 5*time.Second)
}

// proxied returns a store whose connections (at most maxConns, 0 for the
// default) go through a netfault proxy, closed when the test ends.
func proxied(t *testing.T, maxConns int32, mod ...func(*postgres.Config)) (*postgres.Store, *netfault.Proxy) {
	t.Helper()
	base, err := pgxpool.ParseConfig(dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.Start(fmt.Sprintf("%s:%d", base.ConnConfig.Host, base.ConnConfig.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	s := open(t, append([]func(*postgres.Config){func(c *postgres.Config) {
		c.Pool.ConnConfig.Host = "127.0.0.1"
		fmt.Sscanf(proxy.Addr()[strings.LastIndex(proxy.Addr(), ":")+1:], "%d", &c.Pool.ConnConfig.Port)
		c.Pool.ConnConfig.Fallbacks = nil
		if maxConns > 0 {
			c.Pool.MaxConns = maxConns
		}
	}}, mod...)...)
	return s, proxy
}

// TestHalfOpenListener: the listening connection goes half-open (a proxy
// drops its bytes, and only its, without FIN or reset). The store pings it
// after ListenCheck of silence, replaces it when the ping is not answered,
// says so in its log, and wakes its waiters, so the release whose
// notification was lost still reaches the waiter, and later releases wake
// later waiters through the new connection.
func TestHalfOpenListener(t *testing.T) {
	var log testserver.LogRecorder
	s, proxy := proxied(t, 0, func(c *postgres.Config) { c.Logger = log.Logger() })
	postgres.SetListenCheck(s, time.Second)
	direct := open(t)
	testserver.HalfOpenNotifications(t, s, direct, time.Minute, func() int { return proxy.Silence([]byte("LISTEN")) }, 20*time.Second)
	if !log.Has(slog.LevelWarn, "listening connection ended") || !log.Has(slog.LevelInfo, "listening again") {
		t.Errorf("the store did not log the silent connection and its replacement; it logged:\n%s", log.String())
	}
}

// TestBoundedWhenPartitioned: a Locker's calls end by their bounds when
// new connections hang.
func TestBoundedWhenPartitioned(t *testing.T) {
	s, proxy := proxied(t, 0)
	testserver.BoundedWhenPartitioned(t, s, proxy)
}

// TestUnreachableFailsFast: Open against a port nobody listens on, or a
// server that never answers, fails within the connect timeout.
func TestUnreachableFailsFast(t *testing.T) {
	base, err := pgxpool.ParseConfig(dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	testserver.FailsFast(t, fmt.Sprintf("%s:%d", base.ConnConfig.Host, base.ConnConfig.Port),
		func(addr string) string {
			return "postgres://tenure@" + addr + "/tenure?sslmode=disable&connect_timeout=1"
		},
		postgres.OpenURL)
}

func TestParseURL(t *testing.T) {
	for _, bad := range []string{"", "mysql://x/y", "postgres://h:notaport/db", "postgres://h/db?sslmode=bogus", "%zz"} {
		if _, err := postgres.ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q): no error", bad)
		}
	}
	cfg, err := postgres.ParseURL("postgresql://u:secret@db.example:6543/leases?sslmode=verify-full&pool_max_conns=7&connect_timeout=3")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pool.ConnConfig.Port != 6543 || cfg.Pool.MaxConns != 7 || cfg.Pool.ConnConfig.ConnectTimeout != 3*time.Second || cfg.Pool.ConnConfig.TLSConfig == nil {
		t.Fatalf("parsed %+v", cfg.Pool)
	}
	if _, err := postgres.Open(context.Background(), postgres.Config{DSN: "postgres://x/y", Table: "bad-name"}); err == nil {
		t.Fatal("Open with a bad table name: no error")
	}
}

// TestInitIdempotentAndMissingSchema: Init may run concurrently and again;
// a store on a table that does not exist says to run `tenure init`.
func TestInitIdempotentAndMissingSchema(t *testing.T) {
	ctx := testserver.Ctx(t)
	table := fmt.Sprintf("tenure_init_test_%d", time.Now().UnixNano())
	withTable := func(c *postgres.Config) { c.Table = table }
	s := open(t, withTable)
	defer s.Pool().Exec(context.Background(), "DROP TABLE IF EXISTS "+table) //nolint:errcheck
	owner, _ := naming.NewOwner("x")
	if _, err := s.Acquire(ctx, "r", owner, time.Minute); !errors.Is(err, postgres.ErrNoSchema) || !errors.Is(err, driver.ErrNoStore) {
		t.Fatalf("Acquire without the table: %v; want ErrNoSchema and driver.ErrNoStore", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- postgres.Init(ctx, config(t, withTable)) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Init: %v", err)
		}
	}
	if err := postgres.Init(ctx, config(t, withTable)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "r", owner, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// TestServerRestart (TENURE_SERVER_FAULTS=1, with the server from
// scripts/postgres): the server is killed (SIGKILL) and restarted while A
// holds a lease. The lease is durable: after the restart A renews it with
// the same token, B is still refused, and after A's release B's token is
// greater. Never two holders.
func TestServerRestart(t *testing.T) {
	dsn(t)
	script := testserver.ServerScript(t, "postgres")
	ctx := testserver.Ctx(t)
	s := open(t)
	r := testserver.Resource(t)
	a := testserver.Locker(t, s, tenure.WithRenewInterval(2*time.Second))
	b := testserver.Locker(t, s)
	la, err := a.TryAcquire(ctx, r, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	testserver.Run(t, script, "restart")
	if _, err := b.TryAcquire(ctx, r, 20*time.Second); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("B after the restart: %v; want ErrHeld", err)
	}
	if err := la.Renew(ctx); err != nil {
		t.Fatalf("A's renewal after the restart: %v", err)
	}
	testserver.HandOver(ctx, t, la, b, r)
}

func BenchmarkWakeOnRelease(b *testing.B) {
	testserver.BenchWakeOnRelease(b, func(tb testing.TB) driver.Store { return open(tb) })
}

// BenchmarkWaiterBesideLoopingHolder: the peer of store/mysql's, with
// release notifications.
func BenchmarkWaiterBesideLoopingHolder(b *testing.B) {
	testserver.BenchWaiterBesideLoopingHolder(b, func(tb testing.TB) driver.Store { return open(tb) })
}
