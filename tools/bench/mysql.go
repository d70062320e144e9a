package bench

import (
	"context"
	"crypto/sha1"
	"database/sql"
	sqldriver "database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/mysql"
)

// The MySQL peers: what users of MySQL and MariaDB do instead of a lease
// table, on the same server.
const (
	PeerMySQLGetLock = "get-lock-no-ttl-no-fencing"
	PeerMySQLRowLock = "row-lock-no-ttl-no-fencing"
)

// mysqlPeerTable is the row-lock peer's table, created by the bench.
const mysqlPeerTable = "tenure_bench_row_locks"

func init() {
	PeerVersions[PeerMySQLGetLock] = "MySQL/MariaDB GET_LOCK(name, 0) / RELEASE_LOCK (a lock of the connection: no TTL, no fencing token; on " + mysqlDriverVersion + ")"
	PeerVersions[PeerMySQLRowLock] = "a row of a lock table locked by SELECT ... FOR UPDATE NOWAIT in an open transaction, freed by COMMIT (no TTL, no fencing token; on " + mysqlDriverVersion + ")"
}

// mysqlDriverVersion is go-sql-driver's version (tools/go.mod).
const mysqlDriverVersion = "github.com/go-sql-driver/mysql v1.10.2"

// openMySQL installs the target's meter in the store's connections, creates
// the store's tables, and adds the MySQL peers on connections of their own
// (counted by the same meter).
func openMySQL(ctx context.Context, u interface{ Init(context.Context) error }, c *mysql.Config, t *Target) error {
	t.Meter = NewMeter(KindStatement)
	m := t.Meter
	c.WrapConnector = func(conn sqldriver.Connector) sqldriver.Connector { return countingConnector{conn, m} }
	if err := u.Init(ctx); err != nil {
		return err
	}
	mc := c.MySQL.Clone()
	mc.InterpolateParams = true // one round trip per statement, as the store's
	conn, err := gomysql.NewConnector(mc)
	if err != nil {
		return fmt.Errorf("bench: mysql peers: %w", err)
	}
	db := sql.OpenDB(countingConnector{conn, m})
	t.closers = append(t.closers, db.Close)
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+mysqlPeerTable+" (name VARBINARY(255) NOT NULL PRIMARY KEY) ENGINE=InnoDB"); err != nil {
		return fmt.Errorf("bench: mysql row-lock table: %w", err)
	}
	t.Peers = []System{&mysqlGetLockSystem{db: db}, &mysqlRowLockSystem{db: db}}
	return nil
}

// lockName is the GET_LOCK name of a resource: MySQL takes at most 64
// characters.
func lockName(resource string) string {
	h := sha1.Sum([]byte(resource))
	return "tenure-bench-" + hex.EncodeToString(h[:])
}

// mysqlGetLockSystem is MySQL's named locks, as most Go code on MySQL locks:
// GET_LOCK(name, 0) on a connection of the client's own (a lock belongs to
// its connection: a pooled connection that drops frees it while its holder
// goes on), RELEASE_LOCK(name). Not a lease: no TTL (nothing to renew), no
// fencing token, no shared mode.
type mysqlGetLockSystem struct{ db *sql.DB }

func (s *mysqlGetLockSystem) Name() string  { return PeerMySQLGetLock }
func (s *mysqlGetLockSystem) Ops() []string { return []string{OpAcquire, OpRelease} }

func (s *mysqlGetLockSystem) NewClient(string) (Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: GET_LOCK connection: %w", err)
	}
	return &mysqlGetLockClient{conn: c}, nil
}

type mysqlGetLockClient struct {
	conn *sql.Conn
	name string
}

func (c *mysqlGetLockClient) Acquire(ctx context.Context, resource string, _ time.Duration) error {
	var ok sql.NullInt64
	name := lockName(resource)
	if err := c.conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", name).Scan(&ok); err != nil {
		return err
	}
	if !ok.Valid || ok.Int64 != 1 {
		return tenure.ErrHeld
	}
	c.name = name
	return nil
}

func (c *mysqlGetLockClient) Renew(context.Context) error { return errors.ErrUnsupported }

func (c *mysqlGetLockClient) Release(ctx context.Context) error {
	var ok sql.NullInt64
	if err := c.conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", c.name).Scan(&ok); err != nil {
		return err
	}
	if !ok.Valid || ok.Int64 != 1 {
		return tenure.ErrLeaseLost
	}
	return nil
}

func (c *mysqlGetLockClient) Close() { c.conn.Close() }

// mysqlRowLockSystem is the other common lock on MySQL: a table of lock
// names, and a row locked in an open transaction (START TRANSACTION, then
// SELECT ... FOR UPDATE NOWAIT: 2 statements; the row is inserted once per
// name), freed by COMMIT (1). The lock belongs to the transaction and its connection: no
// TTL (nothing to renew), no fencing token.
type mysqlRowLockSystem struct {
	db    *sql.DB
	mu    sync.Mutex
	known map[string]bool // names whose row exists
}

func (s *mysqlRowLockSystem) Name() string  { return PeerMySQLRowLock }
func (s *mysqlRowLockSystem) Ops() []string { return []string{OpAcquire, OpRelease} }

func (s *mysqlRowLockSystem) NewClient(string) (Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: row-lock connection: %w", err)
	}
	return &mysqlRowLockClient{conn: c, sys: s}, nil
}

// ensureRow inserts the row of resource once for all clients, before any
// client locks it: an insert of a name another transaction has locked
// would wait for it (innodb_lock_wait_timeout).
func (s *mysqlRowLockSystem) ensureRow(ctx context.Context, c *sql.Conn, resource string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known[resource] {
		return nil
	}
	if _, err := c.ExecContext(ctx, "INSERT IGNORE INTO "+mysqlPeerTable+" (name) VALUES (?)", resource); err != nil {
		return err
	}
	if s.known == nil {
		s.known = map[string]bool{}
	}
	s.known[resource] = true
	return nil
}

type mysqlRowLockClient struct {
	conn *sql.Conn
	sys  *mysqlRowLockSystem
	held bool // a transaction is open and holds the row
}

// lockBusy reports the error of a NOWAIT locking read of a locked row:
// MySQL's ER_LOCK_NOWAIT (3572), MariaDB's lock wait timeout (1205).
func lockBusy(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && (me.Number == 3572 || me.Number == 1205)
}

func (c *mysqlRowLockClient) Acquire(ctx context.Context, resource string, _ time.Duration) error {
	if err := c.sys.ensureRow(ctx, c.conn, resource); err != nil {
		return err
	}
	// The transaction as statements on the client's connection, not a
	// database/sql Tx: a Tx ends with the context of its BeginTx, and its
	// COMMIT would not pass the counting connector.
	if _, err := c.conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
		return err
	}
	var one int
	err := c.conn.QueryRowContext(ctx, "SELECT 1 FROM "+mysqlPeerTable+" WHERE name = ? FOR UPDATE NOWAIT", resource).Scan(&one)
	if err != nil {
		_, _ = c.conn.ExecContext(context.Background(), "ROLLBACK")
		if lockBusy(err) {
			return tenure.ErrHeld
		}
		return err
	}
	c.held = true
	return nil
}

func (c *mysqlRowLockClient) Renew(context.Context) error { return errors.ErrUnsupported }

func (c *mysqlRowLockClient) Release(ctx context.Context) error {
	if !c.held {
		return errors.New("bench: release without a lock")
	}
	c.held = false
	_, err := c.conn.ExecContext(ctx, "COMMIT")
	return err
}

func (c *mysqlRowLockClient) Close() {
	if c.held {
		_, _ = c.conn.ExecContext(context.Background(), "ROLLBACK")
	}
	c.conn.Close()
}
