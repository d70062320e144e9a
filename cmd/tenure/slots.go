package main

// Semaphores in status and list: the slots of a semaphore on R are leases
// named tenure.SlotName(R, i, N), "R/slot-i-of-N".

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
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

// markerPrefix starts the owner string of a semaphore's marker lease
// (tenure.MarkerName): "tenure semaphore of N slots".
const markerPrefix = "tenure semaphore of "

// markerOf returns the semaphore resource and number of slots of a marker
// lease (name tenure.MarkerName(R), owner "tenure semaphore of N slots");
// ok is false for other leases.
func markerOf(rec tenure.Record) (resource string, slots int, ok bool) {
	resource, ok = strings.CutSuffix(rec.Resource, "/slots")
	if !ok || tenure.MarkerName(resource) != rec.Resource {
		return "", 0, false
	}
	n, ok := strings.CutPrefix(rec.Owner, markerPrefix)
	if !ok {
		return "", 0, false
	}
	slots, err := strconv.Atoi(strings.TrimSuffix(n, " slots"))
	if err != nil || slots < 1 || slots > tenure.MaxSlots || !strings.HasSuffix(n, " slots") {
		return "", 0, false
	}
	return resource, slots, true
}

// semaphoreMarker returns the number of slots that the live marker of the
// semaphore on resource names, and the marker, or 0 when there is none.
func semaphoreMarker(ctx context.Context, s driver.Store, resource string) (int, tenure.Record, error) {
	if driver.ValidateResource(tenure.MarkerName(resource)) != nil {
		return 0, tenure.Record{}, nil
	}
	rec, err := s.Get(ctx, tenure.MarkerName(resource))
	if errors.Is(err, tenure.ErrNotHeld) {
		return 0, tenure.Record{}, nil
	}
	if err != nil {
		return 0, tenure.Record{}, err
	}
	_, n, ok := markerOf(rec)
	if !ok {
		return 0, tenure.Record{}, nil
	}
	return n, rec, nil
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
