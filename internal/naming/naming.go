// Package naming holds what the holders of a lease, the stores and the
// tenure command must agree on without it being part of tenure's API: how
// an owner string is made and read, and the names, owner strings and
// shortest marker TTL of a semaphore's leases. The layouts are part of the stores' key layout
// (docs/compatibility.md): changing one is a breaking change.
package naming

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenure-go/tenure/driver"
)

// MaxOwnerIDLen is the longest readable owner id, in bytes
// (tenure.MaxOwnerIDLen).
const MaxOwnerIDLen = 200

// DefaultOwnerID returns "HOST:PID", the host name (at most
// MaxOwnerIDLen−12 bytes of it) and the process id (tenure.DefaultOwnerID).
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

// OwnerSeparator separates the readable id from the nonce in an owner
// string, as in "web-3:4711#9f86d081884c7d65".
const OwnerSeparator = "#"

// NewOwner returns id followed by OwnerSeparator and a 64-bit random nonce
// from crypto/rand in hex. The nonce makes two Lockers exclude each other
// even when they were given the same readable id (identical containers
// share host name and process id). id must be 1 to MaxOwnerIDLen bytes of
// valid UTF-8 without NUL or OwnerSeparator; otherwise the error wraps
// driver.ErrInvalidOwner.
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
// separator.
func OwnerID(owner string) string {
	if i := strings.LastIndex(owner, OwnerSeparator); i >= 0 {
		return owner[:i]
	}
	return owner
}

// ValidateOwnerID checks a readable owner id: 1 to MaxOwnerIDLen bytes of
// valid UTF-8 without NUL or OwnerSeparator. The error wraps
// driver.ErrInvalidOwner.
func ValidateOwnerID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty id", driver.ErrInvalidOwner)
	case len(id) > MaxOwnerIDLen:
		return fmt.Errorf("%w: id of %d bytes, the limit is %d", driver.ErrInvalidOwner, len(id), MaxOwnerIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: id is not valid UTF-8", driver.ErrInvalidOwner)
	case strings.IndexByte(id, 0) >= 0:
		return fmt.Errorf("%w: id contains NUL", driver.ErrInvalidOwner)
	case strings.Contains(id, OwnerSeparator):
		return fmt.Errorf("%w: id contains %q, which separates the id from the nonce", driver.ErrInvalidOwner, OwnerSeparator)
	}
	return nil
}

// KeptOwner returns the owner string under which Lease.ReleaseAfter leaves
// a grant's lease held: the grant's owner string and "/kept".
// Locker.Owns recognises it as the Locker's; nothing renews or releases it.
func KeptOwner(owner string) string { return owner + "/kept" }

// MaxSlots is the largest number of slots of a semaphore
// (tenure.MaxSlots).
const MaxSlots = 1000

// MarkerTTL is the shortest TTL of a semaphore's marker lease (see
// tenure.Semaphore): holders acquire and renew the marker with their slot's
// TTL, or MarkerTTL when that is shorter, so a slot is granted only within
// MarkerTTL·(1−ρ) of its marker acquire, and the number of slots can
// change MarkerTTL after the last holder stopped renewing the marker (or
// the longest slot TTL, or once the last slot kept by ReleaseAfter expired,
// whichever is later).
const MarkerTTL = 30 * time.Second

// SlotName returns the name of the lease that slot (1 to slots) of a
// semaphore of slots slots on resource is kept under: resource +
// "/slot-" + slot + "-of-" + slots, for example "backups/slot-2-of-3".
// Holders of the same semaphore agree on these names; an operator sees
// them in `tenure list`.
func SlotName(resource string, slot, slots int) string {
	return resource + "/slot-" + strconv.Itoa(slot) + "-of-" + strconv.Itoa(slots)
}

// MarkerName returns the name of the marker lease through which the holders
// of a semaphore on resource agree on its number of slots: resource +
// "/slots".
func MarkerName(resource string) string { return resource + "/slots" }

// ParseSlotName splits a lease name made by SlotName into its slot number
// and number of slots; ok is false for other names.
func ParseSlotName(name string) (slot, slots int, ok bool) {
	i := strings.LastIndex(name, "/slot-")
	if i < 0 {
		return 0, 0, false
	}
	a, b, found := strings.Cut(name[i+len("/slot-"):], "-of-")
	if !found {
		return 0, 0, false
	}
	slot, err1 := strconv.Atoi(a)
	slots, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || slots < 1 || slots > MaxSlots || slot < 1 || slot > slots ||
		strconv.Itoa(slot) != a || strconv.Itoa(slots) != b {
		return 0, 0, false
	}
	return slot, slots, true
}

// markerPrefix starts the owner string of a marker lease.
const markerPrefix = "tenure semaphore of "

// MarkerOwner returns the owner string with which every holder of a
// semaphore of slots slots acquires and renews its marker lease (see
// MarkerName): "tenure semaphore of N slots".
func MarkerOwner(slots int) string { return markerPrefix + strconv.Itoa(slots) + " slots" }

// MarkerSlots returns the number of slots (1 to MaxSlots) that a marker's
// owner string names, or 0 when it is not a marker's.
func MarkerSlots(owner string) int {
	rest, ok := strings.CutPrefix(owner, markerPrefix)
	if !ok {
		return 0
	}
	n, ok := strings.CutSuffix(rest, " slots")
	if !ok {
		return 0
	}
	slots, err := strconv.Atoi(n)
	if err != nil || slots < 1 || slots > MaxSlots || strconv.Itoa(slots) != n {
		return 0
	}
	return slots
}

// SharedInfix joins a resource and a registration id in a shared holder's
// lease name.
const SharedInfix = "/shared-"

// SharedIDLen is the length of a registration id: 64 random bits in hex.
const SharedIDLen = 16

// SharedName returns the name of the lease that registers a shared holder
// of resource: resource + "/shared-" + id, where id is 16 lowercase hex
// digits (a random 64-bit number), for example
// "reports/shared-9f86d081884c7d65". An operator sees these names in
// `tenure list`.
func SharedName(resource, id string) string { return resource + SharedInfix + id }

// ParseSharedName returns the resource of a shared holder's lease name made
// by SharedName; ok is false for other names.
func ParseSharedName(name string) (resource string, ok bool) {
	i := strings.LastIndex(name, SharedInfix)
	if i <= 0 {
		return "", false
	}
	id := name[i+len(SharedInfix):]
	if len(id) != SharedIDLen || strings.ToLower(id) != id {
		return "", false
	}
	if _, err := hex.DecodeString(id); err != nil {
		return "", false
	}
	return name[:i], true
}

// SharedGateMark ends the owner string with which a shared request holds
// the gate.
const SharedGateMark = "/shared"

// IsSharedRequest reports whether owner, the owner string of the lease on
// an RWLock's resource (its gate), is a shared request's, which holds the
// gate only while it registers (two store calls), rather than an exclusive
// holder's or an exclusive request's.
func IsSharedRequest(owner string) bool {
	return strings.HasSuffix(owner, SharedGateMark) && strings.Contains(owner, OwnerSeparator)
}
