package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenure-go/tenure/driver"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// Shared etcd leases.
//
// A Store keeps, for each TTL in whole seconds, one etcd lease (a session)
// that carries the keys of all the grants it makes with that TTL, as one
// concurrency.Session carries the keys of its mutexes. The etcd lease is
// granted with a margin more than the TTL it serves (margin: a tenth of the
// TTL, at least one second), and
// the Store knows a lower bound of its expiry: the send time of its last
// confirmed keep-alive (or grant) plus its TTL. An acquire or renewal sent
// at begin with TTL ttl needs the etcd lease to live until begin + ttl; when
// the last keep-alive already covers that, the operation is one KV request
// (a Txn); otherwise a keep-alive runs beside it, and the operation is
// confirmed only when both are. Any operation that finds the last
// keep-alive older than a quarter of the margin starts one in the
// background (several may be in flight), so under steady use no operation
// waits for a keep-alive unless keep-alives take longer than three quarters
// of the margin, and an etcd lease costs at most about four keep-alives per
// margin, whatever the number of keys on it.
//
// Per-grant expiry is the Store's: an etcd lease kept alive for the others
// would otherwise keep a key whose own holder stopped renewing it. The
// reaper deletes (conditioned on the grant) the key of every grant not
// confirmed for its TTL, and refuses any later renewal of it. A grant's
// renewals are confirmed at most until the reaper takes it, so no holder
// trusts a key the reaper deletes: the holder's deadline is before the
// confirmation of its last renewal plus its TTL, and the reaper deletes
// after it.

const (
	// reapEvery is how often, at least, the reaper looks for grants that
	// have not been confirmed for their TTL (etcd checks its own leases
	// every 500 ms); with longer TTLs it looks every tenth of the shortest,
	// at most every 5 s.
	reapEvery = 500 * time.Millisecond
	// rotateAfter is how long new grants go to one shared etcd lease; later
	// ones go to a new one, so that an etcd lease ends (and takes any key a
	// late request may have put on it) once the grants made on it end.
	rotateAfter = time.Minute
)

// margin is what a shared etcd lease for TTLs of secs whole seconds lives
// beyond them: a tenth, rounded up, and at least one second. A keep-alive
// sent within the margin before an operation covers it.
func margin(secs int64) time.Duration {
	return time.Duration(max(1, (secs+9)/10)) * time.Second
}

// servedBy returns the TTL that a shared etcd lease granted for granted
// seconds serves (the inverse of secs + margin(secs)).
func servedBy(granted int64) time.Duration {
	for secs := granted - 1; secs >= 1; secs-- {
		if secs+int64(margin(secs)/time.Second) <= granted {
			return time.Duration(secs) * time.Second
		}
	}
	return time.Duration(granted) * time.Second
}

// errSessionGone means that an etcd lease shared by grants is gone (expired
// or revoked): every grant on it is lost.
var errSessionGone = errors.New("the shared etcd lease is gone")

// session is one shared etcd lease.
type session struct {
	s    *Store
	id   clientv3.LeaseID
	secs int64 // the TTL it serves, whole seconds

	born time.Time // when it was granted: new grants use it for rotateAfter

	mu     sync.Mutex
	ttl    time.Duration // the etcd lease's TTL, as etcd granted it
	sent   time.Time     // send time of the last confirmed keep-alive or grant (s.clock)
	flight *keepAlive    // the newest keep-alive in flight
	gone   bool          // a keep-alive or a Txn found the etcd lease gone
	grants int           // grants of s on it

	auditing bool      // a listing of its keys runs
	audited  time.Time // when the last listing was sent
}

// auditing is set while a listing of the etcd lease's keys runs.

// audit starts, unless one ran less than auditEvery(secs) ago or one is
// running, a listing of the keys attached to the etcd lease (TimeToLive with
// keys: etcd's lessor answers it from memory, without reading its key-value
// store) in the background. When it answers, every grant of the Store on
// this etcd lease, recorded before the listing was sent, whose key it does
// not show is marked suspect: its next renewal reads the key. If etcd says
// the etcd lease does not exist, the session is gone.
func (ss *session) audit() {
	ss.mu.Lock()
	now := ss.s.clock.Now()
	if ss.auditing || now.Sub(ss.audited) < auditEvery(ss.secs) {
		ss.mu.Unlock()
		return
	}
	ss.auditing, ss.audited = true, now
	ss.mu.Unlock()
	if !ss.s.goBackground(func() { ss.list(now) }) {
		ss.mu.Lock()
		ss.auditing = false
		ss.mu.Unlock()
	}
}

// auditEvery is the least time between two listings of the keys of a
// shared etcd lease for TTLs of secs seconds: a tenth of the TTL, from 1 s
// to 5 s.
func auditEvery(secs int64) time.Duration {
	return min(max(time.Duration(secs)*time.Second/10, time.Second), 5*time.Second)
}

// list runs one listing sent at sent (see audit).
func (ss *session) list(sent time.Time) {
	defer func() {
		ss.mu.Lock()
		ss.auditing = false
		ss.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ss.s.bgCtx, max(ss.ttlNow(), time.Second))
	defer cancel()
	resp, err := ss.s.cli.TimeToLive(ctx, ss.id, clientv3.WithAttachedKeys())
	switch {
	case err != nil && leaseGone(err), err == nil && resp.TTL < 0:
		ss.markGone()
		return
	case err != nil || resp.TTL == 0:
		// Unknown, or less than a second left (or expired and awaiting
		// revocation): the keep-alives tell.
		return
	}
	listed := make(map[string]struct{}, len(resp.Keys))
	for _, k := range resp.Keys {
		listed[string(k)] = struct{}{}
	}
	s := ss.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, g := range s.grants {
		if g.ss != ss || !g.added.Before(sent) {
			continue
		}
		if _, ok := listed[key]; !ok {
			g.suspect = true
		}
	}
}

func (ss *session) ttlNow() time.Duration {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.ttl
}

// keepAlive is one keep-alive request of a session.
type keepAlive struct {
	sent time.Time
	done chan struct{}
	err  error
}

// fresh reports whether the etcd lease is known to live until need.
func (ss *session) freshLocked(need time.Time) bool {
	return !ss.sent.Add(ss.ttl).Before(need)
}

// start returns nil when the etcd lease is known to live until need, and
// otherwise the keep-alive to wait for (one in flight that was sent late
// enough, or a new one). It also starts a keep-alive in the background when
// the last one is older than refreshAfter. A session that is gone returns a
// finished keep-alive with errSessionGone.
func (ss *session) start(need time.Time) *keepAlive {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.gone {
		return goneKeepAlive
	}
	now := ss.s.clock.Now()
	if ss.freshLocked(need) {
		refresh := margin(ss.secs) / 4
		if now.Sub(ss.sent) > refresh && (ss.flight == nil || now.Sub(ss.flight.sent) > refresh) {
			ss.startLocked(now)
		}
		return nil
	}
	if f := ss.flight; f != nil && !f.sent.Add(ss.ttl).Before(need) {
		return f
	}
	return ss.startLocked(now)
}

var goneKeepAlive = func() *keepAlive {
	f := &keepAlive{done: make(chan struct{}), err: errSessionGone}
	close(f.done)
	return f
}()

func (ss *session) startLocked(now time.Time) *keepAlive {
	f := &keepAlive{sent: now, done: make(chan struct{})}
	ss.flight = f
	// Shared by every operation that waits for it, so bounded by the etcd
	// lease's TTL rather than by any caller.
	timeout := max(ss.ttl, time.Second)
	started := ss.s.goBackground(func() {
		ctx, cancel := context.WithTimeout(ss.s.bgCtx, timeout)
		resp, err := ss.s.cli.KeepAliveOnce(ctx, ss.id)
		if err == nil {
			err = ss.s.sameTerm(ctx, resp.ResponseHeader)
		}
		cancel()
		ss.mu.Lock()
		switch {
		case err == nil:
			if f.sent.After(ss.sent) {
				ss.sent = f.sent
				ss.ttl = time.Duration(resp.TTL) * time.Second
			}
		case leaseGone(err):
			ss.gone = true
			err = errSessionGone
		}
		f.err = err
		if ss.flight == f {
			ss.flight = nil
		}
		ss.mu.Unlock()
		close(f.done)
	})
	if !started {
		ss.flight = nil
		f.err = errClosed
		close(f.done)
	}
	return f
}

// errClosed is what a closed Store answers: it matches
// driver.ErrStoreUnusable, so that a Locker waiting on it stops.
var errClosed = fmt.Errorf("the store is closed (%w)", driver.ErrStoreUnusable)

// errDeposedLeader means that a keep-alive was answered in a raft term that
// had ended by the time a linearizable read that followed it was served:
// a leader that was paused or cut off may have renewed the etcd lease in
// its own memory only, while the cluster's leader let it expire.
var errDeposedLeader = errors.New("keep-alive answered in a raft term that has ended (a deposed leader may have answered it)")

// sameTerm confirms a keep-alive answered with header hdr: a linearizable
// read sent after the answer (one Range of a single key, count only) must
// be served in the same raft term. etcd renews leases in the leader's
// memory, outside raft, and a leader that was stopped (SIGSTOP, a frozen
// VM) answers keep-alives when it runs again until it learns of the newer
// term, even on etcd 3.6: its leadership check trusts a member whose raft
// loop ticked recently, which a resumed process does at once (etcd
// server/etcdserver/server.go, ensureLeadership and isActive). Terms only
// grow and each has at most one leader, so an answer whose term is still
// current after it came from the leader of that term or a follower that
// forwarded to it. The read goes through raft's ReadIndex, which a deposed
// leader cannot serve. Cost: one read per keep-alive (keep-alives are per
// shared etcd lease, a few per margin, and mostly off the operations'
// path).
func (s *Store) sameTerm(ctx context.Context, hdr *etcdserverpb.ResponseHeader) error {
	if hdr == nil {
		return errors.New("keep-alive answer without a header")
	}
	r, err := s.cli.Get(ctx, s.prefix, clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("keep-alive: confirming the raft term: %w", err)
	}
	if r.Header == nil || r.Header.RaftTerm != hdr.RaftTerm {
		return errDeposedLeader
	}
	return nil
}

// goBackground runs f in a goroutine that Close waits for, unless the Store
// is closed (then it returns false).
func (s *Store) goBackground(f func()) bool {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.closed {
		return false
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		f()
	}()
	return true
}

// wait waits for keep-alive f (nil: nothing to wait for) or ctx, and
// returns its error.
func wait(ctx context.Context, f *keepAlive) error {
	if f == nil {
		return nil
	}
	select {
	case <-f.done:
		if f.err != nil {
			return fmt.Errorf("keep-alive: %w", f.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("keep-alive: %w", ctxErr(ctx))
	}
}

// markGone records that the etcd lease is gone.
func (ss *session) markGone() {
	ss.mu.Lock()
	ss.gone = true
	ss.mu.Unlock()
}

func (ss *session) isGone() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.gone
}

// aliveAt reports whether the etcd lease is known to live at t.
func (ss *session) aliveAt(t time.Time) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return !ss.gone && ss.sent.Add(ss.ttl).After(t)
}

// leaseGone reports an etcd error that says the lease does not exist.
func leaseGone(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || code(err) == codes.NotFound
}

// pendingGrant is a Grant in flight for a TTL.
type pendingGrant struct {
	done chan struct{}
	ss   *session
	err  error
}

// session returns the session for TTLs of secs whole seconds, granting a
// new etcd lease when there is none or the last one is gone or may have
// expired. Concurrent callers share one Grant.
func (s *Store) session(ctx context.Context, secs int64) (*session, error) {
	for {
		s.mu.Lock()
		now := s.clock.Now()
		if ss := s.sessions[secs]; ss != nil && now.Sub(ss.born) < rotateAfter && ss.aliveAt(now) {
			s.mu.Unlock()
			return ss, nil
		}
		p := s.granting[secs]
		if p == nil {
			p = &pendingGrant{done: make(chan struct{})}
			s.granting[secs] = p
			s.mu.Unlock()
			p.ss, p.err = s.grantSession(ctx, secs)
			s.mu.Lock()
			delete(s.granting, secs)
			if p.err == nil {
				s.sessions[secs] = p.ss
			}
			s.mu.Unlock()
			close(p.done)
			return p.ss, p.err
		}
		s.mu.Unlock()
		select {
		case <-p.done:
			if p.err != nil {
				// The caller of that Grant may have been cancelled: try
				// with this caller's context.
				if ctx.Err() != nil {
					return nil, p.err
				}
				continue
			}
			return p.ss, nil
		case <-ctx.Done():
			return nil, ctxErr(ctx)
		}
	}
}

// ctxErr is the error of an operation cut short because ctx ended: it wraps
// ctx.Err() (context.Canceled or context.DeadlineExceeded) and names the
// cause, without wrapping it. A Locker cancels the contexts of its store
// calls with causes that wrap ErrLeaseLost (a release, a loss); an error
// that wrapped them would read as the store's answer that the lease is lost
// (the harness recorded such a renewal as "lost" and the release that
// followed as "released": not linearizable, seed 3670411738911098 on etcd
// 3.6.16).
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%w (%v)", err, cause)
	}
	return err
}

func (s *Store) grantSession(ctx context.Context, secs int64) (*session, error) {
	sent := s.clock.Now()
	g, err := s.cli.Grant(ctx, secs+int64(margin(secs)/time.Second))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	return &session{s: s, id: g.ID, secs: secs, ttl: time.Duration(g.TTL) * time.Second, sent: sent, born: sent}, nil
}

// grant is a grant that this Store made (or adopted by renewing it), while
// the Store may keep it alive. Its fields after key are guarded by Store.mu.
type grant struct {
	key      string
	resource string
	owner    string
	token    int64 // the key's create_revision
	mod      int64 // the key's mod_revision after our last write
	ss       *session
	life     time.Duration // the TTL in whole seconds: the reaper's limit
	// confirmed is when the last acquire or renewal of it was confirmed
	// (s.clock); the reaper takes it life after that.
	confirmed time.Time
	// reaped: the reaper took it; no renewal is confirmed any more.
	reaped bool
	// added is when the Store recorded it (s.clock); suspect: a listing of
	// its etcd lease's keys sent after that did not show its key, so its
	// next renewal reads the key.
	added   time.Time
	suspect bool
}

// lookup returns this Store's grant of key with owner and token, or nil.
func (s *Store) lookup(key, owner string, token uint64) *grant {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.grants[key]; g != nil && g.owner == owner && uint64(g.token) == token {
		return g
	}
	return nil
}

// add records g (replacing any earlier grant of the key) and starts the
// reaper when it is not running.
func (s *Store) add(g *grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addLocked(g)
}

func (s *Store) addLocked(g *grant) {
	if old := s.grants[g.key]; old != nil {
		s.dropLocked(old)
	}
	g.confirmed = s.clock.Now()
	g.added = g.confirmed
	s.grants[g.key] = g
	g.ss.mu.Lock()
	g.ss.grants++
	g.ss.mu.Unlock()
	s.startReaperLocked()
}

// startReaperLocked starts the reaper when it is not running.
func (s *Store) startReaperLocked() {
	if !s.reaping {
		s.reaping = s.goBackground(s.reap)
	}
}

// forget drops g, if it is still the Store's grant of its key.
func (s *Store) forget(g *grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grants[g.key] == g {
		s.dropLocked(g)
	}
}

// forgetKey drops the grant of key with owner and token, if any.
func (s *Store) forgetKey(key, owner string, token uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.grants[key]; g != nil && g.owner == owner && uint64(g.token) == token {
		s.dropLocked(g)
	}
}

func (s *Store) dropLocked(g *grant) {
	delete(s.grants, g.key)
	g.ss.mu.Lock()
	g.ss.grants--
	g.ss.mu.Unlock()
}

// confirm records a confirmed acquire or renewal of g; it returns false
// when the reaper took g (or it was dropped) meanwhile: the renewal must not
// be confirmed.
func (s *Store) confirm(g *grant) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.reaped || s.grants[g.key] != g {
		return false
	}
	g.confirmed = s.clock.Now()
	return true
}

// ghost is a put of a key on a shared etcd lease whose outcome is unknown
// (its answer was lost): etcd may have applied it, or may still apply it if
// the request was delayed. Such a key would live as long as the etcd lease
// does, so the reaper deletes it when it finds it and no grant of the
// Store owns it, until the etcd lease ends.
type ghost struct {
	key, owner string
	ss         *session
	next       time.Time // the next check (s.clock)
	every      time.Duration
	// deleting: exorcise found the key without a grant and its delete is
	// in flight (guarded by Store.mu); addChecked refuses to confirm a
	// grant of the key meanwhile.
	deleting bool
}

// addGhost records a put of key by owner on ss whose outcome is unknown.
func (s *Store) addGhost(key, owner string, ss *session, life time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ghosts = append(s.ghosts, &ghost{key: key, owner: owner, ss: ss, next: s.clock.Now().Add(life), every: max(life, reapEvery)})
	s.startReaperLocked()
}

// reap runs while the Store has grants or ghosts: every reapEvery it takes
// the grants not confirmed for their TTL and deletes their keys,
// conditioned on the grant (owner and token), retrying until etcd answers;
// and it checks the ghosts that are due.
func (s *Store) reap() {
	t := time.NewTimer(reapEvery)
	defer t.Stop()
	for {
		select {
		case <-s.bgCtx.Done():
			return
		case <-t.C:
		}
		now := s.clock.Now()
		var due []*grant
		var haunt []*ghost
		s.mu.Lock()
		if len(s.grants) == 0 && len(s.ghosts) == 0 {
			s.reaping = false
			s.mu.Unlock()
			return
		}
		shortest := time.Duration(-1)
		for _, g := range s.grants {
			if g.reaped || now.Sub(g.confirmed) >= g.life {
				g.reaped = true
				due = append(due, g)
			}
			if shortest < 0 || g.life < shortest {
				shortest = g.life
			}
		}
		// The next look: a tenth of the shortest TTL, from 500 ms to 5 s, so
		// that many long leases cost few scans.
		t.Reset(min(max(shortest/10, reapEvery), 5*time.Second))
		kept := s.ghosts[:0]
		for _, h := range s.ghosts {
			if h.ss.over(now) {
				continue // the etcd lease ended, and its keys with it
			}
			if g := s.grants[h.key]; g != nil && g.owner == h.owner && g.ss == h.ss {
				continue // the put was applied, and a grant of it owns the key now
			}
			kept = append(kept, h)
			if !now.Before(h.next) {
				h.next = now.Add(h.every)
				haunt = append(haunt, h)
			}
		}
		clear(s.ghosts[len(kept):])
		s.ghosts = kept
		s.mu.Unlock()
		for _, g := range due {
			if g.ss.isGone() {
				s.forget(g) // etcd deletes its key with the lease
				continue
			}
			ctx, cancel := context.WithTimeout(s.bgCtx, 5*time.Second)
			_, err := s.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.Value(g.key), "=", g.owner),
					clientv3.Compare(clientv3.CreateRevision(g.key), "=", g.token),
					// Only while the key is still on this Store's etcd
					// lease: an owner string may be shared (a semaphore's
					// marker), and another Store that renewed the key moved
					// it onto an etcd lease of its own.
					clientv3.Compare(clientv3.LeaseValue(g.key), "=", g.ss.id)).
				Then(clientv3.OpDelete(g.key)).
				Commit()
			cancel()
			if err == nil {
				s.forget(g)
			}
		}
		for _, h := range haunt {
			s.exorcise(h)
		}
	}
}

// exorcise deletes the key of ghost h if the put was applied and no grant
// of the Store owns it.
func (s *Store) exorcise(h *ghost) {
	ctx, cancel := context.WithTimeout(s.bgCtx, 5*time.Second)
	defer cancel()
	resp, err := s.cli.Get(ctx, h.key)
	if err != nil || len(resp.Kvs) == 0 {
		return
	}
	kv := resp.Kvs[0]
	if string(kv.Value) != h.owner || clientv3.LeaseID(kv.Lease) != h.ss.id {
		return
	}
	// Decide and mark under one lock: a grant of the key recorded before
	// this is kept; one recorded after it (a retry by the same owner that
	// adopted or re-created the key while the delete is in flight) is not
	// confirmed (addChecked).
	s.mu.Lock()
	g := s.grants[h.key]
	if g != nil && g.owner == h.owner && g.ss == h.ss {
		s.mu.Unlock()
		return
	}
	h.deleting = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		h.deleting = false
		s.mu.Unlock()
	}()
	_, _ = s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(h.key), "=", h.owner),
			clientv3.Compare(clientv3.CreateRevision(h.key), "=", kv.CreateRevision),
			clientv3.Compare(clientv3.LeaseValue(h.key), "=", h.ss.id)).
		Then(clientv3.OpDelete(h.key)).
		Commit()
}

// errGhostDeleting means that the key of a grant being confirmed may be
// deleted by the Store's own exorcise, in flight.
var errGhostDeleting = errors.New("the store is deleting this owner's key, left by an acquire whose answer was lost")

// addChecked records g as add does, unless a delete of its key and owner by
// exorcise is in flight (then it records nothing and returns false): found
// by a review, a retry of an acquire whose answer was lost adopted the key
// and was confirmed while the exorcise's delete, decided before, landed
// after it.
func (s *Store) addChecked(g *grant) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.ghosts {
		if h.deleting && h.key == g.key && h.owner == g.owner {
			return false
		}
	}
	// A delete decided after this finds the grant (exorcise checks
	// s.grants under the same lock) and keeps it.
	s.addLocked(g)
	return true
}

// over reports whether the etcd lease has certainly ended, or no longer
// needs watching: it is gone, or it is not the current lease for new
// grants, carries no grant of the Store, and was last kept alive more than
// its TTL and a margin ago.
func (ss *session) over(now time.Time) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.gone {
		return true
	}
	if ss.grants > 0 || now.Sub(ss.born) < rotateAfter {
		return false
	}
	return now.After(ss.sent.Add(ss.ttl + 2*time.Second))
}
