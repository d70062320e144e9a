package main

// Semaphores in status and list: the slots of a semaphore on R are leases
// named tenure.SlotName(R, i, N), "R/slot-i-of-N".

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// semaphoreOf returns the semaphore resource, slot and number of slots of a
// slot lease's name; ok is false for other names.
func semaphoreOf(name string) (resource string, slot, slots int, ok bool) {
	slot, slots, ok = tenure.ParseSlotName(name)
	if !ok {
		return "", 0, 0, false
	}
	return name[:strings.LastIndex(name, "/slot-")], slot, slots, true
}

// slotHolders returns the live slot leases of the semaphore on resource,
// whatever their number of slots, sorted by slot.
func slotHolders(ctx context.Context, s driver.Store, resource string) ([]tenure.Record, error) {
	recs, err := s.List(ctx, resource+"/slot-")
	if err != nil {
		return nil, err
	}
	var out []tenure.Record
	for _, r := range recs {
		if sem, _, _, ok := semaphoreOf(r.Resource); ok && sem == resource {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		_, si, ni, _ := semaphoreOf(out[i].Resource)
		_, sj, nj, _ := semaphoreOf(out[j].Resource)
		if ni != nj {
			return ni < nj
		}
		return si < sj
	})
	return out, nil
}

// slotsSummary says how many slots are held, such as "2 of 3 slots held",
// for holders that may disagree on the number of slots ("1 of 3 slots
// held; 1 of 2 slots held").
func slotsSummary(holders []tenure.Record) string {
	counts := map[int]int{}
	var ns []int
	for _, r := range holders {
		_, _, n, _ := semaphoreOf(r.Resource)
		if counts[n] == 0 {
			ns = append(ns, n)
		}
		counts[n]++
	}
	sort.Ints(ns)
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = fmt.Sprintf("%d of %d slots held", counts[n], n)
	}
	s := strings.Join(parts, "; ")
	if len(ns) > 1 {
		s += " (the holders disagree on the number of slots)"
	}
	return s
}

// slotsOf returns the number of slots that every holder agrees on, or 0.
func slotsOf(holders []tenure.Record) int {
	n := 0
	for _, r := range holders {
		_, _, m, _ := semaphoreOf(r.Resource)
		if n != 0 && m != n {
			return 0
		}
		n = m
	}
	return n
}
