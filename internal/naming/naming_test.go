package naming

import "testing"

func TestParseSlotName(t *testing.T) {
	for name, want := range map[string][2]int{
		"a/slot-2-of-3": {2, 3}, "a/slot-1/slot-10-of-10": {10, 10},
		"a/slot-4-of-3": {0, 0}, "a/slot-01-of-3": {0, 0}, "a/slot-x-of-3": {0, 0}, "a": {0, 0},
		"a/slot-1-of-1001": {0, 0}, "a/slot-0-of-3": {0, 0},
	} {
		slot, slots, ok := ParseSlotName(name)
		if slot != want[0] || slots != want[1] || ok != (want[1] > 0) {
			t.Errorf("ParseSlotName(%q) = %d, %d, %v; want %d, %d", name, slot, slots, ok, want[0], want[1])
		}
	}
	if name := SlotName("backups", 2, 3); name != "backups/slot-2-of-3" {
		t.Errorf("SlotName = %q", name)
	}
}

func TestMarkerSlots(t *testing.T) {
	for owner, want := range map[string]int{
		MarkerOwner(3): 3, MarkerOwner(MaxSlots): MaxSlots,
		"tenure semaphore of 3": 0, "tenure semaphore of 03 slots": 0, "tenure semaphore of 0 slots": 0,
		"tenure semaphore of 1001 slots": 0, "web-3#abc.1": 0, "": 0,
	} {
		if got := MarkerSlots(owner); got != want {
			t.Errorf("MarkerSlots(%q) = %d; want %d", owner, got, want)
		}
	}
	if name := MarkerName("backups"); name != "backups/slots" {
		t.Errorf("MarkerName = %q", name)
	}
}
