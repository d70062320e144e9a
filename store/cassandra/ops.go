package cassandra

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/tenure-go/tenure/driver"
)

// Acquire implements driver.Store. In ModeNative a grant is one conditional
// batch that sets the owner (with the TTL, see StoreTTL) and the next
// fencing token together; with the last token of the resource in the
// store's cache, acquiring a free resource is one lightweight transaction,
// and never more than two (a stale cache, or a lease of the same owner that
// is renewed). When the second also finds the resource changed hands, the
// result is a *driver.HeldError describing the row it saw; its Holder.Owner
// is empty when the resource was granted and freed again meanwhile.
//
// A new grant's token is max(the last token + 1, the client's clock in
// microseconds since the Unix epoch) (nextToken), so that tokens do not go
// back when a row is deleted by hand. Rows left half-written by other tools
// are repaired by the next grant, which keeps the token floor: a free row
// without a token, or with a zero or negative one, is granted like a free
// row. A row with an owner but no valid token is held until its owner cell
// expires; one whose owner cell never expires (no TTL: tenure never writes
// that) is refused with ErrForeignRow, once a read has shown it.
//
// Errors: driver.ErrInvalidResource, ErrInvalidOwner or ErrInvalidTTL before
// any I/O; *driver.HeldError when another owner holds the resource (Holder
// carries owner and token; Remaining is 0 because Cassandra's
// not-applied result carries no TTL); an error wrapping ErrForeignRow and
// driver.ErrHeld (not a *driver.HeldError) for a holder that never expires;
// an error wrapping driver.ErrUnknownOutcome when the answer was lost and a
// serial read could not show that this very write was applied; other driver
// errors wrapped.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := driver.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	return s.acquire(ctx, resource, owner, ttl, "", 0)
}

// acquire runs Acquire, or AcquireWaiting when waiter is not empty (the
// reservation lasting wait).
func (s *Store) acquire(ctx context.Context, resource, owner string, ttl time.Duration, waiter string, wait time.Duration) (driver.Record, error) {
	secs, err := StoreTTL(ttl)
	if err != nil {
		return driver.Record{}, err
	}
	if s.closed.Load() {
		return driver.Record{}, errClosed
	}
	if s.cfg.Mode == ModeJaeger {
		return s.acquireJaeger(ctx, resource, owner, ttl, secs)
	}
	g := grant{s: s, resource: resource, owner: owner, ttl: ttl, secs: secs, ttlMs: driver.Milliseconds(ttl), wid: newWriteID(), waiter: waiter}
	if !s.reservations {
		g.waiter = ""
	}
	var res attempt
	last, cached := s.cache.get(resource)
	if cached {
		res = g.free(ctx, int64(last), last)
	} else {
		res = g.fresh(ctx, 0)
	}
	if res.done {
		return res.rec, res.err
	}
	// The first attempt was not applied and its row says why; one more try.
	cur := res.row
	switch {
	case !cur.present:
		// The row was deleted behind our back (an operator); start above
		// the last token this store knows and the clock.
		res = g.fresh(ctx, last)
	case g.ownRow(cur):
		res = g.renewal(ctx, cur.token)
	case cur.hasOwner:
		return driver.Record{}, g.heldErr(ctx, cur, wait)
	case g.reservedOther(cur):
		return driver.Record{}, g.reservedErr(cur)
	default:
		// Free: grant it on the row's token cell as it is (possibly null
		// or not positive), above every token known.
		res = g.free(ctx, cur.tokenCell, max(cur.token, last))
	}
	if !res.done && g.ownRow(res.row) {
		// This grant's own write from an earlier call (a retry after a
		// lost answer) landed between the two attempts: the same lease,
		// renewed, never a holder to wait for.
		res = g.renewal(ctx, res.row.token)
	}
	if res.done {
		return res.rec, res.err
	}
	if res.row.hasOwner {
		return driver.Record{}, g.heldErr(ctx, res.row, wait)
	}
	s.cache.set(resource, res.row.token)
	if g.reservedOther(res.row) {
		return driver.Record{}, g.reservedErr(res.row)
	}
	return driver.Record{}, res.row.held(resource)
}

// nextToken returns the fencing token of a new grant on a resource whose
// last known token is last: max(last + 1, the client's clock in
// microseconds since the Unix epoch). The grant's condition (the row's
// token is last, or there is no row) keeps tokens strictly increasing per
// resource whatever the clock says; the clock floor keeps them from going
// back when the row is lost (deleted by hand, or a table dropped and
// created again), unless the granting client's clock is behind the one
// that granted the lost token by more than the time since.
func (s *Store) nextToken(last uint64) uint64 {
	return max(last+1, uint64(max(s.now().UnixMicro(), 0)))
}

// heldCheckAfter is how long the same holder (owner and token) may be
// seen refusing this store's acquires before the store reads its row to
// check that the owner cell expires; see Store.heldErr.
const heldCheckAfter = 30 * time.Second

// ErrForeignRow is wrapped by the error of an Acquire that found the
// resource held by an owner whose cell has no TTL: a row that tenure never
// writes (another tool, or a hand-written UPDATE or INSERT without USING
// TTL), which would otherwise block the resource forever. The error says
// how to free it.
var ErrForeignRow = errors.New("lease row not written by tenure")

// heldErr returns the error of an acquire that found resource held by
// another owner, as the row cur says: a *driver.HeldError naming it, unless
// the holder's owner cell never expires. An owner cell without TTL cannot
// be told from a not-applied result (which carries no TTL), so the store
// reads the row (SERIAL, which also shows Remaining) when the row has no
// valid token (never written so by tenure), and when this store has seen
// the same holder for heldCheckAfter; a holder seen by a read never to
// expire makes this and later acquires fail with ErrForeignRow, until the
// row changes. Normal contention costs no read: holders change or expire
// before heldCheckAfter, or are checked once per heldCheckAfter.
func (s *Store) heldErr(ctx context.Context, resource string, cur row) error {
	now := s.now()
	since, checked, forever := s.cache.seen(resource, cur.owner, cur.token, now)
	if forever {
		return s.foreignHolder(resource, cur)
	}
	if (checked || cur.token > 0) && now.Sub(since) < s.heldCheckAfter {
		return cur.held(resource)
	}
	r, err := s.read(ctx, resource)
	if err != nil || !r.hasOwner || r.owner != cur.owner || r.token != cur.token {
		// The row changed, or the read failed: the next acquire tells.
		return cur.held(resource)
	}
	never := r.remaining <= 0 // TTL() of a live cell with a TTL is at least 1
	s.cache.checked(resource, cur.owner, cur.token, now, never)
	if never {
		return s.foreignHolder(resource, r)
	}
	return r.held(resource)
}

func (s *Store) foreignHolder(resource string, cur row) error {
	return fmt.Errorf("cassandra store: acquire %q: %s, and its owner cell has no TTL, so it never expires: tenure does not write such rows; "+
		"if that holder is gone, free the resource with UPDATE %s.%s SET owner = null, ttl_ms = null WHERE resource = <resource> IF owner = <owner> "+
		"(the next grant continues above the row's token): %w: %w",
		resource, cur, s.cfg.keyspace, s.cfg.table, ErrForeignRow, driver.ErrHeld)
}

// Renew implements driver.Store: one lightweight transaction that extends
// the lease only if the row still has this owner and fencing token (so it
// never re-creates an expired or replaced lease). Errors:
// ErrInvalidResource, ErrInvalidOwner or ErrInvalidTTL before any I/O; an
// error wrapping driver.ErrLeaseLost when the lease is not this owner's
// with this token (expired, released or replaced), and then also a
// *driver.HeldError naming the current holder when the row has one
// (driver.NotHolder: the not-applied result carries it, at no extra cost;
// its TTL and Remaining are 0, unknown); one wrapping
// driver.ErrUnknownOutcome when the answer was lost and a serial read could
// not show that this write was applied; other driver errors wrapped.
func (s *Store) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if err := driver.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	secs, err := StoreTTL(ttl)
	if err != nil {
		return err
	}
	if s.cfg.Mode == ModeJaeger {
		return s.renewJaeger(ctx, resource, owner, token, secs)
	}
	if token == 0 || token > math.MaxInt64 {
		return notHolder("renew", resource, owner, row{}, "no lease has token %d", token)
	}
	applied, cur, wid, err := s.casRenew(ctx, secs, owner, driver.Milliseconds(ttl), resource, owner, token)
	if err != nil {
		cur, rerr := s.resolve(ctx, "renew", resource, err)
		switch {
		case rerr != nil:
			return rerr
		case cur.owner == owner && cur.token == token && cur.writeID == wid:
			return nil
		case cur.owner == owner && cur.token == token:
			return unknownf("renew", resource, err, "the answer was lost and the renewal is not applied yet; it may still be")
		}
		return notHolder("renew", resource, owner, cur, "the answer was lost, and the lease is no longer this owner's with token %d (%s)", token, cur)
	}
	if !applied {
		if ours(cur, owner, token) {
			return unknownf("renew", resource, errPassed, "other writes of this grant passed this renewal %d times; the lease is still this grant's (%s)", renewAttempts, cur)
		}
		return notHolder("renew", resource, owner, cur, "not this owner's lease with token %d (%s)", token, cur)
	}
	return nil
}

// Keep implements driver.Keeper: one lightweight transaction, Renew's,
// that writes owner string keeper (with the TTL of the hold, whole seconds
// as Renew rounds them) only if the row still has this owner and fencing
// token. A lost answer is resolved by a serial read, as Renew's is: the
// keeper with this write's id shows it applied. In ModeJaeger, Jaeger's
// conditional update of the owner, in one conditional batch with a write of
// the row's marker with the hold's TTL (so the row ends with the hold, not
// with the lease's TTL); the keeper's string, which no other write uses,
// shows it applied. The hold ends between ⌈TTL⌉ and ⌈TTL⌉ + 1 s after the
// write was applied (StoreTTL): Cassandra's resolution.
func (s *Store) Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error {
	if err := driver.ValidateKeep(resource, owner, keeper, ttl); err != nil {
		return err
	}
	secs, err := StoreTTL(ttl)
	if err != nil {
		return err
	}
	var (
		applied bool
		cur     row
		wid     int64
	)
	if s.cfg.Mode == ModeJaeger {
		if token != 0 {
			return notHolder("keep", resource, owner, row{}, "Jaeger mode keeps no fencing tokens, so no lease has token %d", token)
		}
		// Jaeger's INSERT gave the row's liveness (its row marker) the
		// lease's TTL; the UPDATE that hands the owner cell over does not
		// change it, and a row that lives on without an owner refuses
		// every INSERT ... IF NOT EXISTS. So the hold rewrites the marker
		// with its own TTL, in the same conditional batch: the row ends
		// when the hold does, sooner than the lease would have.
		applied, cur, err = s.casBatch(ctx,
			batchStmt{s.st.jUpdate, []any{secs, keeper, resource, owner}},
			batchStmt{s.st.jMarker, []any{resource, secs}})
	} else {
		if token == 0 || token > math.MaxInt64 {
			return notHolder("keep", resource, owner, row{}, "no lease has token %d", token)
		}
		applied, cur, wid, err = s.casRenew(ctx, secs, keeper, driver.Milliseconds(ttl), resource, owner, token)
	}
	if err != nil {
		cur, rerr := s.resolve(ctx, "keep", resource, err)
		switch {
		case rerr != nil:
			return rerr
		case cur.owner == keeper && cur.token == token && (s.cfg.Mode == ModeJaeger || cur.writeID == wid):
			return nil
		case cur.owner == owner && cur.token == token:
			return unknownf("keep", resource, err, "the answer was lost and the hand-over is not applied yet; it may still be")
		}
		return notHolder("keep", resource, owner, cur, "the answer was lost, and the lease is no longer this owner's with token %d (%s)", token, cur)
	}
	if !applied {
		if s.cfg.Mode != ModeJaeger && ours(cur, owner, token) {
			return unknownf("keep", resource, errPassed, "other writes of this grant passed this hand-over %d times; the lease is still this grant's (%s)", renewAttempts, cur)
		}
		return notHolder("keep", resource, owner, cur, "not this owner's lease with token %d (%s)", token, cur)
	}
	return nil
}

// Release implements driver.Store: one lightweight transaction that frees
// the resource only if the row has this owner and fencing token, and keeps
// the token. Errors: ErrInvalidResource or ErrInvalidOwner before any I/O;
// an error wrapping driver.ErrLeaseLost when the lease is not this owner's
// with this token (including a lease already gone), and then also a
// *driver.HeldError naming the current holder when the row has one
// (driver.NotHolder); one wrapping driver.ErrUnknownOutcome when the
// answer was lost and a serial read could not show the outcome; other
// driver errors wrapped.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	if s.cfg.Mode == ModeJaeger {
		return s.releaseJaeger(ctx, resource, owner, token)
	}
	if token == 0 || token > math.MaxInt64 {
		return notHolder("release", resource, owner, row{}, "no lease has token %d", token)
	}
	wid := newWriteID()
	applied, cur, err := s.casQuery(ctx, s.st.release, wid, resource, owner, int64(token))
	if err != nil {
		cur, rerr := s.resolve(ctx, "release", resource, err)
		switch {
		case rerr != nil:
			return rerr
		case !cur.hasOwner && cur.token == token && cur.writeID == wid:
			return nil // this release was applied
		case cur.owner == owner && cur.token == token:
			return unknownf("release", resource, err, "the answer was lost and the release is not applied yet; it may still be")
		}
		return notHolder("release", resource, owner, cur, "the answer was lost, and the lease is no longer this owner's with token %d (%s)", token, cur)
	}
	if !applied {
		return notHolder("release", resource, owner, cur, "not this owner's lease with token %d (%s)", token, cur)
	}
	s.cache.saw(resource, row{}) // no lease: no write to renew over
	return nil
}

// Get implements driver.Store with a linearizable (serial) read, so it sees
// every grant, renewal and release that was confirmed before it, and
// completes any in flight. Remaining is a lower bound: Cassandra's TTL() is
// whole seconds (see StoreTTL), so the lease lives up to one second longer;
// it is at least 1 ms for a live lease. Errors: ErrInvalidResource before
// any I/O; an error wrapping driver.ErrNotHeld when no live lease exists;
// driver errors wrapped.
func (s *Store) Get(ctx context.Context, resource string) (driver.Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return driver.Record{}, err
	}
	cur, err := s.read(ctx, resource)
	if err != nil {
		return driver.Record{}, fmt.Errorf("cassandra store: get %q: %w", resource, err)
	}
	if cur.token != 0 {
		s.cache.set(resource, cur.token)
	}
	if cur.owner == "" {
		return driver.Record{}, fmt.Errorf("cassandra store: %q: %w", resource, driver.ErrNotHeld)
	}
	return cur.record(resource), nil
}

// List implements driver.Store. It scans the whole table at the commit
// consistency (QUORUM or LOCAL_QUORUM), page by page, and keeps the live
// leases whose resource starts with prefix, sorted by resource: Cassandra
// cannot select a range of partition keys by prefix. It is meant for
// operators and tools, not for hot paths; each page is bounded by the
// configured Timeout and the whole scan by ctx. A scan reads the tombstones
// that released (Jaeger mode) and expired leases leave until
// gc_grace_seconds; past tombstone_failure_threshold (100,000 by default)
// Cassandra fails it with READ_TOO_MANY_TOMBSTONES. Errors: an invalid prefix
// (ErrInvalidResource) before any I/O; driver errors wrapped.
func (s *Store) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	iter := s.session.Query(s.st.list).
		Consistency(s.cfg.CommitConsistency).
		Idempotent(true).
		PageSize(1000).
		IterContext(ctx)
	var out []driver.Record
	for {
		m := newRowMap()
		if !iter.MapScan(m) {
			break
		}
		name := colString(m["resource"])
		if s.cfg.Mode == ModeJaeger {
			name = colString(m["name"])
		}
		cur := rowFrom(m)
		if cur.owner == "" || !strings.HasPrefix(name, prefix) {
			continue
		}
		out = append(out, cur.record(name))
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("cassandra store: list %q: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out, nil
}
