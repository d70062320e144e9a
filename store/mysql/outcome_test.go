package mysql_test

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/mysql"
)

// errorAfter runs each statement on the real server and then, for the
// next statement that starts with prefix (once armed), answers err in
// place of the server's reply: a reply that says the commit failed
// although the server applied the statement.
type errorAfter struct {
	prefix string
	err    error
	armed  atomic.Bool
}

func (e *errorAfter) wrap(c sqldriver.Connector) sqldriver.Connector { return errorConnector{c, e} }

type errorConnector struct {
	sqldriver.Connector
	e *errorAfter
}

func (ec errorConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	c, err := ec.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &errorConn{Conn: c, e: ec.e}, nil
}

type errorConn struct {
	sqldriver.Conn
	e *errorAfter
}

func (c *errorConn) ExecContext(ctx context.Context, q string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	res, err := c.Conn.(sqldriver.ExecerContext).ExecContext(ctx, q, args)
	if err == nil && strings.HasPrefix(strings.TrimSpace(q), c.e.prefix) && c.e.armed.CompareAndSwap(true, false) {
		return nil, c.e.err
	}
	return res, err
}

func (c *errorConn) QueryContext(ctx context.Context, q string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	return c.Conn.(sqldriver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *errorConn) ResetSession(ctx context.Context) error {
	return c.Conn.(sqldriver.SessionResetter).ResetSession(ctx)
}

func (c *errorConn) IsValid() bool { return c.Conn.(sqldriver.Validator).IsValid() }

// TestErrorDuringCommitIsUnknownOutcome: error 1180 (ER_ERROR_DURING_COMMIT)
// is what a Galera node answers when it lost the cluster while it
// replicated a transaction (wsrep-lib's error_connection_failed, and
// error_provider_failed): the other nodes may have committed it. A grant,
// a renewal or a release answered so is an unknown outcome, which the
// Locker resolves by trying the same grant again; never "not granted" or
// "not released".
func TestErrorDuringCommitIsUnknownOutcome(t *testing.T) {
	ctx := testserver.Ctx(t)
	tb := newTable(t)
	fault := &errorAfter{err: &gomysql.MySQLError{Number: 1180, SQLState: [5]byte{'H', 'Y', '0', '0', '0'},
		Message: "Got error 6 \"No such device or address\" during COMMIT"}}
	s := open(t, tb.cfg, func(c *mysql.Config) { c.WrapConnector = fault.wrap })
	a := owner(t, "a")
	for _, step := range []struct {
		what, prefix string
		op           func() error
	}{
		{"acquire", "INSERT", func() error { _, err := s.Acquire(ctx, "r", a, time.Minute); return err }},
		{"renew", "UPDATE", func() error {
			rec, err := s.Get(ctx, "r")
			if err != nil {
				return err
			}
			return s.Renew(ctx, "r", a, rec.Token, time.Minute)
		}},
		{"release", "UPDATE", func() error {
			rec, err := s.Get(ctx, "r")
			if err != nil {
				return err
			}
			return s.Release(ctx, "r", a, rec.Token)
		}},
	} {
		fault.prefix = step.prefix
		fault.armed.Store(true)
		if err := step.op(); !errors.Is(err, driver.ErrUnknownOutcome) {
			t.Fatalf("%s answered by error 1180 after it was applied: %v; want ErrUnknownOutcome", step.what, err)
		}
	}
	if _, err := s.Get(ctx, "r"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Get after the release: %v; want ErrNotHeld (it was applied)", err)
	}
}
