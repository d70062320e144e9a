package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/mysql"
	"github.com/tenure-go/tenure/store/storetest"
)

// dsn returns $TENURE_MYSQL or skips the test.
func dsn(tb testing.TB) string { return testserver.Env(tb, "TENURE_MYSQL", "mariadb") }

var initOnce sync.Once

// open returns a store on $TENURE_MYSQL with the schema created, closed
// at the end of the test.
func open(tb testing.TB, mod ...func(*mysql.Config)) *mysql.Store {
	tb.Helper()
	var initErr error
	initOnce.Do(func() { initErr = mysql.Init(testserver.Ctx(tb), config(tb)) })
	if initErr != nil {
		tb.Fatal(initErr)
	}
	return testserver.Open(tb, dsn(tb), mysql.ParseURL, mysql.Open, mod...)
}

// config returns the Config of $TENURE_MYSQL, changed by mod.
func config(tb testing.TB, mod ...func(*mysql.Config)) mysql.Config {
	tb.Helper()
	cfg, err := mysql.ParseURL(dsn(tb))
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range mod {
		m(&cfg)
	}
	return cfg
}

// attr names the store's connections (connection attributes, which
// performance_schema shows) and, more usefully here, gives them a
// program name the tests find in the process list through their user
// variable: see connIDs.
func withConns(n int) func(*mysql.Config) { return func(c *mysql.Config) { c.MaxConns = n } }

var cfg = storetest.Config{
	New: func(t *testing.T) driver.Store { return open(t) },
	// Expiry is exact to the microsecond on the database's clock; the slack
	// covers only the test's polling.
	ShortTTL:    300 * time.Millisecond,
	ExpirySlack: 250 * time.Millisecond,
	InvalidTTLs: []time.Duration{time.Nanosecond, time.Microsecond - 1},
}

func TestConformance(t *testing.T) {
	dsn(t) // skip once, not in every subtest
	storetest.Run(t, cfg)
}

// connIDs returns the connection ids of the store's pool: every
// connection it holds open (the test keeps them busy to find them all).
func connIDs(t *testing.T, s *mysql.Store, n int) []int64 {
	t.Helper()
	ctx := testserver.Ctx(t)
	var ids []int64
	var conns []interface{ Close() error }
	for range n {
		c, err := s.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var id int64
		if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, c := range conns {
		c.Close()
	}
	return ids
}

// kill kills the connections ids with KILL CONNECTION, as an operator, an
// idle-connection cull or a failover would.
func kill(t *testing.T, admin *mysql.Store, ids []int64) {
	t.Helper()
	for _, id := range ids {
		if _, err := admin.DB().ExecContext(testserver.Ctx(t), fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
			t.Fatalf("KILL CONNECTION %d: %v", id, err)
		}
	}
}

// TestCaseC09ConnectionKilled: the database kills the holder's connections
// (KILL CONNECTION). The lease is not tied to a connection: it stays in
// the table unchanged, nobody else is granted it, the holder's next renewal
// goes through a new connection, and after the holder releases, a waiter
// is granted at once (woken by its poll).
func TestCaseC09ConnectionKilled(t *testing.T) {
	admin := open(t)
	holder := open(t, withConns(2))
	waiter := open(t)
	testserver.ConnectionsKilled(t, admin, holder, waiter, 30*time.Second, func() {
		kill(t, admin, connIDs(t, holder, 2))
	}, 3, true)
}

// TestLostReplyIsUnknownOutcome: the reply to an applied statement is lost
// (a proxy drops server-to-client bytes); the store reports an unknown
// outcome, never "not acquired", and the write was applied.
func TestLostReplyIsUnknownOutcome(t *testing.T) {
	ctx := testserver.Ctx(t)
	direct := open(t)
	s, proxy := proxied(t, 1)
	testserver.LostReplies(ctx, t, s, direct, proxy, 500*time.Millisecond, 5*time.Second)
}

// proxied returns a store whose connections (at most maxConns, 0 for the
// default) go through a netfault proxy, closed when the test ends.
func proxied(t *testing.T, maxConns int) (*mysql.Store, *netfault.Proxy) {
	t.Helper()
	base := config(t)
	proxy, err := netfault.Start(base.MySQL.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	s := open(t, func(c *mysql.Config) {
		c.MySQL.Addr = proxy.Addr()
		c.MaxConns = maxConns
	})
	return s, proxy
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
	testserver.FailsFast(t, config(t).MySQL.Addr,
		func(addr string) string { return "mysql://tenure@" + addr + "/tenure?timeout=1s" },
		mysql.OpenURL)
}

// TestConnectErrorShowsNoPassword: a wrong password, and an unreachable
// server, give errors that name the user and address but not the password.
func TestConnectErrorShowsNoPassword(t *testing.T) {
	addr := config(t).MySQL.Addr
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, raw := range []string{
		"mysql://tenure:s3cr%2Fet-pw@" + addr + "/tenure?timeout=2s",
		"mysql://nobody:s3cr%2Fet-pw@" + addr + "/tenure?timeout=2s",
		"mysql://tenure:s3cr%2Fet-pw@" + closed + "/tenure?timeout=2s",
	} {
		_, err := mysql.OpenURL(context.Background(), raw)
		if err == nil {
			continue // the server accepts any password for tenure
		}
		msg := err.Error()
		if strings.Contains(msg, "s3cr") || strings.Contains(msg, "et-pw") {
			t.Errorf("%q shows the password", msg)
		}
		if !strings.Contains(msg, "@") {
			t.Errorf("%q does not name the user and address", msg)
		}
		t.Log(msg)
	}
}

func TestParseURL(t *testing.T) {
	for _, bad := range []string{
		"", "postgres://x/y", "mysql://h:notaport/db", "mysql://h:0/db", "mysql://h:65536/db", "mysql://h/db?bogus=1",
		"mysql://h/db?sql_mode=ANSI", "mysql://h/db?clientFoundRows=true", "mysql://h/db?multiStatements=true",
		"mysql://h/db?interpolateParams=false", "mysql://h/db?charset=latin1", "mysql://h", "mysql://h/", "mysql://h/a/b",
		"mysql://h1,h2/db", "mysql://h/db?table=bad-name", "mysql://h/db?poll_interval=-1s", "mysql://h/db?poll_interval=x",
		"mysql://h/db?wsrep_sync_wait=x", "mysql://h/db?ca=/nonexistent.pem", "mysql://u:p@ss@h/db", "mysql:/u:p@h/db",
		"mysql://h/db?timeout=x", "mysql://h/db?max_conns=0", "mysql://h/db?max_conns=x",
	} {
		if _, err := mysql.ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q): no error", bad)
		} else if strings.Contains(err.Error(), "ss@h") {
			t.Errorf("ParseURL(%q): %v shows the password", bad, err)
		}
	}
	c, err := mysql.ParseURL("mariadb://u:p%40ss%2Fw@db.example:3307/leases?table=locks.t1&poll_interval=20ms&timeout=3s&readTimeout=4s&tls=skip-verify&wsrep_sync_wait=3&max_conns=16")
	if err != nil {
		t.Fatal(err)
	}
	m := c.MySQL
	if m.User != "u" || m.Passwd != "p@ss/w" || m.Addr != "db.example:3307" || m.DBName != "leases" || m.Timeout != 3*time.Second ||
		m.ReadTimeout != 4*time.Second || m.TLSConfig != "skip-verify" || m.Params["wsrep_sync_wait"] != "3" ||
		c.Table != "locks.t1" || c.PollInterval != 20*time.Millisecond || c.MaxConns != 16 {
		t.Fatalf("parsed %+v / %+v", c, m)
	}
	if c, err := mysql.ParseURL("mysql://[::1]/db?poll_interval=off"); err != nil || c.MySQL.Addr != "[::1]:3306" || c.PollInterval >= 0 {
		t.Fatalf("IPv6 host, default port, polling off: %+v, %v", c, err)
	}
	if _, err := mysql.Open(context.Background(), mysql.Config{DSN: "u@tcp(127.0.0.1:1)/d", Table: "bad-name"}); err == nil {
		t.Fatal("Open with a bad table name: no error")
	}
}

// TestInitIdempotentAndMissingSchema: Init may run concurrently and again;
// a store on a table that does not exist says to run `tenure init`.
func TestInitIdempotentAndMissingSchema(t *testing.T) {
	ctx := testserver.Ctx(t)
	table := fmt.Sprintf("tenure_init_test_%d", time.Now().UnixNano())
	withTable := func(c *mysql.Config) { c.Table = table }
	s := open(t, withTable)
	defer func() {
		_, _ = s.DB().ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table+", "+table+"_tokens, "+table+"_waits")
	}()
	owner, _ := naming.NewOwner("x")
	if _, err := s.Acquire(ctx, "r", owner, time.Minute); !errors.Is(err, mysql.ErrNoSchema) || !errors.Is(err, driver.ErrNoStore) {
		t.Fatalf("Acquire without the table: %v; want ErrNoSchema and driver.ErrNoStore", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- mysql.Init(ctx, config(t, withTable)) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Init: %v", err)
		}
	}
	if err := mysql.Init(ctx, config(t, withTable)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "r", owner, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// TestServerRestart (TENURE_SERVER_FAULTS=1, with the server from
// scripts/mariadb): the server is killed (SIGKILL) and restarted while A
// holds a lease. The lease is durable: after the restart A renews it with
// the same token, B is still refused, and after A's release B's token is
// greater. Never two holders.
func TestServerRestart(t *testing.T) {
	dsn(t)
	script := testserver.ServerScript(t, "mariadb")
	ctx := testserver.Ctx(t)
	s := open(t)
	r := testserver.Resource(t)
	a := testserver.Locker(t, s, tenure.WithRenewInterval(2*time.Second))
	b := testserver.Locker(t, s)
	la, err := a.TryAcquire(ctx, r, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	testserver.Run(t, script, "restart")
	if _, err := b.TryAcquire(ctx, r, 30*time.Second); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("B after the restart: %v; want ErrHeld", err)
	}
	for i := 0; ; i++ {
		err := la.Renew(ctx)
		if err == nil {
			break
		}
		if errors.Is(err, tenure.ErrLeaseLost) || i == 20 {
			t.Fatalf("A's renewal after the restart: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	testserver.HandOver(ctx, t, la, b, r)
}

func BenchmarkWakeOnRelease(b *testing.B) {
	testserver.BenchWakeOnRelease(b, func(tb testing.TB) driver.Store { return open(tb) })
}

// BenchmarkWaiterBesideLoopingHolder: a waiter on another Store learns of
// a release only from a poll that finds the resource free (see
// docs/store-mysql.md, Wake-ups).
func BenchmarkWaiterBesideLoopingHolder(b *testing.B) {
	testserver.BenchWaiterBesideLoopingHolder(b, func(tb testing.TB) driver.Store { return open(tb) })
}
