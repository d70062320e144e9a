package main

// Shared holders in status and list: a shared holder of R ("tenure run
// --shared R") holds a lease named naming.SharedName(R, id),
// "R/shared-<16 hex digits>"; the lease on R itself is the exclusive
// holder's, or a shared run's passing through for two store calls.

import (
	"context"
	"fmt"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

// sharedHolders returns the live leases of the shared holders of
// resource, sorted by name.
func sharedHolders(ctx context.Context, s driver.Store, resource string) ([]tenure.Record, error) {
	if driver.ValidateResource(naming.SharedName(resource, "0000000000000000")) != nil {
		return nil, nil // a name too long to have shared holders
	}
	recs, err := s.List(ctx, resource+"/shared-")
	if err != nil {
		return nil, err
	}
	var out []tenure.Record
	for _, r := range recs {
		if of, ok := naming.ParseSharedName(r.Resource); ok && of == resource {
			out = append(out, r)
		}
	}
	return out, nil
}

// sharedSummary says how many shared holders there are: "1 shared holder",
// "3 shared holders".
func sharedSummary(n int) string {
	if n == 1 {
		return "1 shared holder"
	}
	return fmt.Sprintf("%d shared holders", n)
}

// gateMode says what the holder of a resource's own lease is, for a
// resource with n shared holders: an exclusive holder, an exclusive run
// that waits for the shared holders to end, or a shared run passing
// through.
func gateMode(rec tenure.Record, n int) string {
	switch {
	case naming.IsSharedRequest(rec.Owner):
		return "shared-request"
	case n > 0:
		return "exclusive-waiting"
	}
	return "exclusive"
}

// gateModeText is gateMode for people.
func gateModeText(rec tenure.Record, n int) string {
	switch gateMode(rec, n) {
	case "shared-request":
		return "a shared run passing through (it holds the lease for two store calls)"
	case "exclusive-waiting":
		return fmt.Sprintf("exclusive, waiting for %s to end", sharedSummary(n))
	}
	return "exclusive"
}
