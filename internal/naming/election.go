package naming

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tenure-go/tenure/driver"
)

// MaxValueLen is the longest value an election candidate may publish, in
// bytes (election.MaxValueLen).
const MaxValueLen = 128

// ValueSeparator separates an election candidate's identity from the value
// it publishes in the readable id of its owner strings:
// "IDENTITY|VALUE#nonce.N". Identities of candidates may not contain it.
const ValueSeparator = "|"

// The published value travels in the owner string that every store already
// keeps with the lease, so that it works on every store, in every mode,
// without a column or field of its own: the candidate's Locker gets the
// readable id IDENTITY|ENCODED, where ENCODED is the value with '%' written
// %25 and '#' (the nonce separator of owner strings) written %23. Owner
// strings without the separator, those of candidates that publish nothing
// and those written by other programs (Jaeger collectors), read as an
// identity with no value.

// ValidateValue checks a value to publish: at most MaxValueLen bytes of
// valid UTF-8 whose characters are all printable (unicode.IsPrint) or the
// ASCII space, so no control character, escape sequence or bidirectional
// override. The empty value means none. The error wraps
// driver.ErrInvalidOwner, since the value is kept in the owner string.
func ValidateValue(value string) error {
	switch {
	case len(value) > MaxValueLen:
		return fmt.Errorf("%w: published value of %d bytes, the limit is %d", driver.ErrInvalidOwner, len(value), MaxValueLen)
	case !utf8.ValidString(value):
		return fmt.Errorf("%w: published value is not valid UTF-8", driver.ErrInvalidOwner)
	}
	for i, r := range value {
		if r != ' ' && !unicode.IsPrint(r) {
			return fmt.Errorf("%w: published value has the character %U, which does not print, at byte %d", driver.ErrInvalidOwner, r, i)
		}
	}
	return nil
}

// CandidateID returns the readable id of an election candidate's Locker:
// the identity, and the encoded value after ValueSeparator when there is
// one. It checks, without any I/O, the identity as a readable owner id
// (ValidateOwnerID) without ValueSeparator, the value with ValidateValue,
// and the two together within MaxOwnerIDLen bytes. The error wraps
// driver.ErrInvalidOwner.
func CandidateID(identity, value string) (string, error) {
	if err := ValidateOwnerID(identity); err != nil {
		return "", err
	}
	if strings.Contains(identity, ValueSeparator) {
		return "", fmt.Errorf("%w: identity contains %q, which separates the identity from the published value", driver.ErrInvalidOwner, ValueSeparator)
	}
	if err := ValidateValue(value); err != nil {
		return "", err
	}
	if value == "" {
		return identity, nil
	}
	id := identity + ValueSeparator + encodeValue(value)
	if len(id) > MaxOwnerIDLen {
		return "", fmt.Errorf("%w: identity (%d bytes) and published value (%d bytes encoded) take %d bytes with the separator, the limit is %d",
			driver.ErrInvalidOwner, len(identity), len(id)-len(identity)-len(ValueSeparator), len(id), MaxOwnerIDLen)
	}
	return id, nil
}

var valueEncoder = strings.NewReplacer("%", "%25", "#", "%23")

func encodeValue(v string) string { return valueEncoder.Replace(v) }

// decodeValue reverses encodeValue; ok is false for a string that
// encodeValue cannot have made.
func decodeValue(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "%25"):
			b.WriteByte('%')
		case strings.HasPrefix(s[i:], "%23"):
			b.WriteByte('#')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// ParseCandidate splits the owner string of an election's lease, as a
// store reports it (driver.Record.Owner), into the candidate's identity
// and the value it published. An owner string without a well-formed value
// (no ValueSeparator in its readable id, or a value that a candidate could
// not have published) has the whole readable id (OwnerID) as its identity
// and no value. Both come from another process: print them escaped.
func ParseCandidate(owner string) (identity, value string) {
	id := OwnerID(owner)
	i := strings.Index(id, ValueSeparator)
	if i < 0 {
		return id, ""
	}
	v, ok := decodeValue(id[i+len(ValueSeparator):])
	if !ok || v == "" || ValidateValue(v) != nil {
		return id, ""
	}
	return id[:i], v
}
