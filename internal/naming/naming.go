// Package naming holds what the holders of a lease, the stores and the
// tenure command must agree on without it being part of tenure's API: how
// an owner string is made and read, and the names, owner strings and
// shortest marker TTL of a semaphore's leases. The layouts are part of the stores' key layout
// (docs/compatibility.md): changing one is a breaking change.
package naming

import (
	"strconv"
	"strings"
	"time"
)

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
