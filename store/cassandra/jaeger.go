package cassandra

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
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
//   - A renewal that finds the lease gone reports the loss: Acquire returns
//     false and an error wrapping driver.ErrLeaseLost (test it with
//     errors.Is). Jaeger's lock would silently insert a new lease when the
//     old one had expired, hiding that another owner may have held the
//     resource in between. The next Acquire starts a new lease.
//   - The owner is the readable id plus a random nonce (tenure.NewOwner), so
//     two processes configured with the same id (identical containers)
//     still exclude each other.
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

	mu   sync.Mutex
	held map[string]*jaegerHeld
}

type jaegerHeld struct {
	token uint64
	ttl   time.Duration
}

// NewJaegerLock returns a lock on store for the owner id (tenure.NewOwner
// appends a random nonce; an empty id means tenure.DefaultOwnerID()). It
// returns an error wrapping driver.ErrInvalidOwner for a bad id.
func NewJaegerLock(store *Store, ownerID string) (*JaegerLock, error) {
	if store == nil {
		return nil, errors.New("cassandra store: nil store")
	}
	if ownerID == "" {
		ownerID = tenure.DefaultOwnerID()
	}
	owner, err := tenure.NewOwner(ownerID)
	if err != nil {
		return nil, err
	}
	// A store call makes at most four queries, each bounded by Timeout.
	return &JaegerLock{store: store, owner: owner, timeout: 4 * store.cfg.Timeout, held: map[string]*jaegerHeld{}}, nil
}

// Owner returns the owner string written to the store.
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
// holds it. It returns true when this lock holds the lease (granted or
// renewed); false and a nil error when another owner holds it; false and an
// error wrapping driver.ErrLeaseLost when a lease this lock held was lost
// (expired or taken) since the last call; and false with another error
// (driver.ErrInvalidTTL, ErrInvalidResource, ErrUnknownOutcome, or the
// driver's) when it could not tell, in which case acquired is meaningless,
// as in Jaeger's interface. Each call is bounded by four times the store's
// Timeout.
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
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.held[resource]; ok {
		err := l.store.Renew(ctx, resource, l.owner, h.token, ttl)
		switch {
		case err == nil:
			h.ttl = ttl
			return true, nil
		case errors.Is(err, driver.ErrLeaseLost):
			delete(l.held, resource)
			return false, fmt.Errorf("cassandra jaeger lock: %q: %w", resource, err)
		default:
			return false, fmt.Errorf("cassandra jaeger lock: renew %q: %w", resource, err)
		}
	}
	rec, err := l.store.Acquire(ctx, resource, l.owner, ttl)
	if err != nil {
		var held *driver.HeldError
		if errors.As(err, &held) {
			return false, nil
		}
		return false, fmt.Errorf("cassandra jaeger lock: acquire %q: %w", resource, err)
	}
	l.held[resource] = &jaegerHeld{token: rec.Token, ttl: ttl}
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
	token := uint64(0)
	if h, ok := l.held[resource]; ok {
		token = h.token
	} else if l.store.Mode() == ModeNative {
		// Not held as far as this lock knows (for example after an unknown
		// outcome): free it only if the store says it is ours.
		rec, err := l.store.Get(ctx, resource)
		switch {
		case errors.Is(err, driver.ErrNotHeld):
			return false, fmt.Errorf("cassandra jaeger lock: forfeit %q: not held: %w", resource, driver.ErrLeaseLost)
		case err != nil:
			return false, fmt.Errorf("cassandra jaeger lock: forfeit %q: %w", resource, err)
		case rec.Owner != l.owner:
			return false, fmt.Errorf("cassandra jaeger lock: forfeit %q: held by %s: %w", resource, rec.Owner, driver.ErrLeaseLost)
		}
		token = rec.Token
	}
	unknown := false
	for attempt := 0; attempt < 2; attempt++ {
		err := l.store.Release(ctx, resource, l.owner, token)
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
