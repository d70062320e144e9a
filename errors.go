package tenure

import (
	"errors"
	"fmt"

	"github.com/tenure-go/tenure/driver"
)

// MaxResourceLen is the longest resource name, in bytes.
const MaxResourceLen = driver.MaxResourceLen

// Record is a live lease as a store sees it: resource, owner, fencing token,
// TTL and time left (see driver.Record).
type Record = driver.Record

// HeldError reports that a resource is held by another owner. It matches
// ErrHeld with errors.Is and is extracted with errors.As:
//
//	var held *tenure.HeldError
//	if errors.As(err, &held) {
//		log.Printf("held by %s (token %d)", held.Holder.Owner, held.Holder.Token)
//	}
type HeldError = driver.HeldError

// Sentinel errors. Every error that tenure or a store returns for one of these
// conditions wraps the matching sentinel, so callers test with errors.Is and
// never compare strings. The store-level ones are the same values as the
// driver package's.
var (
	// ErrHeld means that another owner holds a live lease on the resource.
	// The error is (or wraps) a *HeldError that names the holder.
	ErrHeld = driver.ErrHeld

	// ErrLeaseLost means that the lease can no longer be trusted: the store
	// answered that this owner and fencing token no longer hold it, its local
	// deadline passed without a confirmed renewal, or it was released. A lease
	// context is cancelled with a cause that wraps ErrLeaseLost, and every
	// Renew or Release after the loss returns it. Jaeger's lock calls the
	// same condition errLockOwnership.
	ErrLeaseLost = driver.ErrLeaseLost

	// ErrReleased is the cause of a lease context cancelled because its
	// holder released the lease. It wraps ErrLeaseLost, so code that only
	// checks for ErrLeaseLost treats both the same.
	ErrReleased = fmt.Errorf("%w: released by its holder", ErrLeaseLost)

	// ErrInvalidResource means that a resource name is empty, longer than
	// MaxResourceLen bytes, not valid UTF-8, or contains NUL. It is returned
	// before any I/O.
	ErrInvalidResource = driver.ErrInvalidResource

	// ErrInvalidOwner means that an owner id is empty, too long, not valid
	// UTF-8, or contains NUL or the nonce separator where it must not.
	ErrInvalidOwner = driver.ErrInvalidOwner

	// ErrInvalidTTL means that a TTL is not positive, or is outside what the
	// store can keep exactly (for example below one second on Cassandra, whose
	// TTLs are whole seconds). It is returned before any I/O.
	ErrInvalidTTL = driver.ErrInvalidTTL

	// ErrUnknownOutcome means that the store may or may not have applied an
	// operation (a timeout after the request was sent, Cassandra's CAS write
	// timeout) and tenure could not resolve which before the lease's deadline.
	// The error wraps the store's own error as well.
	ErrUnknownOutcome = driver.ErrUnknownOutcome

	// ErrNotHeld is returned by Get when no live lease exists on the
	// resource.
	ErrNotHeld = driver.ErrNotHeld

	// ErrClosed is returned by a Locker after Close.
	ErrClosed = errors.New("tenure: locker closed")
)
