package driver

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Owner strings are made here, for tenure's Lockers and for stores that
// take locks of their own (cassandra.JaegerLock); package tenure exports
// the same functions.

// MaxOwnerIDLen is the longest readable owner id, in bytes.
const MaxOwnerIDLen = 200

// OwnerSeparator separates the readable id from the nonce in an owner
// string, as in "web-3:4711#9f86d081884c7d65".
const OwnerSeparator = "#"

// DefaultOwnerID returns the readable part of an owner: "HOST:PID".
func DefaultOwnerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	if len(host) > MaxOwnerIDLen-12 {
		host = host[:MaxOwnerIDLen-12]
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// NewOwner returns id followed by OwnerSeparator and a 64-bit random nonce
// from crypto/rand in hex. The nonce makes two Lockers exclude each other
// even when they were given the same readable id (identical containers
// share host name and process id). id must be 1 to MaxOwnerIDLen bytes of
// valid UTF-8 without NUL or OwnerSeparator; otherwise the error wraps
// ErrInvalidOwner.
func NewOwner(id string) (string, error) {
	if err := ValidateOwnerID(id); err != nil {
		return "", err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("tenure: owner nonce: %w", err)
	}
	return fmt.Sprintf("%s%s%016x", id, OwnerSeparator, binary.BigEndian.Uint64(b[:])), nil
}

// OwnerID returns the readable id of an owner string made by NewOwner (the
// part before the last OwnerSeparator), or the whole string when it has no
// separator (owners written by other programs, such as Jaeger collectors).
func OwnerID(owner string) string {
	if i := strings.LastIndex(owner, OwnerSeparator); i >= 0 {
		return owner[:i]
	}
	return owner
}

// ValidateOwnerID checks a readable owner id: 1 to MaxOwnerIDLen bytes of
// valid UTF-8 without NUL or OwnerSeparator. The error wraps ErrInvalidOwner.
func ValidateOwnerID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty id", ErrInvalidOwner)
	case len(id) > MaxOwnerIDLen:
		return fmt.Errorf("%w: id of %d bytes, the limit is %d", ErrInvalidOwner, len(id), MaxOwnerIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: id is not valid UTF-8", ErrInvalidOwner)
	case strings.IndexByte(id, 0) >= 0:
		return fmt.Errorf("%w: id contains NUL", ErrInvalidOwner)
	case strings.Contains(id, OwnerSeparator):
		return fmt.Errorf("%w: id contains %q, which separates the id from the nonce", ErrInvalidOwner, OwnerSeparator)
	}
	return nil
}
