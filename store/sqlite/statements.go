package sqlite

import (
	"context"
	"database/sql"
)

// statements are the writer connection's prepared statements.
type statements struct {
	begin, commit, rollback               *sql.Stmt
	row, sameOwner, grant, renew, release *sql.Stmt
	keep                                  *sql.Stmt
	counterGet, counterSet, sweep         *sql.Stmt
	// Reservations (reserve.go); nil when the file has no tenure_waiting
	// table (a store opened with MustExist on a file of an earlier
	// version): it then has no reservations to honour.
	reserved, reserve, unreserve, clearReserved, sweepReserved *sql.Stmt
}

const (
	selectRow = `SELECT owner, token, ttl_ms, epoch, expires_ms FROM tenure_leases WHERE resource = ?`
	grantSQL  = `INSERT INTO tenure_leases (resource, owner, token, ttl_ms, epoch, expires_ms, granted_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (resource) DO UPDATE SET owner = excluded.owner, token = excluded.token, ttl_ms = excluded.ttl_ms,
			epoch = excluded.epoch, expires_ms = excluded.expires_ms, granted_at = excluded.granted_at`
	// ?1 epoch, ?2 now (liveSQL), then the operation's own.
	renewSQL = `UPDATE tenure_leases SET ttl_ms = ?3, expires_ms = ?4
		WHERE resource = ?5 AND owner = ?6 AND token = ?7 AND ` + liveSQL
	keepSQL = `UPDATE tenure_leases SET owner = ?8, ttl_ms = ?3, expires_ms = ?4
		WHERE resource = ?5 AND owner = ?6 AND token = ?7 AND ` + liveSQL
	releaseSQL = `DELETE FROM tenure_leases WHERE resource = ?3 AND owner = ?4 AND token = ?5 AND ` + liveSQL
	sweepSQL   = `DELETE FROM tenure_leases WHERE resource = ?3 AND NOT ` + liveSQL + ` RETURNING token`
)

// prepare prepares the writer's statements on conn; those of reservations
// only when reservations is set.
func prepare(ctx context.Context, conn *sql.Conn, reservations bool) (*statements, error) {
	st := &statements{}
	type stmt struct {
		dst **sql.Stmt
		sql string
	}
	var more []stmt
	if reservations {
		more = []stmt{
			{&st.reserved, reservedSQL},
			{&st.reserve, reserveSQL},
			{&st.unreserve, `DELETE FROM tenure_waiting WHERE resource = ? AND waiter = ?`},
			{&st.clearReserved, `DELETE FROM tenure_waiting WHERE resource = ?`},
			{&st.sweepReserved, `DELETE FROM tenure_waiting WHERE epoch <> ?1 OR expires_ms <= ?2`},
		}
	}
	for _, p := range append([]stmt{
		{&st.begin, `BEGIN IMMEDIATE`},
		{&st.commit, `COMMIT`},
		{&st.rollback, `ROLLBACK`},
		{&st.row, selectRow},
		{&st.sameOwner, `UPDATE tenure_leases SET ttl_ms = ?, expires_ms = ? WHERE resource = ?`},
		{&st.grant, grantSQL},
		{&st.renew, renewSQL},
		{&st.release, releaseSQL},
		{&st.keep, keepSQL},
		{&st.counterGet, `SELECT value FROM tenure_meta WHERE name = 'token'`},
		{&st.counterSet, `INSERT INTO tenure_meta (name, value) VALUES ('token', ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value`},
		{&st.sweep, sweepSQL},
	}, more...) {
		s, err := conn.PrepareContext(ctx, p.sql)
		if err != nil {
			st.close()
			return nil, err
		}
		*p.dst = s
	}
	return st, nil
}

func (st *statements) close() {
	for _, s := range []*sql.Stmt{st.begin, st.commit, st.rollback, st.row, st.sameOwner, st.grant, st.renew,
		st.release, st.keep, st.counterGet, st.counterSet, st.sweep,
		st.reserved, st.reserve, st.unreserve, st.clearReserved, st.sweepReserved} {
		if s != nil {
			s.Close()
		}
	}
}

// liveSQL is the condition under which a row is a live lease, given the
// epoch (?1) and the host clock in milliseconds (?2): every column of the
// right type, an owner, a positive token and TTL, this boot's epoch, an
// expiry in the future, and no more than its TTL away (a lease is written
// as now + TTL on a clock that never goes back, so a row whose expiry is
// further away was not written by tenure). Any other row is free: it blocks
// nobody, and its token still counts for the floor. Every comparison is
// guarded by a type test, so the condition is never NULL.
const liveSQL = `(` + mayBeLiveSQL + ` AND expires_ms - ttl_ms <= ?2)`

// mayBeLiveSQL is liveSQL without its bound on the time of the grant: the
// rows that a read which saw the table at or after ?2 may judge live (see
// row.liveBetween).
const mayBeLiveSQL = `(typeof(owner) = 'text' AND owner <> '' AND typeof(token) = 'integer' AND token > 0
	AND typeof(ttl_ms) = 'integer' AND ttl_ms > 0 AND typeof(epoch) = 'text' AND epoch = ?1
	AND typeof(expires_ms) = 'integer' AND expires_ms > ?2)`
