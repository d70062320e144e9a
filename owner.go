package tenure

import "github.com/tenure-go/tenure/driver"

// MaxOwnerIDLen is the longest readable owner id, in bytes.
const MaxOwnerIDLen = driver.MaxOwnerIDLen

// OwnerSeparator separates the readable id from the nonce in an owner
// string, as in "web-3:4711#9f86d081884c7d65".
const OwnerSeparator = driver.OwnerSeparator

// DefaultOwnerID returns the readable part of an owner: "HOST:PID".
func DefaultOwnerID() string { return driver.DefaultOwnerID() }

// NewOwner returns id followed by OwnerSeparator and a 64-bit random nonce
// from crypto/rand in hex. The nonce makes two Lockers exclude each other
// even when they were given the same readable id (identical containers
// share host name and process id). id must be 1 to MaxOwnerIDLen bytes of
// valid UTF-8 without NUL or OwnerSeparator; otherwise the error wraps
// ErrInvalidOwner.
func NewOwner(id string) (string, error) { return driver.NewOwner(id) }

// OwnerID returns the readable id of an owner string made by NewOwner (the
// part before the last OwnerSeparator), or the whole string when it has no
// separator (owners written by other programs, such as Jaeger collectors).
func OwnerID(owner string) string { return driver.OwnerID(owner) }

// ValidateOwnerID checks a readable owner id: 1 to MaxOwnerIDLen bytes of
// valid UTF-8 without NUL or OwnerSeparator. The error wraps ErrInvalidOwner.
func ValidateOwnerID(id string) error { return driver.ValidateOwnerID(id) }
