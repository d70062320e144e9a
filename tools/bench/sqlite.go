package bench

import (
	"strings"
	"sync"

	msqlite "modernc.org/sqlite"
)

// Request kinds: statements (PostgreSQL), and SQLite's transactions and
// row writes.
const (
	KindStatement   = "statement"
	KindTransaction = "transaction"
	KindRowWrite    = "row write"
)

// SQLite is counted on each connection by SQLite's own hooks: transactions
// by its commit and rollback hooks (a transaction is what takes the
// database's write lock and, at COMMIT, fsyncs the write-ahead log: the
// store's unit of work, which it shares between the operations that callers
// started together), and row writes by its pre-update hook (each row
// inserted, updated or deleted, the token counter's row included).
// Statements are not counted: the store prepares its statements once per
// connection and SQLite sees no per-execution event that the driver
// exposes.

var (
	sqliteHookOnce sync.Once
	sqliteMu       sync.Mutex
	sqliteMeters   = map[string]*Meter{} // database path → meter
)

// meterSQLite counts the transactions and row writes of every connection
// that this process opens to the database file path from now on.
func meterSQLite(path string) *Meter {
	m := NewMeter(KindTransaction, KindRowWrite)
	sqliteMu.Lock()
	sqliteMeters[path] = m
	sqliteMu.Unlock()
	sqliteHookOnce.Do(func() {
		msqlite.RegisterConnectionHook(sqliteConnHook)
	})
	return m
}

// sqliteConnHook runs for each new connection: it finds the meter of the
// connection's file (the DSN is "file:PATH?options") and installs the
// counting callbacks.
func sqliteConnHook(conn msqlite.ExecQuerierContext, dsn string) error {
	path := strings.TrimPrefix(dsn, "file:")
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	path = strings.ReplaceAll(path, "%25", "%") // the store escapes '%' in file: URIs
	sqliteMu.Lock()
	m := sqliteMeters[path]
	sqliteMu.Unlock()
	if m == nil {
		return nil
	}
	if h, ok := conn.(msqlite.HookRegisterer); ok {
		h.RegisterCommitHook(func() int32 { m.Add(KindTransaction, 1); return 0 })
		h.RegisterRollbackHook(func() { m.Add(KindTransaction, 1) })
		h.RegisterPreUpdateHook(func(msqlite.SQLitePreUpdateData) { m.Add(KindRowWrite, 1) })
	}
	return nil
}
