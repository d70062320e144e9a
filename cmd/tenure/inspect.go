package main

// What the commands that inspect and free leases (status, list, release)
// share: the store opened without creating anything, the JSON form of a
// lease, and safe table cells.

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// leaseJSON is a lease as status and list print it with --json. A slot
// lease of a semaphore has the semaphore's resource, its slot and number of
// slots too, and its marker lease the semaphore's resource and number of
// slots. The status of a semaphore has the number of slots (the marker's
// when no slot is held), the number held and the slot leases (holders).
type leaseJSON struct {
	Resource    string `json:"resource"`
	Held        bool   `json:"held"`
	Owner       string `json:"owner,omitempty"`
	OwnerID     string `json:"owner_id,omitempty"`
	Token       uint64 `json:"token,omitempty"`
	TTLMs       int64  `json:"ttl_ms,omitempty"`
	RemainingMs int64  `json:"remaining_ms,omitempty"`

	Semaphore string      `json:"semaphore,omitempty"`
	Slot      int         `json:"slot,omitempty"`
	Slots     int         `json:"slots,omitempty"`
	SlotsHeld int         `json:"slots_held,omitempty"`
	Holders   []leaseJSON `json:"holders,omitempty"`
}

func toJSON(rec tenure.Record) leaseJSON {
	j := leaseJSON{
		Resource:    rec.Resource,
		Held:        true,
		Owner:       rec.Owner,
		OwnerID:     tenure.OwnerID(rec.Owner),
		Token:       rec.Token,
		TTLMs:       rec.TTL.Milliseconds(),
		RemainingMs: rec.Remaining.Milliseconds(),
	}
	if sem, slot, slots, ok := semaphoreOf(rec.Resource); ok {
		j.Semaphore, j.Slot, j.Slots = sem, slot, slots
	} else if sem, slots, ok := markerOf(rec); ok {
		j.Semaphore, j.Slots = sem, slots
	}
	return j
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fail(exitSoftware, "write JSON: %v", err)
	}
	return nil
}

// withStore opens the store to inspect it (creating nothing) and runs f.
func (a *app) withStore(f func(ctx context.Context, s driver.Store) error) error {
	u, err := a.parseStore()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	s, err := a.openStore(ctx, u, true)
	if err != nil {
		return err
	}
	defer s.Close()
	return f(ctx, s)
}

func tokenCell(t uint64) string {
	if t == 0 {
		return "-"
	}
	return strconv.FormatUint(t, 10)
}

// durCell formats a TTL or a time left; "-" when the store does not say.
func durCell(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmtDur(d)
}
