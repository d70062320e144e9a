package cassandra

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tenure-go/tenure/driver"
)

// grant is one Acquire in ModeNative.
type grant struct {
	s          *Store
	resource   string
	owner      string
	ttl        time.Duration
	secs       int
	ttlMs, wid int64
	// waiter names the blocking acquire of an AcquireWaiting (driver.
	// Reserver); empty for Acquire, and when the table has no waiter
	// column.
	waiter string
}

// attempt is the result of one conditional write of a grant: done with a
// record or an error, or not applied with the current row.
type attempt struct {
	done bool
	rec  driver.Record
	err  error
	row  row
}

func (g grant) granted(token uint64) attempt {
	g.s.cache.wrote(g.resource, g.owner, token, g.wid)
	return attempt{done: true, rec: driver.Record{
		Resource:  g.resource,
		Owner:     g.owner,
		Token:     token,
		TTL:       g.ttl,
		Remaining: time.Duration(g.secs-1) * time.Second,
	}}
}

// fresh grants a resource that has no row, with a token above last (see
// nextToken).
func (g grant) fresh(ctx context.Context, last uint64) attempt {
	next := g.s.nextToken(last)
	if next > math.MaxInt64 {
		return attempt{done: true, err: fmt.Errorf("cassandra store: acquire %q: fencing tokens exhausted", g.resource)}
	}
	applied, cur, err := g.s.casBatch(ctx,
		batchStmt{g.s.st.grantNewInsert, []any{g.resource, int64(next)}},
		batchStmt{g.s.st.grantNewOwner, []any{g.secs, g.owner, g.ttlMs, g.wid, g.resource}},
	)
	switch {
	case err != nil:
		return g.resolve(ctx, err, func(r row) bool { return !r.present })
	case applied:
		return g.granted(next)
	}
	return attempt{row: cur}
}

// free grants a resource whose row is free with the token cell cell (an
// int64, or nil for null), with a token above last (see nextToken).
func (g grant) free(ctx context.Context, cell any, last uint64) attempt {
	next := g.s.nextToken(last)
	if next > math.MaxInt64 {
		return attempt{done: true, err: fmt.Errorf("cassandra store: acquire %q: fencing tokens exhausted", g.resource)}
	}
	owner := batchStmt{g.s.st.grantFreeOwner, []any{g.secs, g.owner, g.ttlMs, g.wid, g.resource, cell}}
	switch {
	case g.waiter != "":
		owner = batchStmt{g.s.st.grantFreeReserved, []any{g.secs, g.owner, g.ttlMs, g.wid, g.resource, cell, g.waiter}}
	case g.s.reservations:
		owner = batchStmt{g.s.st.grantFreeUnreserved, []any{g.secs, g.owner, g.ttlMs, g.wid, g.resource, cell}}
	}
	applied, cur, err := g.s.casBatch(ctx, owner, batchStmt{g.s.st.grantFreeToken, []any{int64(next), g.resource}})
	switch {
	case err != nil:
		// The condition holds again whenever the row is free with this
		// token: a lease on it (its grant, or a hold) ends by a release
		// or by expiry, which keep the token; only a new grant changes it.
		return g.resolve(ctx, err, func(r row) bool { return r.present && r.tokenCell == cell })
	case applied:
		return g.granted(next)
	}
	return attempt{row: cur}
}

// ownRow reports whether the row read by a write that was not applied is
// a lease of this grant's owner string: the same grant (an earlier call of
// it whose answer was lost), which Acquire renews. It notes the row's write
// when the row is whole (IF NOT EXISTS answers every column), the write a
// renewal applies over.
func (g grant) ownRow(cur row) bool {
	if !cur.hasOwner || cur.owner != g.owner || cur.token == 0 {
		return false
	}
	if cur.writeIDCell != nil {
		g.s.cache.saw(g.resource, cur)
	}
	return true
}

// renewal renews the same owner's live lease with token: Acquire by the
// holder is the same lease, renewed.
func (g grant) renewal(ctx context.Context, token uint64) attempt {
	applied, cur, wid, err := g.s.casRenew(ctx, g.secs, g.owner, g.ttlMs, g.resource, g.owner, token)
	g.wid = wid // the write a lost answer's read looks for
	switch {
	case err != nil:
		return g.resolve(ctx, err, func(r row) bool { return r.owner == g.owner && r.token == token })
	case applied:
		return g.granted(token)
	case ours(cur, g.owner, token):
		return attempt{done: true, err: unknownf("acquire", g.resource, errPassed,
			"other writes of this grant passed its renewal %d times; the lease is still this grant's (%s)", renewAttempts, cur)}
	}
	return attempt{row: cur}
}

// resolve settles a grant attempt whose answer was lost. pending reports
// whether, in the row read, the attempt's condition holds or may hold
// again, so that the write may yet be applied if it is still on its way: a
// request held up before its coordinator ran it (a paused node, a late
// delivery) is evaluated against the row as it is then, however long after
// the caller gave up.
func (g grant) resolve(ctx context.Context, cause error, pending func(row) bool) attempt {
	cur, err := g.s.resolve(ctx, "acquire", g.resource, cause)
	switch {
	case err != nil:
		return attempt{done: true, err: err}
	case cur.hasOwner && cur.owner == g.owner && cur.writeID == g.wid:
		// This very write was applied, at or after the request was sent.
		a := g.granted(cur.token)
		if cur.remaining > 0 {
			a.rec.Remaining = remaining(cur.remaining) // as the read saw it
		}
		return a
	case pending(cur):
		return attempt{done: true, err: unknownf("acquire", g.resource, cause, "the answer was lost and the write is not applied yet (%s); it may still be", cur)}
	case cur.hasOwner && cur.owner == g.owner:
		return attempt{done: true, err: unknownf("acquire", g.resource, cause, "the answer was lost; this owner holds the resource by another write (%s)", cur)}
	}
	// Another owner holds it, or the resource changed hands: this write's
	// condition can no longer hold.
	if cur.token > 0 {
		g.s.cache.set(g.resource, cur.token)
	}
	return attempt{done: true, err: cur.held(g.resource)}
}
