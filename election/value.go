package election

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

// MaxValueLen is the longest value a candidate may publish (Config.Value),
// in bytes.
const MaxValueLen = 128

// ValueSeparator separates a candidate's identity from the value it
// publishes in the readable id of its owner strings:
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
// tenure.ErrInvalidOwner, since the value is kept in the owner string.
func ValidateValue(value string) error {
	switch {
	case len(value) > MaxValueLen:
		return fmt.Errorf("%w: published value of %d bytes, the limit is %d", tenure.ErrInvalidOwner, len(value), MaxValueLen)
	case !utf8.ValidString(value):
		return fmt.Errorf("%w: published value is not valid UTF-8", tenure.ErrInvalidOwner)
	}
	for i, r := range value {
		if r != ' ' && !unicode.IsPrint(r) {
			return fmt.Errorf("%w: published value has the character %U, which does not print, at byte %d", tenure.ErrInvalidOwner, r, i)
		}
	}
	return nil
}

// ValidateIdentity checks a candidate's identity and the value it
// publishes, as New does, without any I/O: the identity as a readable owner
// id (tenure.WithOwnerID: 1 to tenure.MaxOwnerIDLen bytes of UTF-8 without
// NUL or "#") without ValueSeparator, the value with
// ValidateValue, and the two together, once the value is encoded, within
// tenure.MaxOwnerIDLen bytes. An empty identity stands for
// tenure.DefaultOwnerID(). The error wraps tenure.ErrInvalidOwner.
func ValidateIdentity(identity, value string) error {
	_, err := lockerID(identity, value)
	return err
}

// lockerID returns the readable id of a candidate's Locker: the identity,
// and the encoded value after ValueSeparator when there is one.
func lockerID(identity, value string) (string, error) {
	if identity == "" {
		identity = tenure.DefaultOwnerID()
	}
	if err := naming.ValidateOwnerID(identity); err != nil {
		return "", err
	}
	if strings.Contains(identity, ValueSeparator) {
		return "", fmt.Errorf("%w: identity contains %q, which separates the identity from the published value", tenure.ErrInvalidOwner, ValueSeparator)
	}
	if err := ValidateValue(value); err != nil {
		return "", err
	}
	if value == "" {
		return identity, nil
	}
	id := identity + ValueSeparator + encodeValue(value)
	if len(id) > tenure.MaxOwnerIDLen {
		return "", fmt.Errorf("%w: identity (%d bytes) and published value (%d bytes encoded) take %d bytes with the separator, the limit is %d",
			tenure.ErrInvalidOwner, len(identity), len(id)-len(identity)-len(ValueSeparator), len(id), tenure.MaxOwnerIDLen)
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

// ParseOwner splits the owner string of an election's lease, as a store
// reports it (driver.Record.Owner), into the candidate's identity and the
// value it published. An owner string without a well-formed value (no
// ValueSeparator in its readable id, or a value that a candidate could not
// have published) has the whole readable id (tenure.OwnerID) as its
// identity and no value. Both come from another process: print them
// escaped.
func ParseOwner(owner string) (identity, value string) {
	id := tenure.OwnerID(owner)
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

// Leader is the holder of an election's lease, as the store reported it.
// Every string in it comes from another process: print it escaped.
type Leader struct {
	// Identity is the leader's readable id (Config.Identity).
	Identity string
	// Value is the value the leader published (Config.Value), or "" when it
	// published none.
	Value string
	// Owner is the owner string of the leader's grant, as the store keeps
	// it: the identity, the encoded value, a nonce and the grant's number.
	Owner string
	// Token is the fencing token of the leader's term; 0 on a store mode
	// that keeps no tokens (Cassandra's Jaeger-compatible mode).
	Token uint64
	// TTL is the TTL the leader last wrote, where the store keeps it;
	// otherwise 0.
	TTL time.Duration
	// Remaining is the time that was left before the store would expire the
	// lease unless renewed, as the store saw it when it answered; 0 when the
	// store does not say.
	Remaining time.Duration
}

// LeaderOf returns the leader that a store's record of an election's lease
// names.
func LeaderOf(rec driver.Record) Leader {
	id, v := ParseOwner(rec.Owner)
	return Leader{Identity: id, Value: v, Owner: rec.Owner, Token: rec.Token, TTL: rec.TTL, Remaining: rec.Remaining}
}

// sameTerm reports whether a and b are the same term of one leader: the
// same fencing token, or, where the store keeps none, the same owner
// string. An empty Leader (nobody leads) is the same only as another.
func sameTerm(a, b Leader) bool {
	if a.Owner == "" || b.Owner == "" {
		return a.Owner == b.Owner
	}
	if a.Token != 0 || b.Token != 0 {
		return a.Token == b.Token
	}
	return a.Owner == b.Owner
}
