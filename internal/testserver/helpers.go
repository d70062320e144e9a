package testserver

// Helpers that the tests of the network stores (store/postgres, store/etcd,
// store/redis) share.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/netfault"
)

// Ctx returns a context that ends after two minutes or with the test.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Resource returns a resource name of the test's own: the test's name and
// a random suffix.
func Resource(t testing.TB) string {
	o, _ := naming.NewOwner("r")
	return "tenuretest/" + t.Name() + "/" + tenure.OwnerID(o) + o[len(o)-8:]
}

// Locker returns a Locker on s, closed at the end of the test.
func Locker(t testing.TB, s driver.Store, opts ...tenure.Option) *tenure.Locker {
	t.Helper()
	lk, err := tenure.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = lk.Close(ctx)
	})
	return lk
}

// WakeOnce makes A (on sa) hold r, starts B (on sb, retry interval one
// hour) waiting for it, releases A and returns how long after the release B
// was granted (within 30 s, or the test fails), B's lease released again.
func WakeOnce(tb testing.TB, sa, sb driver.Store, r string) time.Duration {
	tb.Helper()
	ctx := Ctx(tb)
	a := Locker(tb, sa)
	b := Locker(tb, sb, tenure.WithRetry(time.Hour, time.Hour))
	la, err := a.TryAcquire(ctx, r, 30*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	lb, d := grantAfterRelease(ctx, tb, la, b, 30*time.Second)
	if err := lb.Release(ctx); err != nil {
		tb.Fatal(err)
	}
	return d
}

// grantAfterRelease starts b waiting for la's resource, releases la, and
// returns b's lease and how long after the release it was granted; the test
// fails when b is not granted within limit.
func grantAfterRelease(ctx context.Context, tb testing.TB, la *tenure.Lease, b *tenure.Locker, limit time.Duration) (*tenure.Lease, time.Duration) {
	tb.Helper()
	return grantAfter(ctx, tb, la, b, limit, nil)
}

// grantAfter is grantAfterRelease, which calls beforeRelease (when not nil)
// once b waits, just before the release.
func grantAfter(ctx context.Context, tb testing.TB, la *tenure.Lease, b *tenure.Locker, limit time.Duration, beforeRelease func()) (*tenure.Lease, time.Duration) {
	tb.Helper()
	got := make(chan *tenure.Lease, 1)
	waiting := make(chan struct{})
	go func() {
		var once sync.Once
		l, err := b.Acquire(ctx, la.Resource(), la.TTL(), tenure.OnWait(func(*tenure.HeldError, time.Duration) { once.Do(func() { close(waiting) }) }))
		if err != nil {
			tb.Error(err)
		}
		got <- l
	}()
	<-waiting
	if beforeRelease != nil {
		beforeRelease()
	}
	released := time.Now()
	if err := la.Release(ctx); err != nil {
		tb.Fatalf("A's release: %v", err)
	}
	select {
	case lb := <-got:
		if lb == nil {
			tb.FailNow()
		}
		return lb, time.Since(released)
	case <-time.After(limit):
		tb.Fatalf("B not granted within %v of A's release (notification lost?)", limit)
		return nil, 0
	}
}

// HalfOpenNotifications checks that a store notices when its notification
// connection goes half-open, and that no release is lost meanwhile. s
// reaches the server through a proxy, direct without it. B (a Locker on s
// whose backoff is an hour, so that only a notification wakes it before
// the holder's TTL of ttl) waits for a resource that A (on direct) holds;
// then silence silences s's notification connection (netfault's
// Proxy.Silence, returning how many connections it silenced) and A
// releases, a notification that never arrives. B must be granted within
// limit: the store found the connection silent, replaced it and woke its
// waiters, who asked the store. Then a release wakes a new waiter on s
// through the new connection (WakeOnce), before the holder's TTL would
// have. It returns how long after the release B was granted.
func HalfOpenNotifications(t *testing.T, s, direct driver.Store, ttl time.Duration, silence func() int, limit time.Duration) time.Duration {
	t.Helper()
	ctx := Ctx(t)
	r := Resource(t)
	a := Locker(t, direct)
	b := Locker(t, s, tenure.WithRetry(time.Hour, time.Hour))
	la, err := a.TryAcquire(ctx, r, ttl)
	if err != nil {
		t.Fatal(err)
	}
	lb, d := grantAfter(ctx, t, la, b, limit, func() {
		if n := silence(); n < 1 {
			t.Fatalf("silenced %d notification connections; want at least 1", n)
		}
	})
	t.Logf("B granted %v after A's release, its notification lost on a half-open connection", d.Round(time.Millisecond))
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	la2, err := a.TryAcquire(ctx, r, ttl)
	if err != nil {
		t.Fatal(err)
	}
	c := Locker(t, s, tenure.WithRetry(time.Hour, time.Hour))
	lc, d2 := grantAfterRelease(ctx, t, la2, c, ttl/2)
	t.Logf("a new waiter granted %v after the next release", d2.Round(time.Millisecond))
	if err := lc.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}

// LogRecorder is a slog.Handler that keeps every record, for tests that
// check what a store logs.
type LogRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

// Logger returns a logger whose records r keeps.
func (r *LogRecorder) Logger() *slog.Logger { return slog.New(r) }

// Enabled implements slog.Handler: every level.
func (r *LogRecorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (r *LogRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// WithAttrs implements slog.Handler (attributes are not kept).
func (r *LogRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup implements slog.Handler (groups are not kept).
func (r *LogRecorder) WithGroup(string) slog.Handler { return r }

// Has reports whether a record of level or above whose message contains
// substr was logged.
func (r *LogRecorder) Has(level slog.Level, substr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.recs {
		if rec.Level >= level && strings.Contains(rec.Message, substr) {
			return true
		}
	}
	return false
}

// String lists the messages logged, one a line.
func (r *LogRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, rec := range r.recs {
		fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
		rec.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s", a); return true })
		b.WriteByte('\n')
	}
	return b.String()
}

// BenchWakeOnRelease measures the time from a holder's release to the
// grant of a waiter that is woken by the release notification (its backoff
// is an hour), on two stores that open returns. It reports the median and
// 99th percentile.
func BenchWakeOnRelease(b *testing.B, open func(testing.TB) driver.Store) {
	sa, sb := open(b), open(b)
	r := Resource(b)
	var lat []time.Duration
	for b.Loop() {
		lat = append(lat, WakeOnce(b, sa, sb, r))
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ms-p99")
	b.ReportMetric(0, "ns/op")
}

// BenchWaiterBesideLoopingHolder measures how long a waiter on one store
// waits for a resource that a holder on another store (another process)
// holds for 50 ms at a time and acquires again at once after each release,
// with TTLs of 10 s and the default retry. Each wait is capped at 30 s
// (counted as 30 s). It reports the median and the longest wait, and how
// many waits reached the cap.
func BenchWaiterBesideLoopingHolder(b *testing.B, open func(testing.TB) driver.Store) {
	const (
		hold  = 50 * time.Millisecond
		ttl   = 10 * time.Second
		limit = 30 * time.Second
	)
	ctx := Ctx(b)
	holder, waiter := Locker(b, open(b)), Locker(b, open(b))
	r := Resource(b)
	var waits []time.Duration
	capped := 0
	for range b.N {
		stop := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			for {
				l, err := holder.Acquire(ctx, r, ttl)
				if err != nil {
					done <- err
					return
				}
				select {
				case <-stop:
					done <- l.Release(ctx)
					return
				case <-time.After(hold):
				}
				if err := l.Release(ctx); err != nil {
					done <- err
					return
				}
			}
		}()
		time.Sleep(4 * hold)
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, limit)
		l, err := waiter.Acquire(wctx, r, ttl)
		cancel()
		d := time.Since(start)
		close(stop)
		switch {
		case err == nil:
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		case errors.Is(err, context.DeadlineExceeded):
			d, capped = limit, capped+1
		default:
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		waits = append(waits, d)
	}
	if len(waits) == 0 {
		return
	}
	slices.Sort(waits)
	b.ReportMetric(waits[len(waits)/2].Seconds(), "s-median")
	b.ReportMetric(waits[len(waits)-1].Seconds(), "s-max")
	b.ReportMetric(float64(capped), "capped")
	b.ReportMetric(0, "ns/op")
}

// ServerScript returns the path of scripts/NAME when server fault tests are
// enabled, or skips.
func ServerScript(t *testing.T, name string) string {
	t.Helper()
	if os.Getenv("TENURE_SERVER_FAULTS") != "1" {
		t.Skip("set TENURE_SERVER_FAULTS=1 to kill and restart the server from scripts/" + name)
	}
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "scripts", name)
	if _, err := os.Stat(p); err != nil {
		t.Skip(err)
	}
	return p
}

// Run runs script with args, failing the test with its output if it fails.
func Run(t *testing.T, script string, args ...string) {
	t.Helper()
	out, err := exec.Command(script, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, out)
	}
}

// releaseWakesWaiter starts b waiting for la's resource, releases la and
// checks that b is granted within 10 s with a greater
// fencing token: the release went through and woke the waiter.
func releaseWakesWaiter(ctx context.Context, t *testing.T, la *tenure.Lease, b *tenure.Locker) {
	t.Helper()
	lb, d := grantAfterRelease(ctx, t, la, b, 10*time.Second)
	t.Logf("B granted %v after A's release", d)
	if lb.Token() <= la.Token() {
		t.Fatalf("B's token %d <= A's %d", lb.Token(), la.Token())
	}
}

// LostReplies checks that an acquire and a release whose replies are lost
// (the proxy drops server-to-client bytes) are reported as unknown outcomes,
// never as "not acquired" or "lost", and were applied (direct, a store on
// the same server without the proxy, sees them); and that an acquire into
// a black hole ends with its context. s reaches the server through proxy;
// Before each lost call, an acquire and release of another resource with
// the proxy passing readies the store's connection (scripts loaded,
// statements prepared), so that the lost reply is the one to the write
// itself. timeout bounds each lost call;
// the call into the black hole must end within bound.
func LostReplies(ctx context.Context, t *testing.T, s, direct driver.Store, proxy *netfault.Proxy, timeout, bound time.Duration) {
	t.Helper()
	r := Resource(t)
	owner, _ := naming.NewOwner("lost-reply")
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
	cctx, cancel := context.WithTimeout(ctx, timeout)
	_, err := s.Acquire(cctx, r, owner, time.Minute)
	cancel()
	if !errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("Acquire whose reply was lost: %v; want ErrUnknownOutcome", err)
	}
	// The server applies the write in its own time: on a loaded machine it
	// may commit after the client gave up.
	var rec driver.Record
	for deadline := time.Now().Add(bound); ; time.Sleep(20 * time.Millisecond) {
		rec, err = direct.Get(ctx, r)
		if err == nil && rec.Owner == owner {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lost acquire was applied, but Get = %+v, %v", rec, err)
		}
	}
	warmUp() // the lost reply closed the connection
	cctx, cancel = context.WithTimeout(ctx, timeout)
	err = s.Release(cctx, r, owner, rec.Token)
	cancel()
	if !errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("Release whose reply was lost: %v; want ErrUnknownOutcome", err)
	}
	for deadline := time.Now().Add(bound); ; time.Sleep(20 * time.Millisecond) {
		_, err := direct.Get(ctx, r)
		if errors.Is(err, tenure.ErrNotHeld) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lost release was applied, but Get = %v", err)
		}
	}
	// A black hole: calls end with the context.
	proxy.SetMode(netfault.Blackhole)
	cctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	_, err = s.Acquire(cctx, r, owner, time.Minute)
	cancel()
	if err == nil || time.Since(start) > bound {
		t.Fatalf("Acquire into a black hole: %v after %v", err, time.Since(start))
	}
}

// BoundedWhenPartitioned checks that a Locker's calls to store s (connected
// through proxy) end by their bounds when the network is partitioned: the
// store's open connections go silent and are then cut, and new connections
// never complete (netfault.Partition: a dial hangs, as across a real
// partition, where a black hole's accepted connections would let it
// succeed). A driver that opens connections in a goroutine of its own and
// waits for it on ctx.Done() alone (go-redis) must still get a context that
// is cancelled at the bound. TryAcquire (TTL 1 s) ends by TTL·(1−ρ),
// Lease.Renew by the lease's deadline and Lease.Release by the time the
// store would expire the lease, each with an error, plus slack for a
// loaded machine; the lease is lost at its deadline. The partition is over
// when the test ends.
func BoundedWhenPartitioned(t *testing.T, s driver.Store, proxy *netfault.Proxy) {
	t.Helper()
	ctx := context.Background()
	lk := Locker(t, s)
	r := Resource(t)
	const ttl, slack = 2 * time.Second, 1500 * time.Millisecond
	proxy.SetMode(netfault.Pass)
	l, err := lk.TryAcquire(ctx, r, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.SetMode(netfault.Pass)
	proxy.SetMode(netfault.Partition)
	proxy.Reset()
	check := func(what string, bound time.Time, err error) {
		t.Helper()
		if late := time.Since(bound); late > slack {
			t.Errorf("%s with the network partitioned: returned %v after its bound", what, late.Round(time.Millisecond))
		}
		if err == nil {
			t.Errorf("%s with the network partitioned: succeeded", what)
		}
	}
	start := time.Now()
	_, err = lk.TryAcquire(ctx, r+"/other", time.Second)
	check("TryAcquire (TTL 1s)", start.Add(time.Second), err)
	deadline := l.Deadline()
	err = l.Renew(ctx)
	check("Lease.Renew", deadline, err)
	if lost := l.Err(); lost == nil && time.Now().After(deadline) {
		t.Error("the lease is still trusted after its deadline")
	}
	start = time.Now()
	err = l.Release(ctx)
	// The store may keep the lease a TTL after its last confirmed send,
	// which came before start.
	check("Lease.Release", start.Add(ttl), err)
}

// FailsFast checks that opening a store fails within 5 s when its server
// refuses connections (127.0.0.1:1) and when it never answers (a black-hole
// proxy in front of server, the address of the real server). url returns
// the store URL of an address, with a short connect timeout.
func FailsFast[S interface{ Close() error }](t *testing.T, server string, url func(addr string) string, open func(context.Context, string) (S, error)) {
	t.Helper()
	proxy, err := netfault.Start(server)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.SetMode(netfault.Blackhole)
	for name, u := range map[string]string{"refused": url("127.0.0.1:1"), "black hole": url(proxy.Addr())} {
		start := time.Now()
		s, err := open(context.Background(), u)
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

// ConnectionsKilled is field case C09 for stores whose leases are not tied
// to a connection. A Locker on holder takes a resource for ttl; kill kills
// the holder's connections (again before the release when killTwice is
// set). Then the lease is unchanged in the store (admin reads it), a Locker
// on waiter is refused it, the holder's renewal goes through a new
// connection within tries attempts 100 ms apart (a pooled connection may
// fail once when it is found dead; never with ErrLeaseLost), and the
// holder's release goes through and wakes the waiter, whose backoff is an
// hour, with a greater token (releaseWakesWaiter).
func ConnectionsKilled(t *testing.T, admin, holder, waiter driver.Store, ttl time.Duration, kill func(), tries int, killTwice bool) {
	t.Helper()
	ctx := Ctx(t)
	r := Resource(t)
	a := Locker(t, holder)
	b := Locker(t, waiter, tenure.WithRetry(time.Hour, time.Hour))
	la, err := a.TryAcquire(ctx, r, ttl)
	if err != nil {
		t.Fatal(err)
	}
	kill()
	held := func(when string) {
		t.Helper()
		rec, err := admin.Get(ctx, r)
		if err != nil || rec.Owner != la.Owner() || rec.Token != la.Token() {
			t.Fatalf("%s: Get = %+v, %v; want owner %s token %d", when, rec, err, la.Owner(), la.Token())
		}
	}
	held("after the holder's connections were killed")
	if _, err := b.TryAcquire(ctx, r, ttl); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("B's TryAcquire after A's connections died: %v; want ErrHeld", err)
	}
	for i := 0; i < tries; i++ {
		if err = la.Renew(ctx); err == nil {
			break
		}
		if errors.Is(err, tenure.ErrLeaseLost) {
			t.Fatalf("A's renewal after its connections were killed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("A's renewal through a new connection: %v", err)
	}
	if err := la.Err(); err != nil {
		t.Fatalf("A's lease: %v", err)
	}
	held("after A's renewal")
	if killTwice {
		kill()
	}
	releaseWakesWaiter(ctx, t, la, b)
}

// Env returns the environment variable name, which names the shared test
// server that scripts/SCRIPT starts, or skips the test when it is unset.
func Env(tb testing.TB, name, script string) string {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		tb.Skipf(`%s is not set: these tests need a real server; start one with "scripts/%s start" and run eval "$(scripts/%s env)"`, name, script, script)
	}
	return v
}

// Open opens the store of the URL raw with its package's ParseURL (parse)
// and Open (open), after mod changed the configuration, within 30 s; the
// store is closed at the end of the test.
func Open[C any, S interface{ Close() error }](tb testing.TB, raw string, parse func(string) (C, error), open func(context.Context, C) (S, error), mod ...func(*C)) S {
	tb.Helper()
	cfg, err := parse(raw)
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range mod {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := open(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// HandOver checks that b (another owner) is refused r while a's lease la
// holds it, and granted it with a greater fencing token once la is
// released: what must still hold after a server restart.
func HandOver(ctx context.Context, t *testing.T, la *tenure.Lease, b *tenure.Locker, r string) {
	t.Helper()
	if _, err := b.TryAcquire(ctx, r, la.TTL()); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("B while A holds: %v; want ErrHeld", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, r, la.TTL())
	if err != nil || lb.Token() <= la.Token() {
		t.Fatalf("B after A's release: %v (A's token %d)", err, la.Token())
	}
}

// SurvivesRestart takes a resource on s for ttl, restarts the server
// (restart), and checks that the holder's renewal goes through within tries
// attempts 250 ms apart (the first ones may meet the dead connection; none
// may end with ErrLeaseLost) and that HandOver holds: the lease and its
// token survived the restart.
func SurvivesRestart(ctx context.Context, t *testing.T, s driver.Store, ttl time.Duration, restart func(), tries int) {
	t.Helper()
	r := Resource(t)
	a, b := Locker(t, s), Locker(t, s)
	la, err := a.TryAcquire(ctx, r, ttl)
	if err != nil {
		t.Fatal(err)
	}
	restart()
	for i := 0; i < tries; i++ {
		if err = la.Renew(ctx); err == nil || errors.Is(err, tenure.ErrLeaseLost) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("A's renewal after the restart: %v", err)
	}
	HandOver(ctx, t, la, b, r)
}
