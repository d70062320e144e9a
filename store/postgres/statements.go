package postgres

import (
	"fmt"
)

// ms is a TTL in milliseconds as SQL sees it.
const ms = `($3::bigint * interval '1 millisecond')`

// liveSQL is the condition of a live lease on row alias a at time now.
// Anything else (expired, released by an older tenure, or a partial row
// written by another tool: owner, expiry or token missing) is free.
func liveSQL(a, now string) string {
	return fmt.Sprintf(`(%[1]s.owner IS NOT NULL AND %[1]s.expires_at > %[2]s AND %[1]s.token > 0) IS TRUE`, a, now)
}

// remainSQL is the time left on the lease of row alias a, milliseconds.
func remainSQL(a string) string {
	return fmt.Sprintf(`floor(extract(epoch FROM %s.expires_at - clock_timestamp()) * 1000)::bigint`, a)
}

func (s *Store) prepareSQL() {
	t, q := s.table, s.seq
	// Acquire: one statement that grants a free resource, renews the same
	// grant's live lease (a retry), or, when another owner holds it, marks
	// the row as waited for and returns the holder. ON CONFLICT locks the row
	// and evaluates the SET on its newest version, with the clock read once
	// after the lock, so concurrent acquires serialise on the row and a
	// grant's TTL counts from its effect. The token of a grant is
	// max(nextval, the clock in µs) for a name without a row, and also above
	// the row's token (the last one granted: rows are kept SweepGrace after
	// release) for a name with one; setval carries the clock or the row's
	// token into the sequence, so the next grant of any resource is above
	// it. A statement that granted nothing changed only the waiters mark (a
	// hint): it commits without waiting for the WAL flush.
	s.sql.acquire = fmt.Sprintf(`INSERT INTO %[1]s AS l (resource, owner, token, ttl_ms, expires_at, granted_at, waiters)
SELECT $1, $2, CASE WHEN n.c > n.v THEN setval('%[2]s', n.c) ELSE n.v END, $3, n.now + %[3]s, n.now, false
FROM (SELECT nextval('%[2]s') AS v, (extract(epoch FROM c.now) * 1000000)::bigint AS c, c.now FROM (SELECT clock_timestamp() AS now) c) n
ON CONFLICT (resource) DO UPDATE SET (token, owner, granted_at, ttl_ms, expires_at, waiters) = (
	SELECT
		CASE WHEN s.live THEN l.token WHEN s.floor > excluded.token THEN setval('%[2]s', s.floor) ELSE excluded.token END,
		CASE WHEN s.live THEN l.owner ELSE excluded.owner END,
		CASE WHEN s.live THEN l.granted_at ELSE s.now END,
		CASE WHEN s.other THEN l.ttl_ms ELSE excluded.ttl_ms END,
		CASE WHEN s.other THEN l.expires_at ELSE s.now + %[3]s END,
		CASE WHEN s.other THEN true ELSE coalesce(l.waiters, false) END
	FROM (SELECT c.now, %[4]s AS live, %[4]s AND l.owner <> excluded.owner AS other, coalesce(l.token, 0) + 1 AS floor
		FROM (SELECT clock_timestamp() AS now) c) s
)
RETURNING owner, token, coalesce(ttl_ms, 0), %[5]s,
	CASE WHEN owner IS DISTINCT FROM $2 THEN set_config('synchronous_commit', 'off', true) END`, t, q, ms, liveSQL("l", "c.now"), remainSQL("l"))
	// Get and List judge a row live at the start of the statement's
	// transaction (now(): they run as one statement each), which is before
	// the statement took its snapshot, never at clock_timestamp(), read
	// after it: a lease that expired between the snapshot and that reading,
	// renewed by a session that committed meanwhile, would read as free
	// although it never was. A row the snapshot holds whose expiry is after
	// now() was live then, or (committed after now()) when it committed.
	s.sql.holder = fmt.Sprintf(`SELECT owner, token, coalesce(ttl_ms, 0), %[2]s FROM %[1]s h WHERE resource = $1 AND %[3]s`,
		t, remainSQL("h"), liveSQL("h", "now()"))
	// Renew and Release answer with no row when they applied, and with one
	// row naming the current holder (NULLs when there is none) when they
	// did not, in the same statement: the holder is read from the
	// statement's snapshot (taken before the write), which is enough to
	// tell "taken by X" from "gone". The write's CTE gates the read (a
	// one-time filter; OFFSET 0 keeps the subquery), so a write that
	// applied reads nothing more and sends no row back.
	holder := func(cte string) string {
		return fmt.Sprintf(`SELECT h.owner, h.token, coalesce(h.ttl_ms, 0), %[1]s
FROM (SELECT) AS one LEFT JOIN LATERAL (SELECT * FROM %[2]s h WHERE h.resource = $1 AND %[3]s OFFSET 0) h ON true
WHERE NOT EXISTS (SELECT FROM %[4]s)`, remainSQL("h"), t, liveSQL("h", "clock_timestamp()"), cte)
	}
	s.sql.renew = fmt.Sprintf(`WITH u AS (
	UPDATE %[1]s SET ttl_ms = $4, expires_at = clock_timestamp() + ($4::bigint * interval '1 millisecond')
	WHERE resource = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
	RETURNING 1
)
%[2]s`, t, holder("u"))
	// Keep hands the lease to another owner string ($5) with a new expiry,
	// in the same shape as Renew.
	s.sql.keep = fmt.Sprintf(`WITH u AS (
	UPDATE %[1]s SET owner = $5, ttl_ms = $4, expires_at = clock_timestamp() + ($4::bigint * interval '1 millisecond')
	WHERE resource = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
	RETURNING 1
)
%[2]s`, t, holder("u"))
	// Release frees the row (its token stays, and the time it was freed is
	// kept in granted_at for the sweep) and notifies, in the same statement
	// (RETURNING is computed for every row the CTE changes, whether or not
	// it is read), only when the row says someone waits: NOTIFY is
	// delivered when, and only if, the release commits. The mark stays
	// with the row (the waiters that a release did not wake look again only
	// when the next holder's lease would expire, so the next release must
	// wake one); the row, and its mark, go when the name is not used for
	// SweepGrace.
	s.sql.release = fmt.Sprintf(`WITH f AS (
	UPDATE %[1]s SET owner = NULL, ttl_ms = NULL, expires_at = NULL, granted_at = clock_timestamp()
	WHERE resource = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
	RETURNING CASE WHEN waiters THEN pg_notify($4, $1)::text END
)
%[2]s`, t, holder("f"))
	// RenewBatch: every renewal in one UPDATE over the unnested arrays; one
	// answer row per lease that was not renewed (b.i is its 1-based
	// position), naming its holder.
	s.sql.renewBatch = fmt.Sprintf(`WITH b AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS b(resource, owner, token, ttl_ms, i)
), u AS (
	UPDATE %[1]s l SET ttl_ms = b.ttl_ms, expires_at = clock_timestamp() + (b.ttl_ms * interval '1 millisecond')
	FROM b WHERE l.resource = b.resource AND l.owner = b.owner AND l.token = b.token AND l.expires_at > clock_timestamp()
	RETURNING b.i
)
SELECT b.i, h.owner, h.token, coalesce(h.ttl_ms, 0), %[2]s
FROM b LEFT JOIN u ON u.i = b.i
LEFT JOIN LATERAL (SELECT * FROM %[1]s h WHERE u.i IS NULL AND h.resource = b.resource AND %[3]s OFFSET 0) h ON true
WHERE u.i IS NULL`,
		t, remainSQL("h"), liveSQL("h", "clock_timestamp()"))
	s.sql.list = fmt.Sprintf(`SELECT resource, owner, token, coalesce(ttl_ms, 0), %[2]s
FROM %[1]s h WHERE resource >= $1 AND starts_with(resource, $1) AND %[3]s
ORDER BY resource`, t, remainSQL("h"), liveSQL("h", "now()"))
	// Sweep: rows of leases that expired or were released SweepGrace ago,
	// and rows that are neither a lease nor a released one (partial rows).
	dead := fmt.Sprintf(`(((d.owner IS NOT NULL AND d.expires_at > clock_timestamp() - %[1]s AND d.token > 0)
	OR (d.owner IS NULL AND d.granted_at > clock_timestamp() - %[1]s)) IS NOT TRUE)`,
		fmt.Sprintf("interval '%d milliseconds'", SweepGrace.Milliseconds()))
	// The sweep raises the sequence to the largest token of the rows it
	// deletes (when it is below it) before they are gone: a row is a
	// resource's token floor, and the sequence must take over when it goes.
	// Concurrent grants each setval the sequence to their own clock reading,
	// in no order, so it can lag the largest token granted by their skew
	// (under a millisecond); the clock hides that while it runs forward, and
	// this raise closes it for the swept names whatever the clock does.
	s.sql.sweep = fmt.Sprintf(`WITH d AS (
	DELETE FROM %[1]s d WHERE resource IN (SELECT resource FROM %[1]s d WHERE %[2]s LIMIT %[3]d) AND %[2]s RETURNING d.token
), m AS (SELECT count(*) AS n, max(token) AS top FROM d)
SELECT m.n, CASE WHEN m.top > q.last_value THEN setval('%[4]s', m.top) END FROM m, %[4]s q`,
		t, dead, sweepBatch, s.seq)
	s.sql.probe = `SELECT pg_notify($1, $2)`
	s.sql.watch = fmt.Sprintf(`UPDATE %s SET waiters = true WHERE resource = $1 AND owner IS NOT NULL AND waiters IS NOT TRUE`, t)
}

// sweepBatch bounds the rows one sweep statement deletes.
const sweepBatch = 1000
