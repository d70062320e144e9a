package mysql

import (
	"fmt"
	"regexp"
	"strings"
)

// now is the database's clock in every statement: UTC (whatever the
// session's time_zone), to the microsecond, read when the statement
// started, the same value at each use within it, and the value that
// statement-based replication replays on replicas. SYSDATE(6) is none of
// these.
const now = `UTC_TIMESTAMP(6)`

// clockMicros is now in microseconds since the Unix epoch: the clock floor
// of fencing tokens.
const clockMicros = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + now + `)`

// live is the condition of a live lease on the row (alias prefix p, "" or
// "l."): an owner and an expiry after now. Anything else (expired,
// released, or a partial row written by another tool: no owner or no
// expiry) is free.
func live(p string) string {
	return fmt.Sprintf(`(%[1]sowner IS NOT NULL AND %[1]sexpires_at > %[2]s)`, p, now)
}

// remaining is the time left on the lease of the row (alias prefix p), in
// microseconds.
func remaining(p string) string {
	return fmt.Sprintf(`TIMESTAMPDIFF(MICROSECOND, %s, %sexpires_at)`, now, p)
}

// stmt is a statement whose parameters are named (:name) in its text: text
// has a ? for each, and names their order.
type stmt struct {
	text  string
	names []string
}

var paramRE = regexp.MustCompile(`:[a-z]+`)

func named(text string) stmt {
	var s stmt
	s.text = paramRE.ReplaceAllStringFunc(text, func(m string) string {
		s.names = append(s.names, m[1:])
		return "?"
	})
	return s
}

// args returns the statement's arguments in order from their values by
// name; a name without a value is a programming error.
func (s stmt) args(values map[string]any) []any {
	out := make([]any, len(s.names))
	for i, n := range s.names {
		v, ok := values[n]
		if !ok {
			panic("mysql store: no value for :" + n)
		}
		out[i] = v
	}
	return out
}

// prepareSQL builds the store's statements for its table names.
func (s *Store) prepareSQL() {
	s.sql.acquire = s.acquireSQL()
	s.sql.acquireRes = s.acquireReservedSQL()
	s.prepareReservationSQL()
	s.prepareGrantSQL()
	s.prepareListSQL()
	s.prepareSweepSQL()
}

// tokenFloor is the lowest token the token table allows for a new grant:
// one above its top, read in share mode so that a sweep cannot raise it
// while the grant's statement runs.
func (s *Store) tokenFloor() string {
	return fmt.Sprintf(`COALESCE((SELECT top FROM %s WHERE id = 1 LOCK IN SHARE MODE), 0) + 1`, s.floor)
}

// heldByOther is the condition of a live lease on the row held by another
// owner than :o.
const heldByOther = `(owner IS NOT NULL AND expires_at > ` + now + ` AND owner <> :o)`

// acquireSQL is Acquire: one statement that grants a free resource,
// renews the same grant's live lease (a retry), or, when another owner
// holds it, changes nothing. ON DUPLICATE KEY UPDATE locks the row and evaluates
// the assignments on its newest committed version (also under READ
// COMMITTED, and on Galera, where a concurrent write of the row by
// another node fails one of the two at certification).
//
// The assignments are ordered so that each one reads only columns
// that no earlier assignment changed, or reads them in a way whose
// answer the change cannot alter: MySQL and MariaDB evaluate them left
// to right, each seeing the values the earlier ones set, while
// MariaDB's SIMULTANEOUS_ASSIGNMENT mode evaluates all of them on the
// old row, and the statement must mean the same under both. ttl_us,
// granted_at and token read the old owner and expiry. owner reads the
// old expiry and itself. expires_at reads owner after it changed:
// "live and another owner than :o" is true before the change exactly
// when it is after it (an owner that was kept is still another; one
// that became :o no longer is).
//
// LAST_INSERT_ID(expr) hands the row's token back in the reply's
// insert id (no second round trip); the count of changed rows says
// what happened: 1 a new row (granted), 2 a changed row (granted, or
// the same grant renewed), 0 nothing changed (held by another owner).
func (s *Store) acquireSQL() stmt {
	return named(fmt.Sprintf(`INSERT INTO %[1]s (resource, owner, token, ttl_us, expires_at, granted_at)
VALUES (:r, :o, LAST_INSERT_ID(GREATEST(%[2]s, %[3]s)), :ttl, %[4]s + INTERVAL :ttl MICROSECOND, %[4]s)
ON DUPLICATE KEY UPDATE
	ttl_us = IF(%[5]s, ttl_us, :ttl),
	granted_at = IF(%[6]s, granted_at, %[4]s),
	token = LAST_INSERT_ID(IF(%[6]s, token, GREATEST(token + 1, %[2]s, %[3]s))),
	owner = IF(%[5]s, owner, :o),
	expires_at = IF(%[5]s, expires_at, %[4]s + INTERVAL :ttl MICROSECOND)`,
		s.table, s.tokenFloor(), clockMicros, now, heldByOther, live("")))
}

// acquireReservedSQL is Acquire on a store with reservations
// (driver.Reserver): the same statement, with the resource also kept from anyone else while it is
// free and reserved for another waiter than :w (NULL for a plain
// Acquire) behind the lease that freed it: a reservation names the
// token of the lease it waited behind, and reserves only the release
// of that lease, so one left behind by a waiter that was granted since
// (its clearing is a statement of its own) keeps nothing. The
// reservation is read once, by a locking read (the newest committed
// one), into the user variable @tenure_reserved (its token; 0: none)
// while the VALUES row is evaluated, before the row is inserted or
// updated; every assignment reads that variable, which no assignment
// changes. Evaluating the subquery in each assignment instead could
// give them different answers under READ COMMITTED (no gap lock keeps
// a reservation from being inserted meanwhile); an INSERT ... SELECT
// is unsafe for statement-based replication. "blocked" (held by
// another owner, or free and reserved for another waiter behind its
// last lease) reads the owner, the expiry, the token and the variable,
// and, like heldByOther, means the same before and after the
// assignments that change them: they change only when it is false, and
// it stays false (a new token is above the reservation's; a reservation
// and not blocked means that :o holds a live lease, which the change
// keeps). A row that does not exist is inserted whatever the
// reservation: one is made only while the resource is held, and a
// lease's row stays until the sweep, a minute after its release or
// expiry.
func (s *Store) acquireReservedSQL() stmt {
	blocked := fmt.Sprintf(`(%s OR (@tenure_reserved >= token AND NOT COALESCE(%s, FALSE)))`, heldByOther, live(""))
	reservedTok := fmt.Sprintf(`COALESCE((SELECT token FROM %s WHERE resource = :r AND expires_at > %s AND NOT (waiter <=> :w) LOCK IN SHARE MODE), 0)`, s.waits, now)
	return named(fmt.Sprintf(`INSERT INTO %[1]s (resource, owner, token, ttl_us, expires_at, granted_at)
VALUES (IF((@tenure_reserved := %[7]s) >= 0, :r, :r), :o, LAST_INSERT_ID(GREATEST(%[2]s, %[3]s)), :ttl, %[4]s + INTERVAL :ttl MICROSECOND, %[4]s)
ON DUPLICATE KEY UPDATE
	ttl_us = IF(%[5]s, ttl_us, :ttl),
	granted_at = IF(%[6]s OR %[5]s, granted_at, %[4]s),
	token = LAST_INSERT_ID(IF(%[6]s OR %[5]s, token, GREATEST(token + 1, %[2]s, %[3]s))),
	owner = IF(%[5]s, owner, :o),
	expires_at = IF(%[5]s, expires_at, %[4]s + INTERVAL :ttl MICROSECOND)`,
		s.table, s.tokenFloor(), clockMicros, now, blocked, live(""), reservedTok))
}

// prepareReservationSQL builds the statements of the reservations table
// (driver.Reserver) other than the acquire's and the sweep's.
func (s *Store) prepareReservationSQL() {
	t := s.table
	// The live reservation of a free resource by another waiter than :w
	// behind its last lease, with its time left in microseconds.
	s.sql.reserved = named(fmt.Sprintf(`SELECT w.waiter, TIMESTAMPDIFF(MICROSECOND, %[3]s, w.expires_at) FROM %[1]s w JOIN %[2]s l ON l.resource = w.resource
WHERE w.resource = :r AND w.expires_at > %[3]s AND NOT (w.waiter <=> :w) AND w.token >= l.token`, s.waits, t, now))
	// Reserve the resource for :w behind the lease with token :k (the
	// holder the attempt found), or behind a later one when the row has
	// moved on meanwhile (the holder released it and took it again before
	// this statement: a reservation behind the older lease would hold
	// nothing), for :wait microseconds, unless another waiter's
	// reservation behind that lease (or a later one) is live. waiter is
	// assigned first; the conditions of the others read it after the
	// change, when they mean the same (it changed only when the condition
	// was false, and :w is not another).
	behind := fmt.Sprintf(`GREATEST(:k, COALESCE((SELECT token FROM %s WHERE resource = :r LOCK IN SHARE MODE), 0))`, t)
	keepRes := fmt.Sprintf(`(expires_at > %s AND waiter <> :w AND token >= @tenure_behind)`, now)
	s.sql.reserve = named(fmt.Sprintf(`INSERT INTO %[1]s (resource, waiter, token, expires_at) VALUES (:r, :w, (@tenure_behind := %[4]s), %[2]s + INTERVAL :wait MICROSECOND)
ON DUPLICATE KEY UPDATE
	waiter = IF(%[3]s, waiter, :w),
	token = IF(%[3]s, token, @tenure_behind),
	expires_at = IF(%[3]s, expires_at, %[2]s + INTERVAL :wait MICROSECOND)`, s.waits, now, keepRes, behind))
	// The reservation of a resource just granted to its waiter (or one
	// that lapsed) ends; Unreserve ends a waiter's.
	s.sql.clearReserved = named(fmt.Sprintf(`DELETE FROM %s WHERE resource = :r AND (waiter = :w OR expires_at <= %s)`, s.waits, now))
	s.sql.unreserve = named(fmt.Sprintf(`DELETE FROM %s WHERE resource = :r AND waiter = :w`, s.waits))
}

// prepareGrantSQL builds the statements that read and change one
// resource's lease.
func (s *Store) prepareGrantSQL() {
	t := s.table
	s.sql.holder = named(fmt.Sprintf(`SELECT owner, token, COALESCE(ttl_us, 0), %[2]s FROM %[1]s WHERE resource = :r AND %[3]s`,
		t, remaining(""), live("")))
	// Renew, Keep and Release change the row only when the live lease is
	// this grant's; when they change nothing, the holder is read by a
	// second statement.
	match := fmt.Sprintf(`WHERE resource = :r AND owner = :o AND token = :k AND expires_at > %s`, now)
	s.sql.renew = named(fmt.Sprintf(`UPDATE %s SET ttl_us = :ttl, expires_at = %s + INTERVAL :ttl MICROSECOND %s`, t, now, match))
	s.sql.keep = named(fmt.Sprintf(`UPDATE %s SET owner = :keeper, ttl_us = :ttl, expires_at = %s + INTERVAL :ttl MICROSECOND %s`, t, now, match))
	// Release frees the row; its token stays as the floor of the next
	// grant, and the time it was freed is kept in granted_at for the sweep.
	s.sql.release = named(fmt.Sprintf(`UPDATE %s SET owner = NULL, ttl_us = NULL, expires_at = NULL, granted_at = %s %s`, t, now, match))
}

// prepareListSQL builds the statements that read the live leases of many
// resources.
func (s *Store) prepareListSQL() {
	t := s.table
	// List: LEFT counts bytes in a binary string; the range lets the
	// primary key find the first row. The empty prefix has a statement of
	// its own: MariaDB's EMPTY_STRING_IS_NULL reads '' as NULL.
	s.sql.listAll = fmt.Sprintf(`SELECT resource, owner, token, COALESCE(ttl_us, 0), %[2]s FROM %[1]s WHERE %[3]s ORDER BY resource`,
		t, remaining(""), live(""))
	s.sql.list = named(fmt.Sprintf(`SELECT resource, owner, token, COALESCE(ttl_us, 0), %[2]s FROM %[1]s
WHERE resource >= :p AND LEFT(resource, :n) = :p AND %[3]s ORDER BY resource`, t, remaining(""), live("")))
	// Poll: which of the watched resources have a live lease.
	s.sql.poll = fmt.Sprintf(`SELECT resource FROM %s WHERE resource IN (%%s) AND %s`, t, live(""))
}

// prepareSweepSQL builds the sweep's statements. The sweep deletes the
// rows of leases that expired or were released SweepGrace ago, and rows
// that are neither a lease nor a released one (partial rows).
// Three statements, each committed on its own, so that the sweep holds
// no lock between two of them (a sweeping process that is paused or
// cut off must not stop the grants of other processes): read the rows
// due and their tokens; raise the floor to the largest; delete those
// rows that are still due and whose token the floor covers. A grant
// that read the floor before it was raised held the floor row in share
// mode until its statement ended, and so ended before the raise and
// before the delete: it found the row, and took the token above it.
func (s *Store) prepareSweepSQL() {
	t, f := s.table, s.floor
	grace := fmt.Sprintf(`%s - INTERVAL %d MICROSECOND`, now, SweepGrace.Microseconds())
	dead := fmt.Sprintf(`NOT COALESCE((owner IS NOT NULL AND expires_at > %[1]s) OR (owner IS NULL AND granted_at > %[1]s), FALSE)`, grace)
	s.sql.deadRows = fmt.Sprintf(`SELECT resource, token FROM %s WHERE %s LIMIT %d`, t, dead, sweepBatch)
	s.sql.deleteDead = fmt.Sprintf(`DELETE FROM %s WHERE resource IN (%%s) AND token <= ? AND %s`, t, dead)
	s.sql.raiseFloor = named(fmt.Sprintf(`INSERT INTO %s (id, top) VALUES (1, :top) ON DUPLICATE KEY UPDATE top = GREATEST(top, :top)`, f))
	// Lapsed reservations are swept with the leases, a SweepGrace after
	// they lapsed.
	s.sql.sweepReserved = fmt.Sprintf(`DELETE FROM %s WHERE expires_at < %s - INTERVAL %d MICROSECOND`, s.waits, now, SweepGrace.Microseconds())
}

// sweepBatch bounds the rows one sweep statement deletes.
const sweepBatch = 1000

// placeholders returns "?, ?, ..." for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
