package mysql_test

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/mysql"
)

// pauser holds the first statement that starts with prefix until resume
// is called: a process paused (or cut off from the server) between two
// statements of the store.
type pauser struct {
	prefix  string
	once    sync.Once
	paused  chan struct{} // closed when a statement was held
	resumed chan struct{}
}

func newPauser(prefix string) *pauser {
	return &pauser{prefix: prefix, paused: make(chan struct{}), resumed: make(chan struct{})}
}

func (p *pauser) resume() {
	select {
	case <-p.resumed:
	default:
		close(p.resumed)
	}
}

func (p *pauser) hold(q string) {
	if !strings.HasPrefix(strings.TrimSpace(q), p.prefix) {
		return
	}
	p.once.Do(func() {
		close(p.paused)
		<-p.resumed
	})
}

func (p *pauser) wrap(c sqldriver.Connector) sqldriver.Connector { return pauseConnector{c, p} }

type pauseConnector struct {
	sqldriver.Connector
	p *pauser
}

func (pc pauseConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	c, err := pc.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &pauseConn{Conn: c, p: pc.p}, nil
}

type pauseConn struct {
	sqldriver.Conn
	p *pauser
}

func (c *pauseConn) ExecContext(ctx context.Context, q string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	c.p.hold(q)
	return c.Conn.(sqldriver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *pauseConn) QueryContext(ctx context.Context, q string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	c.p.hold(q)
	return c.Conn.(sqldriver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *pauseConn) ResetSession(ctx context.Context) error {
	return c.Conn.(sqldriver.SessionResetter).ResetSession(ctx)
}

func (c *pauseConn) IsValid() bool { return c.Conn.(sqldriver.Validator).IsValid() }

// TestSweepPausedBeforeItDeletes: the process of a Store is paused (or cut
// off from the server) in the middle of a sweep, before it deletes the
// rows it found. Nothing the sweep holds may stop other Stores: a grant of
// any resource, and of the very row it is about to delete, goes through
// at once, and when the sweep goes on it deletes nothing that was granted
// meanwhile. Every Store sweeps about once a minute, so a pause or a
// network partition of any client would otherwise stop every grant of the
// table for as long as the server keeps its session (wait_timeout: 8 hours
// by default), each acquire failing after innodb_lock_wait_timeout.
func TestSweepPausedBeforeItDeletes(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	p := newPauser("DELETE")
	t.Cleanup(p.resume)
	sweeper := open(t, tb.cfg, func(c *mysql.Config) { c.SweepInterval = -1; c.WrapConnector = p.wrap })
	other := open(t, tb.cfg, func(c *mysql.Config) { c.SweepInterval = -1 })
	a := owner(t, "a")
	// Rows the sweep deletes at once: no owner, no time.
	tb.sql(t, other, `INSERT INTO %[1]s (resource, token) VALUES ('partial', 5), ('partial2', 6)`)
	type result struct {
		n   int64
		err error
	}
	swept := make(chan result, 1)
	go func() {
		n, err := sweeper.Sweep(ctx)
		swept <- result{n, err}
	}()
	select {
	case <-p.paused:
	case r := <-swept:
		t.Fatalf("Sweep ended without deleting: %d, %v", r.n, r.err)
	}
	for _, r := range []string{"unrelated", "partial"} {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rec, err := other.Acquire(actx, r, a, time.Minute)
		cancel()
		if err != nil {
			t.Fatalf("acquire %s while another store's sweep is paused: %v", r, err)
		}
		if r == "partial" && rec.Token <= 5 {
			t.Fatalf("token %d of partial; its row had 5", rec.Token)
		}
	}
	p.resume()
	res := <-swept
	if res.err != nil || res.n != 1 {
		t.Fatalf("Sweep after the pause: %d, %v; want 1 row (partial2)", res.n, res.err)
	}
	if rec, err := other.Get(ctx, "partial"); err != nil || rec.Owner != a {
		t.Fatalf("Get(partial) after the sweep: %+v, %v; want the lease granted while it was paused", rec, err)
	}
	if _, err := other.Get(ctx, "partial2"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Get(partial2): %v", err)
	}
	if f := tb.floor(t, other); f < 6 {
		t.Fatalf("floor %d after sweeping a row with token 6", f)
	}
}
