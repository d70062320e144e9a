package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/backoff"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// notHolder is the error of a renewal or release whose grant no longer
// holds the key. kv is the key as the same request read it (nil: absent);
// it names the holder when it is another grant.
func notHolder(op, resource, owner string, token uint64, kv *mvccpb.KeyValue) error {
	var holder *driver.Record
	if kv != nil && (string(kv.Value) != owner || uint64(kv.CreateRevision) != token) {
		holder = &driver.Record{Resource: resource, Owner: string(kv.Value), Token: uint64(kv.CreateRevision)}
	}
	return fmt.Errorf("etcd store: %s %q: %w", op, resource, driver.NotHolder(holder))
}

// firstKV returns the first key of a range response, or nil.
func firstKV(resp *clientv3.TxnResponse, i int) *mvccpb.KeyValue {
	if resp == nil || i >= len(resp.Responses) {
		return nil
	}
	if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
		return kvs[0]
	}
	return nil
}

// visibleTTL is the TTL a shared etcd lease of granted seconds serves.
func visibleTTL(granted int64) time.Duration { return servedBy(granted) }

// Acquire implements driver.Store with one Txn: if the key does not exist
// (create_revision = 0), put it with this owner on the Store's shared etcd
// lease for the TTL (rounded up to whole seconds; below one second:
// ErrInvalidTTL, before any I/O), else read it. The first acquire of a TTL
// grants that etcd lease, and a keep-alive of it runs beside the Txn when
// its last one is more than a second old. It returns a *driver.HeldError
// naming the holder, with the time left on its etcd lease (whole seconds,
// one more TTL lookup), when another owner holds the resource. When the
// same owner string holds it (a retry of the same grant), that lease is
// renewed for ttl, with the same token.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	s.bgMu.Lock()
	closed := s.closed
	s.bgMu.Unlock()
	if closed {
		return driver.Record{}, fmt.Errorf("etcd store: acquire %q: %w", resource, errClosed)
	}
	secs := wholeSeconds(ttl)
	key := s.key(resource)
	for attempt := 0; ; attempt++ {
		begin := s.clock.Now()
		ss, err := s.session(ctx, secs)
		if err != nil {
			// An etcd lease without a key changes nothing: definite.
			return driver.Record{}, fmt.Errorf("etcd store: acquire %q: %w", resource, err)
		}
		f := ss.start(begin.Add(ttl))
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, owner, clientv3.WithLease(ss.id))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			if leaseGone(err) && attempt < 3 {
				// The shared etcd lease expired or was revoked: etcd refused
				// the put. Grant another and try again.
				ss.markGone()
				continue
			}
			err = writeErr("acquire", resource, err)
			if errors.Is(err, driver.ErrUnknownOutcome) {
				s.addGhost(key, owner, ss, time.Duration(secs)*time.Second)
			}
			return driver.Record{}, err
		}
		if resp.Succeeded {
			rev, life := resp.Header.Revision, time.Duration(secs)*time.Second
			g := &grant{key: key, resource: resource, owner: owner, token: rev, mod: rev, ss: ss, life: life}
			return s.granted(ctx, g, f, driver.Record{Resource: resource, Owner: owner, Token: uint64(rev), TTL: ttl, Remaining: life})
		}
		kv := firstKV(resp, 0)
		if kv == nil { // deleted between the compare and the read: cannot happen in one txn
			return driver.Record{}, fmt.Errorf("etcd store: acquire %q: key neither absent nor present", resource)
		}
		if string(kv.Value) != owner {
			return driver.Record{}, s.heldBy(ctx, resource, kv)
		}
		rec, again, err := s.acquireOwn(ctx, resource, owner, ttl, begin, kv, attempt)
		if !again {
			return rec, err
		}
	}
}

// granted ends an acquire whose put created the key of g: it registers g,
// waits for the keep-alive f that makes the etcd lease last the TTL, and
// confirms that the reaper has not taken the key meanwhile; then it
// returns rec, the grant. Any failure after the put is an unknown
// outcome: the put was applied.
func (s *Store) granted(ctx context.Context, g *grant, f *keepAlive, rec driver.Record) (driver.Record, error) {
	resource := rec.Resource
	if !s.addChecked(g) {
		return driver.Record{}, driver.UnknownOutcome(fmt.Errorf("etcd store: acquire %q: %w", resource, errGhostDeleting))
	}
	if err := wait(ctx, f); err != nil {
		if errors.Is(err, errSessionGone) {
			// Put on an etcd lease that expired and awaits revocation:
			// the key goes with it. Neither deleted here nor tried
			// again in this call: each call has one effect that
			// others can see (a reader saw this key between a delete
			// and a retry that then answered "held": not
			// linearizable, seed 3670411738911098). The caller's
			// retry with the same owner finds the key (or its
			// absence) and grants anew once it is gone.
			s.forget(g)
			return driver.Record{}, driver.UnknownOutcome(fmt.Errorf("etcd store: acquire %q: put on an etcd lease that has expired: %w", resource, err))
		}
		// The key is ours, but for how long is unknown: a retry of
		// this grant finds it and renews it.
		return driver.Record{}, driver.UnknownOutcome(fmt.Errorf("etcd store: acquire %q: %w", resource, err))
	}
	if !s.confirm(g) {
		// The put was applied (readers may have seen it) and the
		// reaper has deleted it, or is deleting it: not a definite
		// failure, an unknown outcome.
		return driver.Record{}, driver.UnknownOutcome(fmt.Errorf("etcd store: acquire %q: taken by the reaper while the keep-alive ran", resource))
	}
	return rec, nil
}

// acquireOwn renews the lease of kv, which this owner string holds (a
// retry of the same grant), for ttl, with the same token. If its etcd
// lease has expired (and awaits revocation), it returns again = true
// after 100 ms, before the 20th attempt, so that the acquire waits for the
// key to go and grants anew.
func (s *Store) acquireOwn(ctx context.Context, resource, owner string, ttl time.Duration, begin time.Time, kv *mvccpb.KeyValue, attempt int) (rec driver.Record, again bool, err error) {
	// Always a write (rewriteKV): an owner string may be shared (a
	// semaphore's marker, renewed by every holder with an acquire),
	// and only a write keeps a move of another Store, sent before
	// this renewal and delivered after it, from applying.
	err = s.rewriteKV(ctx, resource, owner, ttl, begin, kv)
	if err == nil {
		return driver.Record{Resource: resource, Owner: owner, Token: uint64(kv.CreateRevision), TTL: ttl,
			Remaining: time.Duration(wholeSeconds(ttl)) * time.Second}, false, nil
	}
	if !errors.Is(err, driver.ErrLeaseLost) || attempt >= 20 {
		return driver.Record{}, false, err
	}
	select {
	case <-time.After(100 * time.Millisecond):
		return driver.Record{}, true, nil
	case <-ctx.Done():
		return driver.Record{}, false, fmt.Errorf("etcd store: acquire %q: %w", resource, ctxErr(ctx))
	}
}

// heldBy returns the *driver.HeldError of an acquire that found kv held by
// another owner, with the time left on its etcd lease when etcd says.
func (s *Store) heldBy(ctx context.Context, resource string, kv *mvccpb.KeyValue) error {
	holder := driver.Record{Resource: resource, Owner: string(kv.Value), Token: uint64(kv.CreateRevision)}
	if tl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil && tl.TTL >= 0 {
		holder.TTL = visibleTTL(tl.GrantedTTL)
		holder.Remaining = min(time.Duration(tl.TTL)*time.Second, holder.TTL)
	}
	return &driver.HeldError{Holder: holder}
}

// wholeSeconds returns ttl in whole seconds, rounded up.
func wholeSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}

// Renew implements driver.Store: it keeps the live lease with this owner and
// token for at least ttl (rounded up to whole seconds) from now, or returns
// an error wrapping driver.ErrLeaseLost (naming the holder with a
// *driver.HeldError when another grant holds the key). It never revives an
// expired lease.
//
// A grant this Store made, renewed with its TTL, is one Txn that checks the
// key's mod_revision (no other write touched the key since ours), plus a
// keep-alive of the shared etcd lease when its last one is more than a
// second old (sent beside the Txn). Any other renewal (a grant of another
// Store, or another TTL) reads the key, proves its etcd lease alive with a
// keep-alive, and moves the key to this Store's shared etcd lease for the
// TTL in a Txn conditioned on owner, token and that etcd lease.
func (s *Store) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	begin := s.clock.Now()
	key := s.key(resource)
	if g := s.lookup(key, owner, token); g != nil && g.ss.secs == wholeSeconds(ttl) {
		return s.renewOwn(ctx, g, ttl, begin)
	}
	resp, err := s.cli.Get(readOnly(ctx), key)
	if err != nil {
		return fmt.Errorf("etcd store: renew %q: %w", resource, err)
	}
	var kv *mvccpb.KeyValue
	if len(resp.Kvs) > 0 {
		kv = resp.Kvs[0]
	}
	if kv == nil || string(kv.Value) != owner || uint64(kv.CreateRevision) != token {
		return notHolder("renew", resource, owner, token, kv)
	}
	return s.renewKV(ctx, resource, owner, ttl, begin, kv)
}

// renewOwn renews grant g of this Store with its TTL: one Txn, beside a
// keep-alive when the shared etcd lease needs one.
func (s *Store) renewOwn(ctx context.Context, g *grant, ttl time.Duration, begin time.Time) error {
	f := g.ss.start(begin.Add(ttl))
	if f == goneKeepAlive {
		s.forget(g)
		return notHolder("renew", g.resource, g.owner, uint64(g.token), nil)
	}
	resp, err := s.check(ctx, []*grant{g})
	if err != nil {
		// A read changes nothing: retrying is safe.
		return fmt.Errorf("etcd store: renew %q: %w", g.resource, err)
	}
	if !resp.Succeeded {
		s.forget(g)
		return notHolder("renew", g.resource, g.owner, uint64(g.token), firstKV(resp, 0))
	}
	return s.settle(ctx, g, f)
}

// readOnly returns ctx for a request that only reads: cancelled when ctx
// is (its deadline included, which the caller's context enforces by
// cancelling), but with no deadline of its own to show, so that gRPC sends
// none to the server. A deadline sent with a request makes the server arm
// a timer for it; for a read, whose late execution changes nothing, that
// costs time and protects nothing: on this project's 2-core host a renewal
// check took 1.24–1.27× a KeepAliveOnce's p50 with the deadline sent, and
// 1.18–1.19× without (tools/bench TestEtcdRenewCost). Writes keep theirs.
func readOnly(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); !ok {
		return ctx
	}
	return noDeadline{ctx}
}

// noDeadline is a context that hides its parent's deadline (see readOnly).
type noDeadline struct{ context.Context }

func (noDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }

// check reads whether the keys of gs are still as this Store last wrote
// them (their mod_revision), in one Txn whose else branch reads them all.
// The read is serializable (the member's own state, without a round of
// consensus), which is enough: while the shared etcd lease lives, no write
// but the Store's own changes these keys, so the read only detects what an
// operator did (a key deleted, an etcd lease revoked), at most the member's
// replication lag late. When it finds a key changed, a linearizable read
// confirms it, so that a member that has not yet applied the Store's own
// write (the client spreads requests over the cluster's members) never
// makes a lease look lost.
func (s *Store) check(ctx context.Context, gs []*grant) (*clientv3.TxnResponse, error) {
	cmps := make([]clientv3.Cmp, len(gs))
	for j, g := range gs {
		cmps[j] = clientv3.Compare(clientv3.ModRevision(g.key), "=", g.mod)
	}
	gets := make([]clientv3.Op, len(gs))
	for j, g := range gs {
		gets[j] = clientv3.OpGet(g.key, clientv3.WithSerializable())
	}
	rctx := readOnly(ctx)
	resp, err := s.cli.Txn(clientv3.WithRequireLeader(rctx)).If(cmps...).Else(gets...).Commit()
	if err != nil || resp.Succeeded {
		return resp, err
	}
	for j, g := range gs {
		gets[j] = clientv3.OpGet(g.key)
	}
	return s.cli.Txn(rctx).If(cmps...).Else(gets...).Commit()
}

// settle confirms a renewal of g whose key check passed, once keep-alive f
// (if any) has answered.
func (s *Store) settle(ctx context.Context, g *grant, f *keepAlive) error {
	if err := wait(ctx, f); err != nil {
		if errors.Is(err, errSessionGone) {
			s.forget(g)
			return notHolder("renew", g.resource, g.owner, uint64(g.token), nil)
		}
		return fmt.Errorf("etcd store: renew %q: %w", g.resource, err)
	}
	if !s.confirm(g) {
		return notHolder("renew", g.resource, g.owner, uint64(g.token), nil)
	}
	return nil
}

// rewriteKV renews the lease of kv as renewKV does, but always with a write
// that moves the key onto this Store's etcd lease for ttl (the same one
// when it is there already), so that its mod_revision changes: a move of
// the key that another Store sent before this renewal, conditioned on the
// mod_revision it read, can then no longer apply after it (moveKV).
func (s *Store) rewriteKV(ctx context.Context, resource, owner string, ttl time.Duration, begin time.Time, kv *mvccpb.KeyValue) error {
	return s.moveKVTries(ctx, "renew", resource, owner, owner, ttl, begin, kv, true)
}

// renewKV renews the lease that kv (read at or after begin) shows held by
// owner: a grant of this Store on its etcd lease for ttl is renewed as
// usual; a key on the Store's current etcd lease for ttl is adopted as it
// is; any other is moved to that etcd lease, after a keep-alive of its own
// etcd lease proved that lease alive (etcd refuses to keep an expired lease
// alive, so an expired lease is never revived).
func (s *Store) renewKV(ctx context.Context, resource, owner string, ttl time.Duration, begin time.Time, kv *mvccpb.KeyValue) error {
	return s.moveKV(ctx, "renew", resource, owner, owner, ttl, begin, kv)
}

// moveKV is renewKV, and Keep when to is another owner string than owner:
// the key is then always moved, and written with to, so that the grant's
// own requests no longer match it.
func (s *Store) moveKV(ctx context.Context, op, resource, owner, to string, ttl time.Duration, begin time.Time, kv *mvccpb.KeyValue) error {
	return s.moveKVTries(ctx, op, resource, owner, to, ttl, begin, kv, false)
}

// moveTries bounds the moves of one call that another write of the same
// owner string and token passes (moveKVTries); between two, the call waits
// as backoff.Passed says, so that Stores renewing one shared key at once
// (every holder of a semaphore renews its marker) spread out instead of
// passing each other again.
const moveTries = 10

// moveKVTries is moveKV; write makes it move the key even where a renewal
// needs no write (rewriteKV). The move is conditioned on the key's
// mod_revision as read, besides its owner, token and etcd lease: a move
// sent before another write of the key (a renewal by another holder of a
// shared owner string) and delivered after it changes nothing. A move
// that finds the key still this owner's and token's under another write
// reads it again and tries again, up to moveTries times, then answers
// unknown.
func (s *Store) moveKVTries(ctx context.Context, op, resource, owner, to string, ttl time.Duration, begin time.Time, kv *mvccpb.KeyValue, write bool) error {
	for try := 1; ; try++ {
		moved, err := s.moveOnce(ctx, op, resource, owner, to, ttl, begin, kv, write)
		if moved == nil {
			return err
		}
		if try == moveTries {
			return driver.UnknownOutcome(fmt.Errorf("etcd store: %s %q: other writes of this owner's lease passed this one %d times", op, resource, moveTries))
		}
		if err := backoff.Passed.Wait(ctx, try-1); err != nil {
			return fmt.Errorf("etcd store: %s %q: %w", op, resource, err)
		}
		kv = moved
	}
}

// moveOnce makes one try of moveKVTries. It returns the key as it found it
// when the key was still (owner, token) but under another write than kv's,
// with a nil error; otherwise the call's result.
func (s *Store) moveOnce(ctx context.Context, op, resource, owner, to string, ttl time.Duration, begin time.Time, kv *mvccpb.KeyValue, write bool) (*mvccpb.KeyValue, error) {
	key := s.key(resource)
	token := uint64(kv.CreateRevision)
	secs := wholeSeconds(ttl)
	old := clientv3.LeaseID(kv.Lease)
	s.mu.Lock()
	g := s.grants[key]
	if g != nil && (g.owner != owner || uint64(g.token) != token) {
		g = nil
	}
	reaped := g != nil && g.reaped
	s.mu.Unlock()
	if reaped || old == clientv3.NoLease {
		// Expired by the reaper (its key goes now), or put without a lease
		// by another tool: not a lease tenure keeps.
		return nil, notHolder(op, resource, owner, token, nil)
	}
	if !write && to == owner && g != nil && g.mod == kv.ModRevision && g.ss.id == old && g.ss.secs == secs {
		return nil, s.renewOwn(ctx, g, ttl, begin)
	}
	ss, err := s.session(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("etcd store: %s %q: %w", op, resource, err)
	}
	if !write && to == owner && ss.id == old {
		// On the Store's etcd lease for this TTL already (an acquire whose
		// answer was lost): adopt it.
		f := ss.start(begin.Add(ttl))
		ng := &grant{key: key, resource: resource, owner: owner, token: int64(token), mod: kv.ModRevision, ss: ss,
			life: time.Duration(secs) * time.Second}
		if !s.addChecked(ng) {
			return nil, driver.UnknownOutcome(fmt.Errorf("etcd store: %s %q: %w", op, resource, errGhostDeleting))
		}
		return nil, s.settle(ctx, ng, f)
	}
	// Prove the etcd lease alive now, so that moving the key cannot revive
	// an expired one.
	if old != ss.id && (g == nil || g.ss.id != old || !g.ss.aliveAt(s.clock.Now())) {
		if _, err := s.cli.KeepAliveOnce(ctx, old); err != nil {
			if leaseGone(err) {
				if g != nil {
					s.forget(g)
				}
				return nil, notHolder(op, resource, owner, token, nil)
			}
			return nil, fmt.Errorf("etcd store: %s %q: keep-alive: %w", op, resource, err)
		}
	}
	f := ss.start(begin.Add(ttl))
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), "=", owner),
			clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token)),
			clientv3.Compare(clientv3.LeaseValue(key), "=", old),
			clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
		Then(clientv3.OpPut(key, to, clientv3.WithLease(ss.id))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		if leaseGone(err) {
			ss.markGone()
		}
		err = writeErr(op, resource, err)
		if errors.Is(err, driver.ErrUnknownOutcome) {
			s.addGhost(key, to, ss, time.Duration(secs)*time.Second)
		}
		return nil, err
	}
	if !resp.Succeeded {
		if cur := firstKV(resp, 0); cur != nil && string(cur.Value) == owner && uint64(cur.CreateRevision) == token {
			return cur, nil // still this lease, under another write: read as it is now
		}
		if g != nil {
			s.forget(g)
		}
		return nil, notHolder(op, resource, owner, token, firstKV(resp, 0))
	}
	ng := &grant{key: key, resource: resource, owner: to, token: int64(token), mod: resp.Header.Revision, ss: ss,
		life: time.Duration(secs) * time.Second}
	if !s.addChecked(ng) {
		// An earlier move of this key whose answer was lost left a ghost
		// whose delete is in flight: it may take the key just moved.
		return nil, driver.UnknownOutcome(fmt.Errorf("etcd store: %s %q: %w", op, resource, errGhostDeleting))
	}
	return nil, s.settle(ctx, ng, f)
}

// Keep implements driver.Keeper: it reads the key and, when it is this
// grant's, grants an etcd lease of its own for ttl (rounded up to whole
// seconds, no margin) and moves the key onto it with owner string keeper
// (its create revision, the token, stays), after a keep-alive proved the
// key's etcd lease alive, conditioned on the key's owner, token, etcd lease
// and mod_revision as read. Nothing renews that etcd lease: etcd deletes the
// key when it expires, ceil(ttl) after it was granted (etcd checks for
// expired leases every 500 ms, raises a TTL below its minimum, 2 s with the
// default election timeout, to it, and a leader change extends every etcd
// lease by its TTL), whether or not this Store lives on. A shared etcd
// lease, granted with a margin and kept alive by other grants, would hold
// the key up to the margin, or the reaper's interval, longer than asked.
// The etcd lease of a move that was not applied is revoked.
func (s *Store) Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error {
	if err := ttls.ValidateKeep(resource, owner, keeper, ttl); err != nil {
		return err
	}
	key := s.key(resource)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("etcd store: keep %q: %w", resource, err)
	}
	var kv *mvccpb.KeyValue
	if len(resp.Kvs) > 0 {
		kv = resp.Kvs[0]
	}
	if kv == nil || string(kv.Value) != owner || uint64(kv.CreateRevision) != token {
		return notHolder("keep", resource, owner, token, kv)
	}
	lease, err := s.cli.Grant(ctx, wholeSeconds(ttl))
	if err != nil {
		return fmt.Errorf("etcd store: keep %q: grant an etcd lease for the hold: %w", resource, err)
	}
	for try := 1; ; try++ {
		moved, err := s.keepOnce(ctx, resource, owner, keeper, kv, lease.ID)
		if moved == nil {
			if err != nil && !errors.Is(err, driver.ErrUnknownOutcome) {
				s.revoke(lease.ID)
			}
			return err
		}
		if try == moveTries {
			return driver.UnknownOutcome(fmt.Errorf("etcd store: keep %q: other writes of this owner's lease passed this one %d times", resource, moveTries))
		}
		if err := backoff.Passed.Wait(ctx, try-1); err != nil {
			return fmt.Errorf("etcd store: keep %q: %w", resource, err)
		}
		kv = moved
	}
}

// keepOnce makes one try of Keep's move of kv onto etcd lease hold. It
// returns the key as it found it when the key was still (owner, token) but
// under another write than kv's, with a nil error; otherwise the result.
func (s *Store) keepOnce(ctx context.Context, resource, owner, keeper string, kv *mvccpb.KeyValue, hold clientv3.LeaseID) (*mvccpb.KeyValue, error) {
	key := s.key(resource)
	token := uint64(kv.CreateRevision)
	old := clientv3.LeaseID(kv.Lease)
	s.mu.Lock()
	g := s.grants[key]
	if g != nil && (g.owner != owner || uint64(g.token) != token) {
		g = nil
	}
	reaped := g != nil && g.reaped
	s.mu.Unlock()
	if reaped || old == clientv3.NoLease {
		return nil, notHolder("keep", resource, owner, token, nil)
	}
	// Prove the key's etcd lease alive now, so that moving the key cannot
	// revive an expired one.
	if g == nil || g.ss.id != old || !g.ss.aliveAt(s.clock.Now()) {
		if _, err := s.cli.KeepAliveOnce(ctx, old); err != nil {
			if leaseGone(err) {
				if g != nil {
					s.forget(g)
				}
				return nil, notHolder("keep", resource, owner, token, nil)
			}
			return nil, fmt.Errorf("etcd store: keep %q: keep-alive: %w", resource, err)
		}
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), "=", owner),
			clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token)),
			clientv3.Compare(clientv3.LeaseValue(key), "=", old),
			clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
		Then(clientv3.OpPut(key, keeper, clientv3.WithLease(hold))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		// An unknown outcome needs no clean-up: the hold's etcd lease ends
		// the key in time anyway.
		return nil, writeErr("keep", resource, err)
	}
	if !resp.Succeeded {
		if cur := firstKV(resp, 0); cur != nil && string(cur.Value) == owner && uint64(cur.CreateRevision) == token {
			return cur, nil // still this lease, under another write: read as it is now
		}
		if g != nil {
			s.forget(g)
		}
		return nil, notHolder("keep", resource, owner, token, firstKV(resp, 0))
	}
	if g != nil {
		s.forget(g) // the key is the hold's now: nothing of this Store renews or reaps it
	}
	return nil, nil
}

// revoke revokes an etcd lease that carries nothing, in the background
// (best effort: it expires by its TTL anyway).
func (s *Store) revoke(id clientv3.LeaseID) {
	s.goBackground(func() {
		ctx, cancel := context.WithTimeout(s.bgCtx, 5*time.Second)
		defer cancel()
		_, _ = s.cli.Revoke(ctx, id)
	})
}

// Release implements driver.Store: one Txn deletes the key if it holds this
// owner and token, and otherwise reads it, so that the error (wrapping
// driver.ErrLeaseLost, changing nothing) names the current holder with a
// *driver.HeldError when there is one. The shared etcd lease stays for the
// Store's other grants.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	key := s.key(resource)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), "=", owner),
			clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token))).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return writeErr("release", resource, err)
	}
	s.forgetKey(key, owner, token)
	if !resp.Succeeded {
		return notHolder("release", resource, owner, token, firstKV(resp, 0))
	}
	return nil
}

// leaseTime is what etcd said of an etcd lease: whole seconds left
// (rounded down; -1: gone) and granted.
type leaseTime struct{ left, granted int64 }

// record builds the Record of a key, with the time left on its etcd lease
// (looked up once per etcd lease in cache, which may be nil). ok is false
// when the etcd lease has already expired (the key awaits deletion). TTL is
// the TTL the shared etcd lease serves (its own TTL less its one-second
// margin), Remaining the etcd lease's time left, at most TTL.
func (s *Store) record(ctx context.Context, cache map[int64]leaseTime, resource string, kv *mvccpb.KeyValue) (driver.Record, bool, error) {
	rec := driver.Record{Resource: resource, Owner: string(kv.Value), Token: uint64(kv.CreateRevision)}
	lt, ok := cache[kv.Lease]
	if !ok {
		tl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return rec, false, err
		}
		lt = leaseTime{left: tl.TTL, granted: tl.GrantedTTL}
		if cache != nil {
			cache[kv.Lease] = lt
		}
	}
	if lt.left < 0 {
		return rec, false, nil
	}
	rec.TTL = visibleTTL(lt.granted)
	rec.Remaining = min(time.Duration(lt.left)*time.Second, rec.TTL)
	return rec, true, nil
}

// Get implements driver.Store. Remaining is whole seconds, rounded down, as
// etcd reports it (zero: less than a second, or unknown).
func (s *Store) Get(ctx context.Context, resource string) (driver.Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return driver.Record{}, err
	}
	resp, err := s.cli.Get(readOnly(ctx), s.key(resource))
	if err != nil {
		return driver.Record{}, fmt.Errorf("etcd store: get %q: %w", resource, err)
	}
	if len(resp.Kvs) == 0 {
		return driver.Record{}, fmt.Errorf("etcd store: %q: %w", resource, driver.ErrNotHeld)
	}
	rec, ok, err := s.record(ctx, nil, resource, resp.Kvs[0])
	if err != nil {
		return driver.Record{}, fmt.Errorf("etcd store: get %q: %w", resource, err)
	}
	if !ok {
		return driver.Record{}, fmt.Errorf("etcd store: %q: %w", resource, driver.ErrNotHeld)
	}
	return rec, nil
}

// List implements driver.Store: the live leases whose resource starts with
// prefix, in byte order, from one linearizable read (plus one lease lookup
// per shared etcd lease for the time left).
func (s *Store) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	resp, err := s.cli.Get(ctx, s.key(prefix), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("etcd store: list %q: %w", prefix, err)
	}
	out := make([]driver.Record, 0, len(resp.Kvs))
	cache := map[int64]leaseTime{}
	for _, kv := range resp.Kvs {
		rec, ok, err := s.record(ctx, cache, strings.TrimPrefix(string(kv.Key), s.prefix), kv)
		if err != nil {
			return nil, fmt.Errorf("etcd store: list %q: %w", prefix, err)
		}
		if ok {
			out = append(out, rec)
		}
	}
	return out, nil
}
