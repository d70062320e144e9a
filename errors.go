package tenure

import (
	"errors"
	"fmt"
	"time"

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

	// ErrLeaseLost means that the lease can no longer be trusted although
	// its holder did not release it: the store answered that this owner and
	// fencing token no longer hold it, or its local deadline passed without
	// a confirmed renewal. A lost lease's context is cancelled with a cause
	// that wraps ErrLeaseLost (a *LostError), and every Renew or Release
	// after the loss returns it. Jaeger's lock calls the same condition
	// errLockOwnership.
	ErrLeaseLost = driver.ErrLeaseLost

	// ErrReleased is the cause of a lease context cancelled because its
	// holder ended the lease (Release, ReleaseAfter, the release of Do, or
	// Close), and what Renew, Release and ReleaseAfter return afterwards. A
	// release is not a loss: ErrReleased does not match ErrLeaseLost, so
	// code that alerts on ErrLeaseLost alerts on losses only.
	ErrReleased = errors.New("tenure: lease released by its holder")

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

	// ErrStoreUnusable means that the store can serve no more calls until it
	// is opened again (it was closed, or the SQLite store's file was deleted
	// or replaced: sqlite.ErrFileReplaced matches it). Acquire, Semaphore.Acquire and
	// Do return it at once, even in the middle of a wait: open the store and
	// a Locker on it again.
	ErrStoreUnusable = driver.ErrStoreUnusable

	// ErrClosed is returned by a Locker after Close.
	ErrClosed = errors.New("tenure: locker closed")
)

// Why a lease was lost (design rule 8). A lost lease's cause is a
// *LostError whose Reason is one of these; both wrap ErrLeaseLost.
var (
	// ErrLeaseExpired means that the lease's local deadline passed before a
	// renewal was confirmed: the store could not be reached, answered too
	// slowly, or its answers were lost. The LostError also wraps the last
	// store error.
	ErrLeaseExpired = fmt.Errorf("%w: no renewal was confirmed before the deadline", ErrLeaseLost)

	// ErrNotHolder means that the store answered that this grant no longer
	// holds the lease: someone released it (an operator's forced release),
	// it expired in the store, or another owner was granted it. The
	// LostError wraps a *HeldError naming the new holder when the store
	// said who it is.
	ErrNotHolder = fmt.Errorf("%w: the store says this grant no longer holds it", ErrLeaseLost)
)

// LostError is the cause of a lost lease: the context.Cause of its context,
// the argument of the WithOnLost callback, and what Renew and Release return
// after the loss. It matches ErrLeaseLost and its Reason with errors.Is, and
// the store error behind the loss (a driver error, a *HeldError naming the
// new holder) with errors.Is and errors.As:
//
//	if errors.Is(cause, tenure.ErrNotHolder) {
//		var held *tenure.HeldError
//		if errors.As(cause, &held) { log.Printf("taken by %s", held.Holder.Owner) }
//	}
type LostError struct {
	// Resource and Token identify the lost lease.
	Resource string
	Token    uint64
	// Reason is ErrLeaseExpired or ErrNotHolder.
	Reason error
	// Err is the store error behind the loss: the last failed renewal for
	// ErrLeaseExpired (nil if none failed: the process may have been paused
	// or suspended), the store's answer for ErrNotHolder.
	Err error
	// SinceConfirmed is how long before the loss the last confirmed acquire
	// or renewal was sent.
	SinceConfirmed time.Duration
	// TTL is the lease's TTL.
	TTL time.Duration
}

// Error describes the loss; the resource name is quoted.
func (e *LostError) Error() string {
	s := fmt.Sprintf("tenure: lease on %q (token %d) lost: ", e.Resource, e.Token)
	if errors.Is(e.Reason, ErrNotHolder) {
		s += "the store says this grant no longer holds it"
	} else {
		s += fmt.Sprintf("no renewal was confirmed in time (the last confirmed one was sent %v before; TTL %v)",
			e.SinceConfirmed.Round(time.Millisecond), e.TTL)
	}
	var held *HeldError
	switch {
	case errors.As(e.Err, &held) && held.Holder.Owner != "":
		s += fmt.Sprintf("; now held by %q (token %d)", held.Holder.Owner, held.Holder.Token)
	case e.Err != nil:
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the reason and the store error.
func (e *LostError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Err}
}
