package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/store/postgres"
	"github.com/tenure-go/tenure/store/storetest"
)

// dsn returns $TENURE_POSTGRES or skips the test.
func dsn(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("TENURE_POSTGRES")
	if u == "" {
		tb.Skip(`TENURE_POSTGRES is not set: these tests need a real PostgreSQL server; ` +
			`start one with "scripts/postgres start" and run eval "$(scripts/postgres env)"`)
	}
	return u
}

var initOnce sync.Once

// open returns a store on $TENURE_POSTGRES with the schema created, closed
// at the end of the test.
func open(tb testing.TB, mod ...func(*postgres.Config)) *postgres.Store {
	tb.Helper()
	cfg, err := postgres.ParseURL(dsn(tb))
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range mod {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.New(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	var initErr error
	initOnce.Do(func() { initErr = s.Init(ctx) })
	if initErr != nil {
		tb.Fatal(initErr)
	}
	return s
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
}

func TestConformance(t *testing.T) {
	dsn(t) // skip once, not in every subtest
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

// terminate kills, with pg_terminate_backend, every backend whose
// application_name is app, and returns how many it killed.
func terminate(t *testing.T, admin *postgres.Store, where string, args ...any) int {
	t.Helper()
	var n int
	err := admin.Pool().QueryRow(ctxT(t), `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
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
	ctx := ctxT(t)
	admin := open(t)
	holderStore := open(t, appName("tenure-c09-holder"))
	waiterStore := open(t, appName("tenure-c09-waiter"))
	r := resource(t)
	a := locker(t, holderStore)
	b := locker(t, waiterStore, tenure.WithRetry(time.Hour, time.Hour))
	la, err := a.TryAcquire(ctx, r, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n := terminate(t, admin, "application_name = $1", "tenure-c09-holder"); n == 0 {
		t.Fatal("no backend of the holder was found to terminate")
	}
	rec, err := admin.Get(ctx, r)
	if err != nil || rec.Owner != la.Owner() || rec.Token != la.Token() {
		t.Fatalf("after the holder's backends were killed: Get = %+v, %v; want owner %s token %d", rec, err, a.Owner(), la.Token())
	}
	if _, err := b.TryAcquire(ctx, r, 30*time.Second); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("B's TryAcquire after A's connection died: %v; want ErrHeld", err)
	}
	// Renewal goes through a new connection and keeps the same lease.
	if err := la.Renew(ctx); err != nil {
		t.Fatalf("A's renewal after its backends were killed: %v", err)
	}
	if err := la.Err(); err != nil {
		t.Fatalf("A's lease: %v", err)
	}
	rec, err = admin.Get(ctx, r)
	if err != nil || rec.Owner != la.Owner() || rec.Token != la.Token() {
		t.Fatalf("after A's renewal: Get = %+v, %v", rec, err)
	}
	// Kill again, then release: the release goes through too, and the
	// waiter (who polls only once an hour) is woken by the notification.
	terminate(t, admin, "application_name = $1", "tenure-c09-holder")
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
		t.Fatalf("A's release: %v", err)
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
// within a moment of the release, by the NOTIFY.
func TestWakeOnRelease(t *testing.T) {
	s := open(t)
	d := wakeOnce(t, s, s, resource(t))
	if d > 2*time.Second {
		t.Fatalf("waiter granted %v after the release", d)
	}
	t.Logf("granted %v after the release", d)
}

// TestNotificationsSurviveListenerLoss: the listening connection is killed;
// the store reconnects and a later release still wakes a waiter.
func TestNotificationsSurviveListenerLoss(t *testing.T) {
	admin := open(t)
	s := open(t, appName("tenure-listener-test"))
	ctx := ctxT(t)
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
	d := wakeOnce(t, s, s, resource(t))
	if d > 2*time.Second {
		t.Fatalf("waiter granted %v after the release", d)
	}
}

// TestLostReplyIsUnknownOutcome: the reply to an applied statement is lost
// (a proxy drops server-to-client bytes); the store reports an unknown
// outcome, never "not acquired", and the write was applied.
func TestLostReplyIsUnknownOutcome(t *testing.T) {
	ctx := ctxT(t)
	base, err := pgxpool.ParseConfig(dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.Start(fmt.Sprintf("%s:%d", base.ConnConfig.Host, base.ConnConfig.Port))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	direct := open(t)
	s := open(t, func(c *postgres.Config) {
		c.Pool.ConnConfig.Host = "127.0.0.1"
		fmt.Sscanf(proxy.Addr()[strings.LastIndex(proxy.Addr(), ":")+1:], "%d", &c.Pool.ConnConfig.Port)
		c.Pool.ConnConfig.Fallbacks = nil
		c.Pool.MaxConns = 1
	})
	r := resource(t)
	owner, _ := tenure.NewOwner("lost-reply")
	// Warm the connection's statement cache: otherwise the lost reply is
	// the one to the statement's preparation, and nothing is applied.
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
	}
	warmUp()
	proxy.SetMode(netfault.DropReplies)
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = s.Acquire(cctx, r, owner, time.Minute)
	cancel()
	if !errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("Acquire whose reply was lost: %v; want ErrUnknownOutcome", err)
	}
	rec, err := direct.Get(ctx, r)
	if err != nil || rec.Owner != owner {
		t.Fatalf("the lost acquire was applied, but Get = %+v, %v", rec, err)
	}
	warmUp() // the lost reply closed the connection
	proxy.SetMode(netfault.DropReplies)
	cctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
	err = s.Release(cctx, r, owner, rec.Token)
	cancel()
	if !errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("Release whose reply was lost: %v; want ErrUnknownOutcome", err)
	}
	if _, err := direct.Get(ctx, r); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("the lost release was applied, but Get = %v", err)
	}
	// A black hole: calls end with the context, as unknown outcomes.
	proxy.SetMode(netfault.Blackhole)
	cctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	_, err = s.Acquire(cctx, r, owner, time.Minute)
	cancel()
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("Acquire into a black hole: %v after %v", err, time.Since(start))
	}
}

// TestUnreachableFailsFast: Open against a port nobody listens on, or a
// server that never answers, fails within the connect timeout.
func TestUnreachableFailsFast(t *testing.T) {
	base, err := pgxpool.ParseConfig(dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.Start(fmt.Sprintf("%s:%d", base.ConnConfig.Host, base.ConnConfig.Port))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.SetMode(netfault.Blackhole)
	for name, url := range map[string]string{
		"refused":    "postgres://tenure@127.0.0.1:1/tenure?sslmode=disable&connect_timeout=1",
		"black hole": "postgres://tenure@" + proxy.Addr() + "/tenure?sslmode=disable&connect_timeout=1",
	} {
		start := time.Now()
		s, err := postgres.OpenURL(context.Background(), url)
		if err == nil {
			s.Close()
			t.Fatalf("%s: Open succeeded", name)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%s: Open took %v", name, d)
		}
		t.Logf("%s: %v", name, err)
	}
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
	if _, err := postgres.New(context.Background(), postgres.Config{DSN: "postgres://x/y", Table: "bad-name"}); err == nil {
		t.Fatal("New with a bad table name: no error")
	}
}

// TestInitIdempotentAndMissingSchema: Init may run concurrently and again;
// a store on a table that does not exist says to run `tenure init`.
func TestInitIdempotentAndMissingSchema(t *testing.T) {
	ctx := ctxT(t)
	table := fmt.Sprintf("tenure_init_test_%d", time.Now().UnixNano())
	s := open(t, func(c *postgres.Config) { c.Table = table })
	defer s.Pool().Exec(context.Background(), "DROP TABLE IF EXISTS "+table) //nolint:errcheck
	owner, _ := tenure.NewOwner("x")
	if _, err := s.Acquire(ctx, "r", owner, time.Minute); !errors.Is(err, postgres.ErrNoSchema) {
		t.Fatalf("Acquire without the table: %v; want ErrNoSchema", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- s.Init(ctx) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Init: %v", err)
		}
	}
	if err := s.Init(ctx); err != nil {
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
	script := serverScript(t, "postgres")
	ctx := ctxT(t)
	s := open(t)
	r := resource(t)
	a := locker(t, s, tenure.WithRenewInterval(2*time.Second))
	b := locker(t, s)
	la, err := a.TryAcquire(ctx, r, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	run(t, script, "restart")
	if _, err := b.TryAcquire(ctx, r, 20*time.Second); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("B after the restart: %v; want ErrHeld", err)
	}
	if err := la.Renew(ctx); err != nil {
		t.Fatalf("A's renewal after the restart: %v", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, r, 20*time.Second)
	if err != nil || lb.Token() <= la.Token() {
		t.Fatalf("B after A's release: %v (token %v, A's %d)", err, lb, la.Token())
	}
}
