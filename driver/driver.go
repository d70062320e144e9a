// Package driver is the contract between tenure and its stores, as
// database/sql/driver is for database/sql: what a store implements, the
// record it returns, the errors it reports, and the checks it makes before
// any I/O. Users of tenure never need it; people who write a store do (see
// "Writing a store" in docs/stores.md), and store/storetest checks a store
// against it on its real server.
//
// The lease contract (docs/design.md) in short: each Store method is one
// atomic operation in the store. Acquire grants a free resource with the
// next fencing token, or renews the live lease of the same owner string (a
// retry of the same grant), or reports the holder with a *HeldError. Renew
// and Release act only on the live lease with this owner string and token,
// and never re-create an expired or replaced one. Fencing tokens strictly
// increase with every grant of a resource and never go back. An operation
// whose answer was lost returns UnknownOutcome(cause), never success or
// failure.
package driver

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxResourceLen is the longest resource name, in bytes.
const MaxResourceLen = 256

// MaxOwnerLen is the longest owner string a store must keep, in bytes.
const MaxOwnerLen = 256

// Record is a live lease as a store sees it.
type Record struct {
	// Resource is the name of what is locked.
	Resource string
	// Owner is the holder's owner string. tenure writes one string per
	// grant: the Locker's readable id, "#", its 64-bit random nonce in hex,
	// ".", and the number of the grant (see tenure.OwnerID). Stores treat
	// it as opaque and compare it byte for byte.
	Owner string
	// Token is the lease's fencing token. It strictly increases with every
	// new grant of the resource and never goes back. Zero means that the
	// store mode keeps no fencing token (Cassandra's Jaeger-compatible
	// mode); a real token is never zero.
	Token uint64
	// TTL is the TTL last written by the holder, where the store keeps it;
	// zero when it does not.
	TTL time.Duration
	// Remaining is the time left before the store expires the lease, as the
	// store saw it when it answered; zero when the store does not know.
	Remaining time.Duration
}

// Store is a backend that keeps leases. Each method is one atomic operation
// in the store (see the package documentation and docs/design.md).
// Implementations must be safe for concurrent use, must validate their input
// before any I/O (ValidateResource, ValidateOwner, ValidateTTL plus their own
// TTL limits), must wrap driver errors with %w, and must report an operation
// whose outcome is unknown with UnknownOutcome(cause), never as success or
// failure.
//
// Users rarely call a Store directly: a tenure.Locker does, and adds local
// deadlines, renewal and the other client-side rules.
type Store interface {
	// Acquire grants the resource to owner for ttl when no live lease exists,
	// with the next fencing token. When owner already holds it (the same
	// owner string: a retry of the same grant), the same lease is renewed for
	// ttl and returned, so a retry after an unknown outcome is safe. When
	// another owner holds it, Acquire returns a *HeldError.
	Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (Record, error)

	// Renew extends the lease to ttl from now only when the live lease has
	// this owner and token. Otherwise it returns an error wrapping
	// ErrLeaseLost (and, where the store knows it, a *HeldError naming the
	// current holder), and it never re-creates an expired or replaced lease.
	Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error

	// Release frees the resource only when the live lease has this owner and
	// token; otherwise (including a lease already gone) it returns an error
	// wrapping ErrLeaseLost and changes nothing.
	Release(ctx context.Context, resource, owner string, token uint64) error

	// Get returns the live lease on resource, or an error wrapping ErrNotHeld.
	Get(ctx context.Context, resource string) (Record, error)

	// List returns the live leases whose resource starts with prefix, sorted
	// by resource.
	List(ctx context.Context, prefix string) ([]Record, error)

	// Close releases the store's connections. It does not release leases.
	Close() error
}

// Notifier is implemented by stores that can wake a waiting Acquire when a
// resource may have become free (PostgreSQL LISTEN/NOTIFY, etcd watches,
// Redis pub/sub). Without it, a blocking Acquire polls with backoff.
type Notifier interface {
	// Subscribe returns a channel that receives a value, coalesced and
	// without blocking the sender, whenever resource may have become free,
	// and a function that ends the subscription. A notification is only a
	// hint: the waiter still acquires through Store.Acquire. A store that
	// also implements Watcher may wake only one of its waiting subscribers
	// per release (the one that has waited longest, as Hub does), so that a
	// hand-over costs a few store calls whatever the number of waiters; a
	// store without Watcher wakes them all. Such a store must not lose a
	// wake-up to a waiter that gives up: ending a subscription passes a
	// wake-up on to the next waiter when one is pending, and when ctx has
	// ended after a wake-up was delivered (a waiter that took one and gives
	// up without acting on it cancels ctx first, as tenure's Locker does).
	// Hub does both.
	Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error)
}

// Watcher is implemented by Notifier stores whose Subscribe wakes one waiter
// per release. Watch subscribes to every release notification of resource,
// as a holder does that watches its own lease (tenure.WithReleaseWatch).
type Watcher interface {
	Watch(ctx context.Context, resource string) (<-chan struct{}, func(), error)
}

// TTLChecker is implemented by stores with limits on TTLs (a resolution, a
// minimum, a maximum). A Locker calls CheckTTL before any I/O, so a TTL the
// store cannot keep exactly is rejected at once; the store checks again in
// each operation.
type TTLChecker interface {
	// CheckTTL returns an error wrapping ErrInvalidTTL when the store cannot
	// keep ttl.
	CheckTTL(ttl time.Duration) error
}

// ValidateResource checks a resource name: 1 to MaxResourceLen bytes of
// valid UTF-8 without NUL. The error wraps ErrInvalidResource.
func ValidateResource(resource string) error {
	switch {
	case resource == "":
		return fmt.Errorf("%w: empty", ErrInvalidResource)
	case len(resource) > MaxResourceLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidResource, len(resource), MaxResourceLen)
	case !utf8.ValidString(resource):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidResource)
	case strings.IndexByte(resource, 0) >= 0:
		return fmt.Errorf("%w: contains NUL", ErrInvalidResource)
	}
	return nil
}

// ValidatePrefix checks a List prefix: like a resource name, but it may be
// empty.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return ValidateResource(prefix)
}

// ValidateOwner checks an owner string as stores receive it: 1 to
// MaxOwnerLen bytes of valid UTF-8 without NUL. The error wraps
// ErrInvalidOwner.
func ValidateOwner(owner string) error {
	switch {
	case owner == "":
		return fmt.Errorf("%w: empty", ErrInvalidOwner)
	case len(owner) > MaxOwnerLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidOwner, len(owner), MaxOwnerLen)
	case !utf8.ValidString(owner):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidOwner)
	case strings.IndexByte(owner, 0) >= 0:
		return fmt.Errorf("%w: contains NUL", ErrInvalidOwner)
	}
	return nil
}

// ValidateTTL checks that ttl is positive. Stores add their own limits. The
// error wraps ErrInvalidTTL.
func ValidateTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: %v is not positive", ErrInvalidTTL, ttl)
	}
	return nil
}

// ValidateAcquire checks the arguments of Store.Acquire and Store.Renew
// (resource, owner, TTL) with ValidateResource, ValidateOwner and
// ValidateTTL. Stores call it before any I/O.
func ValidateAcquire(resource, owner string, ttl time.Duration) error {
	if err := ValidateRelease(resource, owner); err != nil {
		return err
	}
	return ValidateTTL(ttl)
}

// ValidateRelease checks the arguments of Store.Release.
func ValidateRelease(resource, owner string) error {
	if err := ValidateResource(resource); err != nil {
		return err
	}
	return ValidateOwner(owner)
}

// BatchRenewer is implemented by stores that can renew many leases in one
// request (one transaction, one statement, one script). A Locker that holds
// many leases then renews those that are due together in one call instead
// of one call each; other stores are called once per lease.
type BatchRenewer interface {
	// RenewBatch renews each lease as Renew would, as one request where the
	// store can, and returns one error per lease, in order: nil when it was
	// renewed, an error wrapping ErrLeaseLost when that grant no longer
	// holds it, and otherwise the failure (UnknownOutcome when the answer
	// was lost, which may be the same error for every lease). The input is
	// validated before any I/O, as in Renew.
	RenewBatch(ctx context.Context, leases []Renewal) []error
}

// Keeper is implemented by stores that can hand a live lease over to another
// owner string in one atomic operation. Lease.ReleaseAfter uses it to leave
// a resource held for a while after its holder is done with it: the lease is
// kept under an owner string that nothing renews or releases, so a request
// of the grant that reaches the store later (a renewal whose sender gave up,
// delivered late) finds another holder and changes nothing. Without Keeper,
// ReleaseAfter renews the grant with the hold's TTL, and such a late renewal
// can cut a hold longer than the lease's TTL back to that TTL.
type Keeper interface {
	// Keep replaces the live lease with this owner and token by a lease of
	// owner string keeper with the same fencing token, expiring ttl from now
	// (rounded as the store rounds TTLs). When this grant does not hold the
	// resource (a lease already gone included) it returns an error wrapping
	// ErrLeaseLost, as Renew does, and changes nothing. The input (keeper
	// too, as an owner string) is validated before any I/O.
	Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error
}

// Reserver is implemented by stores without release notifications
// (Notifier), or whose notifications come from polling (MySQL: a poll
// sees a release only while the resource stays free), so that a waiter in
// another process is not starved by a
// holder that releases and acquires again at once (it would win every race
// against a waiter that polls). A blocking acquire that found the resource
// held reserves it with its attempts (AcquireWaiting); once the resource is
// free, the store grants it to the reserving waiter and refuses everyone
// else (Acquire and other waiters' AcquireWaiting return a *HeldError with
// Reserved set) until that waiter is granted, gives up (Unreserve), or
// stops asking (the reservation expires). One waiter at a time holds a
// reservation of a resource; the others take it in turn as each is granted,
// in the order of their attempts. A reservation is not a lease: Get and List
// do not show it, and it has no fencing token.
type Reserver interface {
	// AcquireWaiting is Acquire for an attempt of a blocking acquire.
	// waiter names the blocking acquire (the same string for all its
	// attempts; an owner string, validated as one); wait is how long its
	// reservation lasts if no other attempt of it comes (rounded up to the
	// store's resolution). A free resource that no other waiter has
	// reserved is granted as Acquire grants it, and a reservation of waiter
	// ends; a live lease of the same owner string is renewed as by Acquire.
	// Otherwise it returns the *HeldError that Acquire would (Reserved when
	// the resource is free), and reserves the resource for waiter for wait
	// from now unless another waiter's reservation is live (its own is
	// extended). Input is validated before any I/O, as in Acquire, and a
	// wait that is not positive is ErrInvalidTTL.
	AcquireWaiting(ctx context.Context, resource, owner, waiter string, ttl, wait time.Duration) (Record, error)

	// Unreserve ends waiter's reservation of resource, if it has one: the
	// blocking acquire gave up. It changes nothing else.
	Unreserve(ctx context.Context, resource, waiter string) error
}

// ValidateWaiting checks the arguments of Reserver.AcquireWaiting.
func ValidateWaiting(resource, owner, waiter string, ttl, wait time.Duration) error {
	if err := ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	if err := ValidateOwner(waiter); err != nil {
		return err
	}
	if wait <= 0 {
		return fmt.Errorf("%w: reservation time %v is not positive", ErrInvalidTTL, wait)
	}
	return nil
}

// ValidateUnreserve checks the arguments of Reserver.Unreserve.
func ValidateUnreserve(resource, waiter string) error {
	if err := ValidateResource(resource); err != nil {
		return err
	}
	return ValidateOwner(waiter)
}

// ValidateKeep checks the arguments of Keeper.Keep.
func ValidateKeep(resource, owner, keeper string, ttl time.Duration) error {
	if err := ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	if err := ValidateOwner(keeper); err != nil {
		return err
	}
	if keeper == owner {
		return fmt.Errorf("%w: the keeper must be another owner string than the grant's", ErrInvalidOwner)
	}
	return nil
}

// Renewal is one lease of a RenewBatch call: the arguments of Renew.
type Renewal struct {
	Resource string
	Owner    string
	Token    uint64
	TTL      time.Duration
}
