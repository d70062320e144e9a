package cassandra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

// DefaultJaegerTTL is the TTL that JaegerLock.Acquire uses for a TTL of 0,
// as Jaeger's lock does.
const DefaultJaegerTTL = 60 * time.Second

// JaegerLock has the method set of Jaeger's distributed lock
// (jaegertracing/jaeger, internal/distributedlock.Lock: Acquire and
// Forfeit), so code written against that interface (such as Jaeger's
// leader election) can use a tenure store unchanged. On a ModeJaeger store
// it shares the `leases` table with Jaeger collectors and excludes them; on
// a ModeNative store it also gets fencing tokens (see Token).
//
// Deliberate differences from Jaeger's lock, each for safety:
//   - A TTL between 0 and 1 s is an error wrapping driver.ErrInvalidTTL
//     (Jaeger writes `USING TTL 0`: a lease that never expires). A TTL of 0
//     means DefaultJaegerTTL, as in Jaeger.
//   - Fractional TTLs round up, plus the one second that Cassandra's
//     whole-second expiry needs (StoreTTL); Jaeger truncates 1.9 s to 1 s,
//     which Cassandra may expire after a few milliseconds.
//   - Renewing a lease this lock holds is one lightweight transaction (a
//     conditional UPDATE); Jaeger spends two (INSERT IF NOT EXISTS, then
//     UPDATE).
//   - A renewal that finds the lease gone (expired, or taken by another
//     owner) is logged at level Warn with the detail (see
//     WithJaegerLockLogger); Jaeger's lock says nothing. The call then
//     answers as Jaeger's lock does: false and a nil error when another
//     owner holds the resource, true when it was free and this lock took it
//     again, as a new lease (with a new fencing token on a ModeNative
//     store). An error here would be wrong for Jaeger's participant, which
//     keeps its last answer when Acquire fails: a deposed leader would go on
//     leading until its next refresh.
//   - The owner is the readable id, "#" and a 64-bit random nonce, so
//     two processes configured with the same id (identical containers)
//     still exclude each other; and each grant (an Acquire that was not a
//     renewal) writes an owner string of its own, Owner() + "." + N, so a
//     late request of an earlier grant never acts on a later one. Jaeger's
//     lock writes one owner string for all its grants, so a request of a
//     grant it gave up can still renew or free the next one.
//   - A lost answer is resolved (see Store), and an outcome that stays
//     unknown is an error wrapping driver.ErrUnknownOutcome, never a guess.
//
// JaegerLock keeps no timers: as in Jaeger, the caller renews by calling
// Acquire again well within the TTL, and must stop acting as the holder when
// Acquire returns false or an error. It is safe for concurrent use; its
// calls are serialised.
type JaegerLock struct {
	store   *Store
	owner   string
	timeout time.Duration
	log     *slog.Logger

	mu      sync.Mutex
	grants  uint64                 // grants made so far
	held    map[string]*jaegerHeld // leases this lock holds
	pending map[string]string      // owner string of an acquire whose outcome is unknown: the retry reuses it
}

type jaegerHeld struct {
	owner string // this grant's owner string
	token uint64
	ttl   time.Duration
}

// newGrantLocked returns the owner string of a new grant.
func (l *JaegerLock) newGrantLocked() string {
	l.grants++
	return fmt.Sprintf("%s.%d", l.owner, l.grants)
}

// owns reports whether owner names a grant of this lock.
func (l *JaegerLock) owns(owner string) bool {
	return len(owner) > len(l.owner)+1 && owner[:len(l.owner)] == l.owner && owner[len(l.owner)] == '.'
}

// JaegerLockOption configures a JaegerLock.
type JaegerLockOption func(*JaegerLock)

// WithJaegerLockLogger sets the logger that receives the detail of a lost
// lease (default slog.Default()).
func WithJaegerLockLogger(l *slog.Logger) JaegerLockOption {
	return func(j *JaegerLock) {
		if l != nil {
			j.log = l
		}
	}
}

// NewJaegerLock returns a lock on store for the owner id, to which it
// appends "#" and a random nonce; an empty id means
// tenure.DefaultOwnerID(). The id must be 1 to tenure.MaxOwnerIDLen bytes
// of UTF-8 without NUL or "#"; otherwise the error wraps
// driver.ErrInvalidOwner.
func NewJaegerLock(store *Store, ownerID string, opts ...JaegerLockOption) (*JaegerLock, error) {
	if store == nil {
		return nil, errors.New("cassandra store: nil store")
	}
	if ownerID == "" {
		ownerID = naming.DefaultOwnerID()
	}
	owner, err := naming.NewOwner(ownerID)
	if err != nil {
		return nil, err
	}
	// A store call makes at most four queries, each bounded by Timeout.
	l := &JaegerLock{store: store, owner: owner, timeout: 4 * store.cfg.Timeout, log: slog.Default(),
		held: map[string]*jaegerHeld{}, pending: map[string]string{}}
	for _, o := range opts {
		if o != nil { // a nil option chooses nothing
			o(l)
		}
	}
	return l, nil
}

// Owner returns this lock's owner: the readable id, "#", and a random
// nonce. Each grant is written to the store as Owner() + "." + N.
func (l *JaegerLock) Owner() string { return l.owner }

// Token returns the fencing token of the lease this lock holds on resource,
// and whether it holds one. The token is 0 on a ModeJaeger store.
func (l *JaegerLock) Token(resource string) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.held[resource]
	if !ok {
		return 0, false
	}
	return h.token, true
}

// Acquire acquires resource for ttl, or renews it when this lock already
// holds it. Its answers are those of Jaeger's lock: true and a nil error
// when this lock holds the lease (granted, or renewed); false and a nil
// error when another owner holds it; false and an error
// (driver.ErrInvalidTTL, ErrInvalidResource, ErrUnknownOutcome, or the
// driver's) when it could not tell, in which case acquired is meaningless,
// as in Jaeger's interface.
//
// When a lease this lock held was lost since the last call (it expired, or
// another owner took it), the loss is logged at level Warn, with the
// store's detail, and the call goes on as a fresh attempt: false and a nil
// error when another owner holds the resource, so that a caller such as
// Jaeger's participant steps down at once; true when the resource was free
// and this lock took it again, as a new lease (on a ModeNative store with a
// new fencing token: see Token). Each store call is bounded by four times
// the store's Timeout; a call that finds its lease lost makes two.
func (l *JaegerLock) Acquire(resource string, ttl time.Duration) (bool, error) {
	if ttl == 0 {
		ttl = DefaultJaegerTTL
	}
	if err := driver.ValidateAcquire(resource, l.owner, ttl); err != nil {
		return false, err
	}
	if _, err := StoreTTL(ttl); err != nil {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var lost *jaegerHeld // the lease found lost, if any
	var lostErr error
	if h, ok := l.held[resource]; ok {
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
		err := l.store.Renew(ctx, resource, h.owner, h.token, ttl)
		cancel()
		switch {
		case err == nil:
			h.ttl = ttl
			return true, nil
		case errors.Is(err, driver.ErrLeaseLost):
			delete(l.held, resource)
			lost, lostErr = h, err
		default:
			return false, fmt.Errorf("cassandra jaeger lock: renew %q: %w", resource, err)
		}
	}
	// A new grant, unless the last attempt's outcome is unknown: its retry
	// must be the same grant, so that the store renews what it may have
	// granted.
	owner, retry := l.pending[resource]
	if !retry {
		owner = l.newGrantLocked()
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	rec, err := l.store.Acquire(ctx, resource, owner, ttl)
	if errors.Is(err, driver.ErrUnknownOutcome) {
		l.pending[resource] = owner
	} else {
		delete(l.pending, resource)
	}
	if err != nil {
		var held *driver.HeldError
		if errors.As(err, &held) {
			if lost != nil {
				l.log.Warn("cassandra jaeger lock: lease lost: another owner holds the resource",
					"resource", resource, "token", lost.token, "holder", held.Holder.Owner, "detail", lostErr)
			}
			return false, nil
		}
		if lost != nil {
			l.log.Warn("cassandra jaeger lock: lease lost; a fresh attempt failed",
				"resource", resource, "token", lost.token, "detail", lostErr, "err", err)
		}
		return false, fmt.Errorf("cassandra jaeger lock: acquire %q: %w", resource, err)
	}
	if lost != nil {
		l.log.Warn("cassandra jaeger lock: lease lost, and acquired again as a new lease",
			"resource", resource, "token", lost.token, "new_token", rec.Token, "detail", lostErr)
	}
	l.held[resource] = &jaegerHeld{owner: owner, token: rec.Token, ttl: ttl}
	return true, nil
}

// Forfeit releases the lease this lock holds on resource, conditioned on
// this owner (and, on a ModeNative store, its fencing token). It returns true
// when the store freed it; false and an error wrapping driver.ErrLeaseLost
// when this lock did not hold it (as Jaeger's errLockOwnership); false and
// another error when the store could not be reached or the outcome stayed
// unknown (the lease then expires by its TTL). Each call is bounded by four
// times the store's Timeout.
func (l *JaegerLock) Forfeit(resource string) (bool, error) {
	if err := driver.ValidateRelease(resource, l.owner); err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	var owner string
	var token uint64
	if h, ok := l.held[resource]; ok {
		owner, token = h.owner, h.token
	} else {
		// Not held as far as this lock knows (for example after an unknown
		// outcome): free it only if the store says a grant of ours holds it.
		rec, err := l.store.Get(ctx, resource)
		switch {
		case errors.Is(err, driver.ErrNotHeld):
			delete(l.pending, resource)
			return false, fmt.Errorf("cassandra jaeger lock: forfeit %q: not held: %w", resource, driver.ErrLeaseLost)
		case err != nil:
			return false, fmt.Errorf("cassandra jaeger lock: forfeit %q: %w", resource, err)
		case !l.owns(rec.Owner):
			return false, fmt.Errorf("cassandra jaeger lock: forfeit %q: held by %s: %w", resource, quoteForeign(rec.Owner), driver.ErrLeaseLost)
		}
		owner, token = rec.Owner, rec.Token
	}
	delete(l.pending, resource)
	unknown := false
	for attempt := 0; attempt < 2; attempt++ {
		err := l.store.Release(ctx, resource, owner, token)
		switch {
		case err == nil:
			delete(l.held, resource)
			return true, nil
		case errors.Is(err, driver.ErrLeaseLost):
			delete(l.held, resource)
			if unknown {
				// The first attempt's answer was lost; the store now says
				// this owner does not hold it.
				return true, nil
			}
			return false, fmt.Errorf("cassandra jaeger lock: forfeit %q: %w", resource, err)
		case errors.Is(err, driver.ErrUnknownOutcome) && ctx.Err() == nil:
			unknown = true
			continue
		default:
			return false, fmt.Errorf("cassandra jaeger lock: forfeit %q: %w", resource, err)
		}
	}
	return false, fmt.Errorf("cassandra jaeger lock: forfeit %q: outcome unknown; the lease expires by its TTL: %w", resource, driver.ErrUnknownOutcome)
}

// The operations of a Store in ModeJaeger, which Acquire, Renew and
// Release call.

func (s *Store) acquireJaeger(ctx context.Context, resource, owner string, ttl time.Duration, secs int) (driver.Record, error) {
	granted := driver.Record{Resource: resource, Owner: owner, TTL: ttl, Remaining: time.Duration(secs-1) * time.Second}
	applied, cur, err := s.casQuery(ctx, s.st.jInsert, resource, owner, secs)
	if err != nil {
		return driver.Record{}, s.resolveJaegerGrant(ctx, resource, owner, err)
	}
	if applied {
		return granted, nil
	}
	if cur.owner != owner {
		return driver.Record{}, cur.held(resource)
	}
	// Held by this owner: the same lease, renewed with Jaeger's update.
	applied, cur, err = s.casQuery(ctx, s.st.jUpdate, secs, owner, resource, owner)
	if err != nil {
		return driver.Record{}, s.resolveJaegerGrant(ctx, resource, owner, err)
	}
	if applied {
		return granted, nil
	}
	return driver.Record{}, cur.held(resource)
}

// resolveJaegerGrant settles a grant in ModeJaeger whose answer was lost.
// Without a per-write id, a row that names this owner does not prove that
// this write made it (an earlier write of the same owner may have), so that
// case stays unknown; the Locker then retries, which renews the lease with
// a confirmed write.
func (s *Store) resolveJaegerGrant(ctx context.Context, resource, owner string, cause error) error {
	cur, err := s.resolve(ctx, "acquire", resource, cause)
	switch {
	case err != nil:
		return err
	case cur.owner == owner:
		return unknownf("acquire", resource, cause, "the answer was lost; this owner holds the resource, but in Jaeger mode a read cannot tell which write made it")
	case cur.owner == "":
		return unknownf("acquire", resource, cause, "the answer was lost and the resource is free; the write may still be applied")
	}
	// Held by another owner: the insert, if still on its way (a request
	// held up before its coordinator ran it), applies once that lease's
	// row expires, so the outcome stays unknown.
	return unknownf("acquire", resource, cause, "the answer was lost and the resource is held (%s); the write may still be applied once that lease ends", cur)
}

func (s *Store) renewJaeger(ctx context.Context, resource, owner string, token uint64, secs int) error {
	if token != 0 {
		return notHolder("renew", resource, owner, row{}, "Jaeger mode keeps no fencing tokens, so no lease has token %d", token)
	}
	applied, cur, err := s.casQuery(ctx, s.st.jUpdate, secs, owner, resource, owner)
	if err != nil {
		cur, rerr := s.resolve(ctx, "renew", resource, err)
		switch {
		case rerr != nil:
			return rerr
		case cur.owner == owner:
			return unknownf("renew", resource, err, "the answer was lost; this owner still holds the lease, but in Jaeger mode a read cannot tell whether this renewal was applied")
		}
		return notHolder("renew", resource, owner, cur, "the answer was lost, and the lease is no longer this owner's (%s)", cur)
	}
	if !applied {
		return notHolder("renew", resource, owner, cur, "not this owner's lease (%s)", cur)
	}
	return nil
}

func (s *Store) releaseJaeger(ctx context.Context, resource, owner string, token uint64) error {
	if token != 0 {
		return notHolder("release", resource, owner, row{}, "Jaeger mode keeps no fencing tokens, so no lease has token %d", token)
	}
	applied, cur, err := s.casQuery(ctx, s.st.jDelete, resource, owner)
	if err != nil {
		cur, rerr := s.resolve(ctx, "release", resource, err)
		switch {
		case rerr != nil:
			return rerr
		case cur.owner == owner:
			return unknownf("release", resource, err, "the answer was lost and the release is not applied yet; it may still be")
		}
		// Gone or someone else's: this delete, or the TTL, freed it. A
		// retry answers ErrLeaseLost, which the Locker takes as released
		// after an unknown outcome.
		return unknownf("release", resource, err, "the answer was lost; this owner no longer holds the lease (%s), but in Jaeger mode a read cannot tell whether this release or the TTL freed it", cur)
	}
	if !applied {
		return notHolder("release", resource, owner, cur, "not this owner's lease (%s)", cur)
	}
	return nil
}
