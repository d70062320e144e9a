package driver

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors that stores return. The tenure package exports the same
// values (tenure.ErrHeld is ErrHeld, and so on), so callers test with
// errors.Is against either.
var (
	// ErrHeld means that another owner holds a live lease on the resource.
	// The error is (or wraps) a *HeldError that names the holder.
	ErrHeld = errors.New("tenure: lease held by another owner")

	// ErrLeaseLost means that the lease can no longer be trusted: the store
	// answered that this owner and fencing token no longer hold it (a Renew
	// or Release of a lease already gone included), or its local deadline
	// passed without a confirmed renewal. Jaeger's lock calls the same
	// condition errLockOwnership.
	ErrLeaseLost = errors.New("tenure: lease lost")

	// ErrInvalidResource means that a resource name is empty, longer than
	// MaxResourceLen bytes, not valid UTF-8, or contains NUL. It is returned
	// before any I/O.
	ErrInvalidResource = errors.New("tenure: invalid resource name")

	// ErrInvalidOwner means that an owner id is empty, too long, not valid
	// UTF-8, or contains NUL or the nonce separator where it must not.
	ErrInvalidOwner = errors.New("tenure: invalid owner id")

	// ErrInvalidTTL means that a TTL is not positive, or is outside what the
	// store can keep exactly (for example below one second on Cassandra,
	// whose TTLs are whole seconds). It is returned before any I/O.
	ErrInvalidTTL = errors.New("tenure: invalid TTL")

	// ErrUnknownOutcome means that the store may or may not have applied an
	// operation (a timeout after the request was sent, Cassandra's CAS write
	// timeout). The error wraps the store's own error as well.
	ErrUnknownOutcome = errors.New("tenure: outcome unknown")

	// ErrNotHeld is returned by Store.Get when no live lease exists on the
	// resource.
	ErrNotHeld = errors.New("tenure: resource not held")

	// ErrStoreUnusable means that the store can serve no more calls until it
	// is opened again: it was closed, or what it was opened on is gone (the
	// SQLite store's file was deleted or replaced, sqlite.ErrFileReplaced).
	// Every store's Acquire after Close returns an error matching it
	// (storetest ClosedStoreUnusable). A Locker's blocking Acquire returns it
	// instead of waiting on, since it never goes away by itself.
	ErrStoreUnusable = errors.New("tenure: store unusable until opened again")

	// ErrNoStore means that a store opened only to be inspected (a store
	// package's inspection mode, store.Inspect) does not exist: no SQLite
	// file, no leases table, no keyspace. Nothing was created. The message
	// names what is missing.
	ErrNoStore = errors.New("tenure: no such store")

	// ErrNotStore means that what a store configuration names exists but is
	// not a tenure store: a directory, a file that is not a SQLite database,
	// an empty file, another application's table of the same name. Nothing
	// was changed. The message says what was found.
	ErrNotStore = errors.New("tenure: not a tenure store")
)

// HeldError reports that a resource is held by another owner. It matches
// ErrHeld with errors.Is and is extracted with errors.As:
//
//	var held *tenure.HeldError
//	if errors.As(err, &held) {
//		log.Printf("held by %s (token %d)", held.Holder.Owner, held.Holder.Token)
//	}
type HeldError struct {
	// Holder is the live lease as the store reported it. Holder.Remaining is
	// zero when the store did not say how much time is left. Holder.Owner is
	// empty when the store saw the resource change hands while the request
	// ran; trying again is the answer.
	Holder Record
	// Reserved says that nobody holds the resource, but a waiter of
	// another blocking acquire reserved it (driver.Reserver): Holder.Owner
	// names that waiter, Holder.Token is zero and Holder.Remaining is the
	// time left on the reservation.
	Reserved bool
}

// Error describes the holder.
func (e *HeldError) Error() string {
	if e.Reserved {
		s := fmt.Sprintf("tenure: %q is free but reserved for the waiter %q", e.Holder.Resource, e.Holder.Owner)
		if e.Holder.Remaining > 0 {
			s += fmt.Sprintf(" (%s left)", e.Holder.Remaining.Round(time.Millisecond))
		}
		return s
	}
	if e.Holder.Owner == "" {
		// A store saw the resource taken and freed by others while the
		// request ran (Cassandra gives up after two attempts).
		return fmt.Sprintf("tenure: %q changed hands while the request ran (token %d); try again", e.Holder.Resource, e.Holder.Token)
	}
	s := fmt.Sprintf("tenure: %q is held by %q", e.Holder.Resource, e.Holder.Owner)
	if e.Holder.Token != 0 {
		s += fmt.Sprintf(" (token %d", e.Holder.Token)
	} else {
		s += " (no fencing token"
	}
	if e.Holder.Remaining > 0 {
		s += fmt.Sprintf(", %s left", e.Holder.Remaining.Round(time.Millisecond))
	}
	return s + ")"
}

// Is reports whether target is ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// UnknownOutcome wraps cause so that the result matches both
// ErrUnknownOutcome and cause with errors.Is. Stores use it when a request
// was sent but its answer was lost.
func UnknownOutcome(cause error) error {
	if cause == nil || errors.Is(cause, ErrUnknownOutcome) {
		return cause
	}
	return &unknownOutcomeError{cause: cause}
}

type unknownOutcomeError struct{ cause error }

func (e *unknownOutcomeError) Error() string {
	return ErrUnknownOutcome.Error() + ": " + e.cause.Error()
}

func (e *unknownOutcomeError) Unwrap() []error { return []error{ErrUnknownOutcome, e.cause} }

// NotHolder is the error a store's Renew or Release returns when the live
// lease is not this grant's. It wraps ErrLeaseLost and, when holder is not
// nil (the store knows who holds the resource now), a *HeldError naming
// that holder, so that a caller can tell "taken by another owner" from
// "gone" (tenure's LostError). Stores add their own context with %w.
func NotHolder(holder *Record) error {
	if holder == nil {
		return fmt.Errorf("no live lease with this owner and token: %w", ErrLeaseLost)
	}
	return fmt.Errorf("no live lease with this owner and token: %w (%w)", ErrLeaseLost, &HeldError{Holder: *holder})
}
