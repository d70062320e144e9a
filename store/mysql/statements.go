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

func (s *Store) prepareSQL() {
	t, f := s.table, s.floor
	floor := fmt.Sprintf(`COALESCE((SELECT top FROM %s WHERE id = 1 LOCK IN SHARE MODE), 0) + 1`, f)
	// Acquire: one statement that grants a free resource, renews the same
	// grant's live lease (a retry), or, when another owner holds it,
	// changes nothing. ON DUPLICATE KEY UPDATE locks the row and evaluates
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
	other := fmt.Sprintf(`(owner IS NOT NULL AND expires_at > %s AND owner <> :o)`, now)
	s.sql.acquire = named(fmt.Sprintf(`INSERT INTO %[1]s (resource, owner, token, ttl_us, expires_at, granted_at)
VALUES (:r, :o, LAST_INSERT_ID(GREATEST(%[2]s, %[3]s)), :ttl, %[4]s + INTERVAL :ttl MICROSECOND, %[4]s)
ON DUPLICATE KEY UPDATE
	ttl_us = IF(%[5]s, ttl_us, :ttl),
	granted_at = IF(%[6]s, granted_at, %[4]s),
	token = LAST_INSERT_ID(IF(%[6]s, token, GREATEST(token + 1, %[2]s, %[3]s))),
	owner = IF(%[5]s, owner, :o),
	expires_at = IF(%[5]s, expires_at, %[4]s + INTERVAL :ttl MICROSECOND)`,
		t, floor, clockMicros, now, other, live("")))
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
	// List: LEFT counts bytes in a binary string; the range lets the
	// primary key find the first row. The empty prefix has a statement of
	// its own: MariaDB's EMPTY_STRING_IS_NULL reads '' as NULL.
	s.sql.listAll = fmt.Sprintf(`SELECT resource, owner, token, COALESCE(ttl_us, 0), %[2]s FROM %[1]s WHERE %[3]s ORDER BY resource`,
		t, remaining(""), live(""))
	s.sql.list = named(fmt.Sprintf(`SELECT resource, owner, token, COALESCE(ttl_us, 0), %[2]s FROM %[1]s
WHERE resource >= :p AND LEFT(resource, :n) = :p AND %[3]s ORDER BY resource`, t, remaining(""), live("")))
	// Sweep: rows of leases that expired or were released SweepGrace ago,
	// and rows that are neither a lease nor a released one (partial rows).
	// Three statements, each committed on its own, so that the sweep holds
	// no lock between two of them (a sweeping process that is paused or
	// cut off must not stop the grants of other processes): read the rows
	// due and their tokens; raise the floor to the largest; delete those
	// rows that are still due and whose token the floor covers. A grant
	// that read the floor before it was raised held the floor row in share
	// mode until its statement ended, and so ended before the raise and
	// before the delete: it found the row, and took the token above it.
	grace := fmt.Sprintf(`%s - INTERVAL %d MICROSECOND`, now, SweepGrace.Microseconds())
	dead := fmt.Sprintf(`NOT COALESCE((owner IS NOT NULL AND expires_at > %[1]s) OR (owner IS NULL AND granted_at > %[1]s), FALSE)`, grace)
	s.sql.deadRows = fmt.Sprintf(`SELECT resource, token FROM %s WHERE %s LIMIT %d`, t, dead, sweepBatch)
	s.sql.deleteDead = fmt.Sprintf(`DELETE FROM %s WHERE resource IN (%%s) AND token <= ? AND %s`, t, dead)
	s.sql.raiseFloor = named(fmt.Sprintf(`INSERT INTO %s (id, top) VALUES (1, :top) ON DUPLICATE KEY UPDATE top = GREATEST(top, :top)`, f))
	s.sql.poll = fmt.Sprintf(`SELECT resource FROM %s WHERE resource IN (%%s) AND %s`, t, live(""))
}

// sweepBatch bounds the rows one sweep statement deletes.
const sweepBatch = 1000

// placeholders returns "?, ?, ..." for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
