package driver

import (
	"fmt"
	"time"
)

// TTLRange is the range of TTLs a store keeps exactly: from Min (its
// resolution, or its shortest TTL) to Max. Its CheckTTL is what a store's
// TTLChecker and its Acquire and Renew run before any I/O.
type TTLRange struct {
	// Min and Max are the shortest and the longest TTL the store keeps.
	Min, Max time.Duration
	// Why says, in the message about a TTL below Min, why Min is the limit:
	// "TTLs are whole seconds". Empty: Min is the store's resolution.
	Why string
}

// CheckTTL returns nil when ttl is positive and within the range, and an
// error wrapping ErrInvalidTTL that names the limit otherwise. It does no
// I/O and is safe for concurrent use.
func (r TTLRange) CheckTTL(ttl time.Duration) error {
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	if ttl < r.Min {
		why := r.Why
		if why == "" {
			why = "the store's resolution"
		}
		return fmt.Errorf("%w: %v is below the store's minimum of %v (%s)", ErrInvalidTTL, ttl, r.Min, why)
	}
	if ttl > r.Max {
		return fmt.Errorf("%w: %v is above the store's maximum of %v", ErrInvalidTTL, ttl, r.Max)
	}
	return nil
}

// MaxMillisecondTTL is the longest TTL of a store that keeps TTLs and
// expiry times as int64 milliseconds, with room to add one to a clock
// reading: 2^62 ns in whole milliseconds (about 146 years).
const MaxMillisecondTTL = time.Duration(1<<62) / time.Millisecond * time.Millisecond

// MillisecondTTLs is the TTL range of stores that keep TTLs in whole
// milliseconds (SQLite, PostgreSQL, Redis): 1 ms to MaxMillisecondTTL.
var MillisecondTTLs = TTLRange{Min: time.Millisecond, Max: MaxMillisecondTTL}

// Milliseconds returns ttl in whole milliseconds, rounded up, so that a
// store never keeps a lease shorter than asked.
func Milliseconds(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

// ValidateAcquire checks the arguments of Store.Acquire and Store.Renew for
// a store with this TTL range: ValidateAcquire, then CheckTTL.
func (r TTLRange) ValidateAcquire(resource, owner string, ttl time.Duration) error {
	if err := ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	return r.CheckTTL(ttl)
}

// ValidateKeep checks the arguments of Keeper.Keep for a store with this
// TTL range: ValidateKeep, then CheckTTL.
func (r TTLRange) ValidateKeep(resource, owner, keeper string, ttl time.Duration) error {
	if err := ValidateKeep(resource, owner, keeper, ttl); err != nil {
		return err
	}
	return r.CheckTTL(ttl)
}
