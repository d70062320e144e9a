package postgres

import (
	"fmt"
	"io"
	"strings"
	"text/template"
)

// The statements of a Store are text/template templates, filled once per
// Store (prepareSQL) with:
//
//	{{.T}}                   the leases table (a quoted identifier)
//	{{.Q}}                   its token sequence (a quoted identifier)
//	{{ms}}                   the TTL ($3) in milliseconds, as an interval
//	{{live "a" "now"}}       row alias a holds a live lease at time now
//	{{remain "a"}}           the time left on the lease of row alias a, milliseconds
//	{{template "holder" (cte . "u")}}  the holder when the write of CTE u did not apply
//
// Every value a caller gives is a bound parameter ($1...), never text.

// acquireSQL grants a free resource, renews the same grant's live lease (a
// retry), or, when another owner holds it, marks the row as waited for and
// returns the holder, in one statement. ON CONFLICT locks the row and
// evaluates the SET on its newest version, with the clock read once after
// the lock, so concurrent acquires serialise on the row and a grant's TTL
// counts from its effect. The token of a grant is max(nextval, the clock
// in µs) for a name without a row, and also above the row's token (the
// last one granted: rows are kept SweepGrace after release) for a name
// with one; setval carries the clock or the row's token into the sequence,
// so the next grant of any resource is above it. A statement that granted
// nothing changed only the waiters mark (a hint): it commits without
// waiting for the WAL flush.
const acquireSQL = `INSERT INTO {{.T}} AS l (resource, owner, token, ttl_ms, expires_at, granted_at, waiters)
SELECT $1, $2, CASE WHEN n.c > n.v THEN setval('{{.Q}}', n.c) ELSE n.v END, $3, n.now + {{ms}}, n.now, false
FROM (SELECT nextval('{{.Q}}') AS v, (extract(epoch FROM c.now) * 1000000)::bigint AS c, c.now FROM (SELECT clock_timestamp() AS now) c) n
ON CONFLICT (resource) DO UPDATE SET (token, owner, granted_at, ttl_ms, expires_at, waiters) = (
	SELECT
		CASE WHEN s.live THEN l.token WHEN s.floor > excluded.token THEN setval('{{.Q}}', s.floor) ELSE excluded.token END,
		CASE WHEN s.live THEN l.owner ELSE excluded.owner END,
		CASE WHEN s.live THEN l.granted_at ELSE s.now END,
		CASE WHEN s.other THEN l.ttl_ms ELSE excluded.ttl_ms END,
		CASE WHEN s.other THEN l.expires_at ELSE s.now + {{ms}} END,
		CASE WHEN s.other THEN true ELSE coalesce(l.waiters, false) END
	FROM (SELECT c.now, {{live "l" "c.now"}} AS live, {{live "l" "c.now"}} AND l.owner <> excluded.owner AS other, coalesce(l.token, 0) + 1 AS floor
		FROM (SELECT clock_timestamp() AS now) c) s
)
RETURNING owner, token, coalesce(ttl_ms, 0), {{remain "l"}},
	CASE WHEN owner IS DISTINCT FROM $2 THEN set_config('synchronous_commit', 'off', true) END`

// getSQL reads the holder for Get. Get and List judge a row live at the
// start of the statement's transaction (now(): they run as one statement
// each), which is before the statement took its snapshot, never at
// clock_timestamp(), read after it: a lease that expired between the
// snapshot and that reading, renewed by a session that committed
// meanwhile, would read as free although it never was. A row the snapshot
// holds whose expiry is after now() was live then, or (committed after
// now()) when it committed.
const getSQL = `SELECT owner, token, coalesce(ttl_ms, 0), {{remain "h"}} FROM {{.T}} h WHERE resource = $1 AND {{live "h" "now()"}}`

// holderSQL ends Renew, Keep and Release: they answer with no row when
// they applied, and with one row naming the current holder (NULLs when
// there is none) when they did not, in the same statement. The holder is
// read from the statement's snapshot (taken before the write), which is
// enough to tell "taken by X" from "gone". The write's CTE ({{.CTE}})
// gates the read (a one-time filter; OFFSET 0 keeps the subquery), so a
// write that applied reads nothing more and sends no row back.
const holderSQL = `SELECT h.owner, h.token, coalesce(h.ttl_ms, 0), {{remain "h"}}
FROM (SELECT) AS one LEFT JOIN LATERAL (SELECT * FROM {{.T}} h WHERE h.resource = $1 AND {{live "h" "clock_timestamp()"}} OFFSET 0) h ON true
WHERE NOT EXISTS (SELECT FROM {{.CTE}})`

// renewSQL sets a new expiry on the live lease of this owner and token.
const renewSQL = `WITH u AS (
	UPDATE {{.T}} SET ttl_ms = $4, expires_at = clock_timestamp() + ($4::bigint * interval '1 millisecond')
	WHERE resource = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
	RETURNING 1
)
{{template "holder" (cte . "u")}}`

// keepSQL hands the lease to another owner string ($5) with a new expiry,
// in the same shape as renewSQL.
const keepSQL = `WITH u AS (
	UPDATE {{.T}} SET owner = $5, ttl_ms = $4, expires_at = clock_timestamp() + ($4::bigint * interval '1 millisecond')
	WHERE resource = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
	RETURNING 1
)
{{template "holder" (cte . "u")}}`

// releaseSQL frees the row (its token stays, and the time it was freed is
// kept in granted_at for the sweep) and notifies, in the same statement
// (RETURNING is computed for every row the CTE changes, whether or not it
// is read), only when the row says someone waits: NOTIFY is delivered
// when, and only if, the release commits. The mark stays with the row (the
// waiters that a release did not wake look again only when the next
// holder's lease would expire, so the next release must wake one); the
// row, and its mark, go when the name is not used for SweepGrace.
const releaseSQL = `WITH f AS (
	UPDATE {{.T}} SET owner = NULL, ttl_ms = NULL, expires_at = NULL, granted_at = clock_timestamp()
	WHERE resource = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
	RETURNING CASE WHEN waiters THEN pg_notify($4, $1)::text END
)
{{template "holder" (cte . "f")}}`

// renewBatchSQL is RenewBatch: every renewal in one UPDATE over the
// unnested arrays; one answer row per lease that was not renewed (b.i is
// its 1-based position), naming its holder.
const renewBatchSQL = `WITH b AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS b(resource, owner, token, ttl_ms, i)
), u AS (
	UPDATE {{.T}} l SET ttl_ms = b.ttl_ms, expires_at = clock_timestamp() + (b.ttl_ms * interval '1 millisecond')
	FROM b WHERE l.resource = b.resource AND l.owner = b.owner AND l.token = b.token AND l.expires_at > clock_timestamp()
	RETURNING b.i
)
SELECT b.i, h.owner, h.token, coalesce(h.ttl_ms, 0), {{remain "h"}}
FROM b LEFT JOIN u ON u.i = b.i
LEFT JOIN LATERAL (SELECT * FROM {{.T}} h WHERE u.i IS NULL AND h.resource = b.resource AND {{live "h" "clock_timestamp()"}} OFFSET 0) h ON true
WHERE u.i IS NULL`

// listSQL is List: the live leases whose names start with $1, judged as
// getSQL judges them.
const listSQL = `SELECT resource, owner, token, coalesce(ttl_ms, 0), {{remain "h"}}
FROM {{.T}} h WHERE resource >= $1 AND starts_with(resource, $1) AND {{live "h" "now()"}}
ORDER BY resource`

// deadSQL is a row of alias d that Sweep deletes: a lease that expired or
// was released SweepGrace ago ({{.Grace}}), or a row that is neither a
// lease nor a released one (a partial row).
const deadSQL = `(((d.owner IS NOT NULL AND d.expires_at > clock_timestamp() - {{.Grace}} AND d.token > 0)
	OR (d.owner IS NULL AND d.granted_at > clock_timestamp() - {{.Grace}})) IS NOT TRUE)`

// sweepSQL deletes up to sweepBatch ({{.Batch}}) dead rows. It raises the
// sequence to the largest token of the rows it deletes (when it is below
// it) before they are gone: a row is a resource's token floor, and the
// sequence must take over when it goes. Concurrent grants each setval the
// sequence to their own clock reading, in no order, so it can lag the
// largest token granted by their skew (under a millisecond); the clock
// hides that while it runs forward, and this raise closes it for the swept
// names whatever the clock does.
const sweepSQL = `WITH d AS (
	DELETE FROM {{.T}} d WHERE resource IN (SELECT resource FROM {{.T}} d WHERE {{template "dead" .}} LIMIT {{.Batch}}) AND {{template "dead" .}} RETURNING d.token
), m AS (SELECT count(*) AS n, max(token) AS top FROM d)
SELECT m.n, CASE WHEN m.top > q.last_value THEN setval('{{.Q}}', m.top) END FROM m, {{.Q}} q`

// probeSQL sends a notification on the channel $1, for the listener's
// check that notifications reach it (notify.go).
const probeSQL = `SELECT pg_notify($1, $2)`

// watchSQL marks the live lease on $1 as waited for, so that its release
// notifies.
const watchSQL = `UPDATE {{.T}} SET waiters = true WHERE resource = $1 AND owner IS NOT NULL AND waiters IS NOT TRUE`

// sweepBatch bounds the rows one sweep statement deletes.
const sweepBatch = 1000

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

// sqlNames fill the templates.
type sqlNames struct {
	T, Q  string // table, sequence
	CTE   string // for holderSQL
	Grace string // SweepGrace as an interval
	Batch int    // sweepBatch
}

// statements are the templates, parsed and tried once: a mistake in one
// panics when the package is loaded, never later.
var statements = func() *template.Template {
	t := template.New("").Funcs(template.FuncMap{
		"ms":     func() string { return ms },
		"live":   liveSQL,
		"remain": remainSQL,
		"cte":    func(n sqlNames, cte string) sqlNames { n.CTE = cte; return n },
	})
	for name, text := range map[string]string{
		"acquire": acquireSQL, "holder": holderSQL, "get": getSQL, "renew": renewSQL, "keep": keepSQL,
		"release": releaseSQL, "renewBatch": renewBatchSQL, "list": listSQL, "dead": deadSQL,
		"sweep": sweepSQL, "watch": watchSQL,
	} {
		template.Must(t.New(name).Parse(text))
	}
	for _, tt := range t.Templates() {
		if err := tt.Execute(io.Discard, sqlNames{T: "t", Q: "q"}); err != nil {
			panic(err)
		}
	}
	return t
}()

// fill returns the statement of the template name for these names.
func (n sqlNames) fill(name string) string {
	var b strings.Builder
	if err := statements.ExecuteTemplate(&b, name, n); err != nil {
		panic(fmt.Sprintf("postgres store: statement %s: %v", name, err)) // the templates are constants
	}
	return b.String()
}

// prepareSQL fills the Store's statements.
func (s *Store) prepareSQL() {
	n := sqlNames{T: s.table, Q: s.seq, Grace: fmt.Sprintf("interval '%d milliseconds'", SweepGrace.Milliseconds()), Batch: sweepBatch}
	s.sql.acquire = n.fill("acquire")
	s.sql.holder = n.fill("get")
	s.sql.renew = n.fill("renew")
	s.sql.keep = n.fill("keep")
	s.sql.release = n.fill("release")
	s.sql.renewBatch = n.fill("renewBatch")
	s.sql.list = n.fill("list")
	s.sql.sweep = n.fill("sweep")
	s.sql.probe = probeSQL
	s.sql.watch = n.fill("watch")
}
