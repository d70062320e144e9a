package bench

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lib/pq"

	"github.com/tenure-go/tenure"
)

// PeerPglock is cirello.io/pglock, measured by the peers phase on
// PostgreSQL next to tenure.
const PeerPglock = "pglock"

// pglockTable is the peer's table, created by the bench (pglock's own
// schema: name, record_version_number, data, owner, and a sequence).
const pglockTable = "tenure_bench_pglock"

// pglockSystem is cirello.io/pglock on lib/pq (the driver it is written
// for): AcquireContext with FailIfLocked (SELECT nextval, then an INSERT
// ... ON CONFLICT DO UPDATE: 2 statements), SendHeartbeat as the renewal
// (nextval, then an UPDATE by record version number: 2), ReleaseContext
// (a DELETE by record version number: 1). Its heartbeat goroutine is off
// (WithHeartbeatFrequency(0)), so the cycle's one renewal is the only one.
// Its lease is not a deadline in the table: a waiter takes a lock whose
// record version number did not change for a lease duration; it has no
// fencing token the protected resource could check (the record version
// number is random, from a cycling sequence). The clients share one
// database/sql pool, sized as tenure's pgx pool, whose statements the
// target's meter counts.
type pglockSystem struct {
	db *sql.DB
}

// newPglockSystem opens the peer's pool on the server of pool's
// configuration and creates its table when missing.
func newPglockSystem(pool *pgxpool.Config, m *Meter) (*pglockSystem, func() error, error) {
	conn, err := pq.NewConnector(pool.ConnConfig.ConnString())
	if err != nil {
		return nil, nil, fmt.Errorf("bench: pglock connector: %w", err)
	}
	db := sql.OpenDB(countingConnector{conn, m})
	db.SetMaxOpenConns(int(pool.MaxConns))
	db.SetMaxIdleConns(int(pool.MaxConns))
	c, err := pglock.UnsafeNew(db, pglock.WithCustomTable(pglockTable))
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("bench: pglock client: %w", err)
	}
	if err := c.TryCreateTable(); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("bench: pglock table: %w", err)
	}
	return &pglockSystem{db: db}, db.Close, nil
}

func (s *pglockSystem) Name() string  { return PeerPglock }
func (s *pglockSystem) Ops() []string { return []string{OpAcquire, OpRenew, OpRelease} }

func (s *pglockSystem) NewClient(string) (Client, error) {
	return &pglockClient{db: s.db}, nil
}

type pglockClient struct {
	db   *sql.DB
	c    *pglock.Client
	ttl  time.Duration
	lock *pglock.Lock
}

func (c *pglockClient) Acquire(ctx context.Context, resource string, ttl time.Duration) error {
	if c.c == nil || c.ttl != ttl {
		cl, err := pglock.UnsafeNew(c.db, pglock.WithCustomTable(pglockTable), pglock.WithLeaseDuration(ttl), pglock.WithHeartbeatFrequency(0))
		if err != nil {
			return err
		}
		c.c, c.ttl = cl, ttl
	}
	l, err := c.c.AcquireContext(ctx, resource, pglock.FailIfLocked())
	if errors.Is(err, pglock.ErrNotAcquired) {
		return tenure.ErrHeld
	}
	if err != nil {
		return err
	}
	c.lock = l
	return nil
}

func (c *pglockClient) Renew(ctx context.Context) error {
	if c.lock == nil {
		return errors.New("bench: renew without a lock")
	}
	return c.c.SendHeartbeat(ctx, c.lock)
}

func (c *pglockClient) Release(ctx context.Context) error {
	if c.lock == nil {
		return errors.New("bench: release without a lock")
	}
	err := c.c.ReleaseContext(ctx, c.lock)
	c.lock = nil
	if errors.Is(err, pglock.ErrLockAlreadyReleased) {
		return tenure.ErrLeaseLost
	}
	return err
}

func (c *pglockClient) Close() {}

// countingConnector counts the statements database/sql sends through it
// (KindStatement, as pgTracer counts pgx's).
type countingConnector struct {
	driver.Connector
	m *Meter
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: cn, m: c.m}, nil
}

type countingConn struct {
	driver.Conn
	m *Meter
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.m.Add(KindStatement, 1)
	return e.ExecContext(ctx, q, args)
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	qc, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.m.Add(KindStatement, 1)
	return qc.QueryContext(ctx, q, args)
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		c.m.Add(KindStatement, 1)
		return b.BeginTx(ctx, opts)
	}
	return nil, errors.New("bench: driver without BeginTx")
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}
