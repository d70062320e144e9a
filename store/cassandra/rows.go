package cassandra

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tenure-go/tenure/driver"
)

// row is a lease row as Cassandra returned it, read by column name; absent
// columns and nulls read as zero values. Rows that tenure wrote always have
// a positive token, and an owner (never empty) only together with its TTL;
// rows changed by other tools may not (see Acquire).
type row struct {
	present  bool   // the partition exists
	owner    string // "" when free
	hasOwner bool   // the owner cell is set (tenure never sets it to "")
	token    uint64 // the fencing token; 0 when the cell is null, zero or negative
	// tokenCell is the fencing_token cell as stored, for a condition that
	// must match it: nil when null, else its int64.
	tokenCell any
	ttlMs     int64
	writeID   int64
	// writeIDCell is the write_id cell as stored, for a condition that
	// must match it: nil when null or not in the result, else its int64.
	writeIDCell any
	remaining   int // TTL(owner) in seconds; 0 when unknown or without TTL
	// waiter is the waiter that reserved the resource (driver.Reserver),
	// when the result carried the column and it was set.
	waiter string
}

// newRowMap returns the map a row is scanned into: the columns whose null
// matters get pointer destinations, so that a null reads as a nil pointer
// rather than as a zero value; a column the result did not carry keeps its
// destination (see returned).
func newRowMap() map[string]any {
	return map[string]any{"owner": new(*string), "fencing_token": new(*int64), "write_id": new(*int64), "waiter": new(*string)}
}

// returned reports whether a value of a map from newRowMap came from the
// result (not the destination newRowMap put there).
func returned(v any) bool {
	switch v.(type) {
	case **string, **int64:
		return false
	}
	return true
}

func rowFrom(m map[string]any) row {
	var r row
	for k, v := range m {
		if k != "[applied]" && returned(v) {
			r.present = true
			break
		}
	}
	if o, ok := m["owner"].(*string); ok && o != nil {
		r.owner, r.hasOwner = *o, true
	} else if o, ok := m["owner"].(string); ok && o != "" {
		r.owner, r.hasOwner = o, true
	}
	var t *int64
	switch v := m["fencing_token"].(type) {
	case *int64:
		t = v
	case int64:
		t = &v
	}
	if t != nil {
		r.tokenCell = *t
		if *t > 0 {
			r.token = uint64(*t)
		}
	}
	r.ttlMs = colInt(m["ttl_ms"])
	switch v := m["write_id"].(type) {
	case *int64:
		if v != nil {
			r.writeID, r.writeIDCell = *v, *v
		}
	case int64:
		r.writeID, r.writeIDCell = v, v
	}
	r.remaining = int(colInt(m["remaining"]))
	if returned(m["waiter"]) {
		r.waiter = colString(m["waiter"])
	}
	return r
}

func colString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case *string:
		if v != nil {
			return *v
		}
	}
	return ""
}

func colInt(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case int:
		return int64(v)
	case int32:
		return int64(v)
	case *int64:
		if v != nil {
			return *v
		}
	case *int:
		if v != nil {
			return int64(*v)
		}
	}
	return 0
}

func (r row) String() string {
	tok := "no token"
	switch c := r.tokenCell.(type) {
	case int64:
		tok = fmt.Sprintf("token %d", c)
	}
	switch {
	case !r.present:
		return "no row"
	case !r.hasOwner:
		return "free, last " + tok
	default:
		return fmt.Sprintf("held by %s, %s", quoteForeign(r.owner), tok)
	}
}

// quoteForeign quotes a string read from the cluster for a message, cut to
// 100 bytes: another tool may have written anything there.
func quoteForeign(s string) string {
	if len(s) > 100 {
		return strconv.Quote(s[:100]) + "..."
	}
	return strconv.Quote(s)
}

// record describes the row as a driver.Record.
func (r row) record(resource string) driver.Record {
	rec := driver.Record{Resource: resource, Owner: r.owner, Token: r.token, Remaining: remaining(r.remaining)}
	if r.ttlMs > 0 {
		rec.TTL = time.Duration(r.ttlMs) * time.Millisecond
	}
	return rec
}

func (r row) held(resource string) error {
	return &driver.HeldError{Holder: r.record(resource)}
}

// notHolder is the error of a renewal or release of owner's grant on
// resource that does not hold it; cur is the row the store saw (the
// not-applied result, or a serial read), which names the current holder
// when it has one. It wraps driver.ErrLeaseLost and, with a holder, a
// *driver.HeldError (driver.NotHolder).
func notHolder(op, resource, owner string, cur row, format string, args ...any) error {
	var h *driver.Record
	if cur.hasOwner && cur.owner != owner {
		rec := cur.record(resource)
		h = &rec
	}
	return fmt.Errorf("cassandra store: %s %q: %s: %w", op, resource, fmt.Sprintf(format, args...), driver.NotHolder(h))
}
