package postgres_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/postgres"
)

// pooled returns $TENURE_PGBOUNCER (PgBouncer in transaction mode in front
// of the $TENURE_POSTGRES server, from scripts/pgbouncer), or skips.
func pooled(tb testing.TB) string { return testserver.Env(tb, "TENURE_PGBOUNCER", "pgbouncer") }

// openPooled opens a store through the pooler; the schema is created
// through it too (Init uses no named prepared statement).
func openPooled(t *testing.T, url string, mod ...func(*postgres.Config)) *postgres.Store {
	t.Helper()
	cfg, err := postgres.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mod {
		m(&cfg)
	}
	if err := postgres.Init(testserver.Ctx(t), cfg); err != nil {
		t.Fatalf("Init through the pooler: %v", err)
	}
	return testserver.Open(t, url, postgres.ParseURL, postgres.Open, mod...)
}

// TestCaseC18TransactionPooler: two owners contend for one resource through
// PgBouncer in transaction mode (named prepared statements and LISTEN do
// not work through it). Acquire, renew, release, "held by" and List work,
// again and again (every statement may meet another server session); the
// stores find that notifications cannot reach them, and a waiter polls and
// is granted the resource within its retry period after the release.
func TestCaseC18TransactionPooler(t *testing.T) {
	url := pooled(t)
	ctx := testserver.Ctx(t)
	sa, sb := openPooled(t, url), openPooled(t, url)
	r := testserver.Resource(t)
	retry := tenure.WithRetry(20*time.Millisecond, 200*time.Millisecond)
	a, b := testserver.Locker(t, sa, retry), testserver.Locker(t, sb, retry)
	for round := range 20 {
		la, err := a.TryAcquire(ctx, r, 30*time.Second)
		if err != nil {
			t.Fatalf("round %d: A's acquire: %v", round, err)
		}
		_, err = b.TryAcquire(ctx, r, 30*time.Second)
		var held *tenure.HeldError
		if !errors.As(err, &held) || held.Holder.Owner != la.Owner() || held.Holder.Token != la.Token() {
			t.Fatalf("round %d: B's acquire: %v; want held by A (%s, token %d)", round, err, la.Owner(), la.Token())
		}
		if err := la.Renew(ctx); err != nil {
			t.Fatalf("round %d: A's renewal: %v", round, err)
		}
		if rec, err := sb.Get(ctx, r); err != nil || rec.Owner != la.Owner() {
			t.Fatalf("round %d: Get: %+v, %v", round, rec, err)
		}
		if recs, err := sb.List(ctx, r); err != nil || len(recs) != 1 {
			t.Fatalf("round %d: List: %+v, %v", round, recs, err)
		}
		if err := la.Release(ctx); err != nil {
			t.Fatalf("round %d: A's release: %v", round, err)
		}
	}

	// B waits while A holds; A releases; B is granted by polling.
	la, err := a.TryAcquire(ctx, r, 30*time.Second)
	if err != nil {
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
	if err := sb.NotificationsDown(); err == nil {
		t.Error("the store behind the pooler did not find that notifications cannot reach it")
	} else {
		t.Logf("notifications: %v", err)
	}
	released := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-got:
		if lb == nil {
			t.FailNow()
		}
		t.Logf("B granted %v after A's release (retry at most 200ms)", time.Since(released))
		if lb.Token() <= la.Token() {
			t.Fatalf("B's token %d after A's %d", lb.Token(), la.Token())
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("B not granted within 30 s of A's release")
	}
	// A later Subscribe fails at once: the caller polls.
	if _, _, err := sb.Subscribe(ctx, r); !errors.Is(err, driver.ErrNotListening) {
		t.Fatalf("Subscribe behind the pooler: %v; want ErrNotListening", err)
	}
	if !sa.Pooled() && !sb.Pooled() {
		t.Log("neither store met a prepared-statement error (the pooler kept their sessions)")
	}
}

// TestPoolerURLOption: with default_query_exec_mode=cache_describe (or
// exec) in the URL, the store uses no named prepared statement from its
// first statement on, and never has to detect the pooler.
func TestPoolerURLOption(t *testing.T) {
	url := pooled(t)
	for _, mode := range []string{"cache_describe", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testserver.Ctx(t)
			sep := "?"
			if strings.Contains(url, "?") {
				sep = "&"
			}
			u := url + sep + "default_query_exec_mode=" + mode
			s := openPooled(t, u)
			r := testserver.Resource(t)
			a, b := owner(t, "a"), owner(t, "b")
			for range 10 {
				rec := mustAcquire(ctx, t, s, r, a)
				if _, err := s.Acquire(ctx, r, b, time.Minute); !errors.Is(err, driver.ErrHeld) {
					t.Fatalf("B's acquire: %v; want ErrHeld", err)
				}
				if errs := s.RenewBatch(ctx, []driver.Renewal{{Resource: r, Owner: a, Token: rec.Token, TTL: time.Minute}}); errs[0] != nil {
					t.Fatalf("RenewBatch: %v", errs[0])
				}
				if err := s.Release(ctx, r, a, rec.Token); err != nil {
					t.Fatal(err)
				}
			}
			if s.Pooled() {
				t.Fatal("the store met a prepared-statement error although the URL chose a mode without them")
			}
		})
	}
}
