package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/postgres"
)

// listener LISTENs on channel with a connection of its own.
type listener struct {
	t       *testing.T
	conn    *pgx.Conn
	channel string
	n       int
}

func listen(t *testing.T, channel string) *listener {
	t.Helper()
	ctx := testserver.Ctx(t)
	conn, err := pgx.Connect(ctx, dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		t.Fatal(err)
	}
	return &listener{t: t, conn: conn, channel: channel}
}

// since returns the payloads of the release notifications sent since the
// last call, in commit order: it sends a marker notification and collects
// everything before it (notifications arrive in commit order, so nothing
// sent earlier can arrive after the marker).
func (l *listener) since(s *postgres.Store) []string {
	l.t.Helper()
	ctx := testserver.Ctx(l.t)
	l.n++
	marker := fmt.Sprintf("marker %d", l.n)
	if _, err := s.Pool().Exec(ctx, `SELECT pg_notify($1, $2)`, l.channel, marker); err != nil {
		l.t.Fatal(err)
	}
	var got []string
	for {
		n, err := l.conn.WaitForNotification(ctx)
		if err != nil {
			l.t.Fatal(err)
		}
		if n.Payload == marker {
			return got
		}
		if !strings.HasPrefix(n.Payload, "marker ") && !strings.HasPrefix(n.Payload, "tenure listener check ") {
			got = append(got, n.Payload)
		}
	}
}

// TestReleaseNotifiesOnlyWhenWaited: a release of a name nobody waited for
// sends no notification (so it never takes PostgreSQL's lock on notifying
// commits); one whose lease an acquire found held does, and so do the later
// releases of that name while its row lives; so does one whose holder
// watches its own lease (driver.Watcher, tenure.WithReleaseWatch).
func TestReleaseNotifiesOnlyWhenWaited(t *testing.T) {
	ctx := testserver.Ctx(t)
	channel := fmt.Sprintf("tenure_test_%d", time.Now().UnixNano())
	s := open(t, func(c *postgres.Config) { c.Channel = channel })
	l := listen(t, channel)
	r := testserver.Resource(t)
	a, b := owner(t, "a"), owner(t, "b")

	rec := mustAcquire(ctx, t, s, r, a)
	if err := s.Renew(ctx, r, a, rec.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, r, a, rec.Token); err != nil {
		t.Fatal(err)
	}
	if got := l.since(s); len(got) != 0 {
		t.Fatalf("a release nobody waited for notified %q", got)
	}

	rec = mustAcquire(ctx, t, s, r, a)
	if _, err := s.Acquire(ctx, r, b, time.Minute); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("B's acquire: %v; want ErrHeld", err)
	}
	if err := s.Release(ctx, r, a, rec.Token); err != nil {
		t.Fatal(err)
	}
	if got := l.since(s); len(got) != 1 || got[0] != r {
		t.Fatalf("a release that B waited for notified %q; want [%s]", got, r)
	}

	// The mark stays with the row: the next holder's release wakes the
	// next waiter (waiters that were not woken do not look again before
	// the holder's lease would expire).
	rec = mustAcquire(ctx, t, s, r, b)
	if err := s.Release(ctx, r, b, rec.Token); err != nil {
		t.Fatal(err)
	}
	if got := l.since(s); len(got) != 1 || got[0] != r {
		t.Fatalf("the next release notified %q; want [%s]", got, r)
	}

	// A holder that watches its own lease marks it (another name, never
	// waited for).
	r = r + "/watched"
	rec = mustAcquire(ctx, t, s, r, a)
	ch, stop, err := s.Watch(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := s.Release(ctx, r, a, rec.Token); err != nil { // as an operator's forced release would
		t.Fatal(err)
	}
	if got := l.since(s); len(got) != 1 || got[0] != r {
		t.Fatalf("release of a watched lease notified %q; want [%s]", got, r)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("the subscriber was not woken")
	}
	if err := s.NotificationsDown(); err != nil {
		t.Fatalf("NotificationsDown on a direct connection: %v", err)
	}
}

// TestRenewBatch: one statement renews every lease of the batch, and each
// lease gets its own answer: renewed, gone (row deleted), taken by another
// owner (named), invalid input (refused before any I/O), and a lease given
// twice.
func TestRenewBatch(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	var queries atomic.Int64
	s := open(t, tb.cfg, func(c *postgres.Config) { c.Pool.ConnConfig.Tracer = countQueries{&queries} })
	a, b := owner(t, "a"), owner(t, "b")
	r1 := mustAcquire(ctx, t, s, "r1", a)
	r2 := mustAcquire(ctx, t, s, "r2", a)
	r3 := mustAcquire(ctx, t, s, "r3", a)
	tb.sql(t, s, `DELETE FROM %[1]s WHERE resource IN ('r2', 'r3')`)
	r3b := mustAcquire(ctx, t, s, "r3", b)
	before := queries.Load()
	errs := s.RenewBatch(ctx, []driver.Renewal{
		{Resource: "r1", Owner: a, Token: r1.Token, TTL: 2 * time.Minute},
		{Resource: "r2", Owner: a, Token: r2.Token, TTL: 2 * time.Minute},
		{Resource: "r3", Owner: a, Token: r3.Token, TTL: 2 * time.Minute},
		{Resource: "", Owner: a, Token: 1, TTL: time.Minute},
		{Resource: "r1", Owner: a, Token: r1.Token, TTL: 2 * time.Minute},
		{Resource: "r1", Owner: a, Token: r1.Token, TTL: time.Nanosecond},
	})
	if n := queries.Load() - before; n != 1 {
		t.Fatalf("RenewBatch sent %d statements; want 1", n)
	}
	if len(errs) != 6 || errs[0] != nil || errs[4] != nil {
		t.Fatalf("RenewBatch: %v; want r1 renewed (twice)", errs)
	}
	lostTo(t, "r2 (row deleted)", errs[1], "", 0)
	lostTo(t, "r3 (taken by B)", errs[2], b, r3b.Token)
	if !errors.Is(errs[3], driver.ErrInvalidResource) || !errors.Is(errs[5], driver.ErrInvalidTTL) {
		t.Fatalf("invalid leases: %v, %v; want ErrInvalidResource, ErrInvalidTTL", errs[3], errs[5])
	}
	if rec, err := s.Get(ctx, "r1"); err != nil || rec.TTL != 2*time.Minute || rec.Remaining <= time.Minute {
		t.Fatalf("r1 after the batch: %+v, %v; want renewed for 2m", rec, err)
	}
	// An empty or all-invalid batch sends nothing.
	before = queries.Load()
	if errs := s.RenewBatch(ctx, []driver.Renewal{{Resource: "", Owner: a, TTL: time.Minute}}); !errors.Is(errs[0], driver.ErrInvalidResource) {
		t.Fatalf("invalid batch: %v", errs)
	}
	if n := queries.Load() - before; n != 0 {
		t.Fatalf("an invalid batch sent %d statements", n)
	}
}

// countQueries counts the statements a pool sends.
type countQueries struct{ n *atomic.Int64 }

func (c countQueries) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c countQueries) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestRenewBatchLocker: a Locker holding many leases on the store renews
// them through RenewBatch, in fewer statements than leases.
func TestRenewBatchLocker(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	var queries atomic.Int64
	s := open(t, tb.cfg, func(c *postgres.Config) { c.Pool.ConnConfig.Tracer = countQueries{&queries} })
	var _ driver.BatchRenewer = s
	admin := open(t, tb.cfg)
	lk := testserver.Locker(t, s)
	const n = 50
	for i := range n {
		if _, err := lk.TryAcquire(ctx, fmt.Sprintf("r%d", i), 900*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	before := queries.Load()
	// Two rounds of renewals (every TTL/3 = 300 ms).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var renewed int
		err := admin.Pool().QueryRow(ctx, "SELECT count(*) FROM "+tb.name+" WHERE expires_at - granted_at > interval '1 second'").Scan(&renewed)
		if err != nil {
			t.Fatal(err)
		}
		if renewed == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d leases renewed in 30 s", renewed, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if sent := queries.Load() - before; sent >= n {
		t.Fatalf("%d statements renewed %d leases; want batches", sent, n)
	}
}
