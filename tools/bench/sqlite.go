package bench

import (
	"strings"
	"sync"

	msqlite "modernc.org/sqlite"
)

// SQLite request kinds.
const (
	KindStatement   = "statement"
	KindTransaction = "transaction"
)

// SQLite statements are counted on each connection by SQLite's authorizer,
// which SQLite calls while it compiles a statement, and transactions by its
// commit and rollback hooks. modernc.org/sqlite compiles every statement it
// runs (database/sql's Exec and Query with arguments do not reuse prepared
// statements), so a compiled statement is an executed one.
//
// The authorizer reports actions, not statements: a statement starts with
// its BEGIN/COMMIT/ROLLBACK, SELECT, INSERT, DELETE or PRAGMA action; an
// UPDATE statement reports one UPDATE action per column it sets, so a run of
// UPDATE actions is one statement, and the UPDATE actions of an upsert's DO
// UPDATE clause belong to its INSERT. TestSQLiteCounts checks these rules
// against the store's statements.

var (
	sqliteHookOnce sync.Once
	sqliteMu       sync.Mutex
	sqliteMeters   = map[string]*Meter{} // database path → meter
)

// meterSQLite counts the statements and transactions of every connection
// that this process opens to the database file path from now on.
func meterSQLite(path string) *Meter {
	m := NewMeter(KindStatement, KindTransaction)
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
	if a, ok := conn.(msqlite.AuthorizerRegisterer); ok {
		var st stmtCounter
		if err := a.RegisterAuthorizer(func(action msqlite.AuthorizerActionCode, _, _, _, _ string) msqlite.AuthorizerReturnCode {
			if st.starts(action) {
				m.Add(KindStatement, 1)
			}
			return msqlite.AuthorizerOK
		}); err != nil {
			return err
		}
	}
	if h, ok := conn.(msqlite.HookRegisterer); ok {
		h.RegisterCommitHook(func() int32 { m.Add(KindTransaction, 1); return 0 })
		h.RegisterRollbackHook(func() { m.Add(KindTransaction, 1) })
	}
	return nil
}

// stmtCounter tells, from the sequence of authorizer actions on one
// connection, where statements start. SQLite compiles one statement at a
// time on a connection, so no lock is needed.
type stmtCounter struct {
	inInsert   bool // the current statement is an INSERT (an upsert's UPDATE actions belong to it)
	prevUpdate bool // the previous action was an UPDATE
}

func (s *stmtCounter) starts(action msqlite.AuthorizerActionCode) bool {
	switch action {
	case msqlite.AuthTransaction, msqlite.AuthSelect, msqlite.AuthInsert, msqlite.AuthDelete, msqlite.AuthPragma:
		s.inInsert = action == msqlite.AuthInsert
		s.prevUpdate = false
		return true
	case msqlite.AuthUpdate:
		start := !s.prevUpdate && !s.inInsert
		s.prevUpdate = true
		return start
	}
	s.prevUpdate = false
	return false
}
