package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

const statusLong = `Show the holder of the lease on RESOURCE: its owner, fencing token, TTL and
the time left before the store expires it unless it is renewed. For a
semaphore ("tenure run --slots N"), how many of its slots are held and who
holds each; for shared holders ("tenure run --shared"), how many and who.
Status changes nothing and creates no store.

--json prints an object with the fields resource, held, owner, owner_id,
value (what a "tenure elect --value" leader publishes), token, ttl_ms and
remaining_ms; for a semaphore also slots, slots_held and holders (one such
object per slot held, with semaphore, slot and slots); with shared holders
shared_held and shared_holders (objects with mode "shared" and lock), and
mode: exclusive, exclusive-waiting or shared-request (RESOURCE's holder).

Exit codes: 0 held (a semaphore: at least one slot; shared), 1 free (also where
there is no store yet), 69 the store cannot be used (tenure help
exit-codes).`

const statusExample = `  tenure status nightly-backup
  tenure status nightly-backup --json | jq .owner_id

  # In a script: is anyone running the backup?
  if tenure status nightly-backup >/dev/null; then echo "backup running"; fi`

func (a *app) newStatusCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "status [flags] RESOURCE",
		Short:   "Show who holds the lease on RESOURCE",
		Long:    statusLong,
		Example: statusExample,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usage("status: expected one RESOURCE, got %d arguments%s; usage: tenure status [--json] RESOURCE", len(args), dashHint(c, args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			resource := args[0]
			if err := driver.ValidateResource(resource); err != nil {
				return usage("status: resource %s: %s", quoteName(resource), errText(err))
			}
			return a.withStore(func(ctx context.Context, s driver.Store) error {
				st, err := readStatus(ctx, s, resource)
				if err != nil {
					return err
				}
				return a.printStatus(st, asJSON)
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object instead of a line")
	return c
}

// leaseStatus is what tenure status reads about a resource: its lease,
// the slots of a semaphore of that name and its marker, and its shared
// holders.
type leaseStatus struct {
	resource string
	rec      tenure.Record // the lease on resource, when held
	held     bool
	slots    []tenure.Record
	markerN  int           // the number of slots the marker keeps; 0 without a marker
	marker   tenure.Record // the semaphore's marker
	shared   []tenure.Record
}

// readStatus reads the status of resource from s.
func readStatus(ctx context.Context, s driver.Store, resource string) (*leaseStatus, error) {
	st := &leaseStatus{resource: resource}
	var err error
	st.rec, err = s.Get(ctx, resource)
	st.held = err == nil
	if err != nil && !errors.Is(err, tenure.ErrNotHeld) {
		return nil, storeErr(err, "status %s", quoteName(resource))
	}
	if st.slots, err = slotHolders(ctx, s, resource); err != nil {
		return nil, storeErr(err, "status %s: list its slots", quoteName(resource))
	}
	if st.markerN, st.marker, err = semaphoreMarker(ctx, s, resource); err != nil {
		return nil, storeErr(err, "status %s: read its semaphore's marker", quoteName(resource))
	}
	if st.shared, err = sharedHolders(ctx, s, resource); err != nil {
		return nil, storeErr(err, "status %s: list its shared holders", quoteName(resource))
	}
	return st, nil
}

// free reports whether nobody holds the resource, a slot or a share.
func (st *leaseStatus) free() bool { return !st.held && len(st.slots) == 0 && len(st.shared) == 0 }

// printStatus prints st, as JSON or as text, and returns the exit status:
// exitFree (1) when nobody holds the resource.
func (a *app) printStatus(st *leaseStatus, asJSON bool) error {
	switch {
	case st.free() && st.markerN > 0:
		return a.printIdleSemaphore(st, asJSON)
	case st.free():
		if asJSON {
			if err := a.printJSON(leaseJSON{Resource: st.resource}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(a.stdout, "%s is free\n", quoteName(st.resource))
		}
		return exitWith(exitFree)
	case asJSON:
		return a.printJSON(st.json())
	}
	return a.printStatusText(st)
}

// printIdleSemaphore prints a semaphore with no slot held: free, but its
// number of slots is fixed until its marker expires.
func (a *app) printIdleSemaphore(st *leaseStatus, asJSON bool) error {
	if asJSON {
		if err := a.printJSON(leaseJSON{Resource: st.resource, Slots: st.markerN}); err != nil {
			return err
		}
		return exitWith(exitFree)
	}
	until := "until it expires"
	if st.marker.Remaining > 0 {
		until = "for " + fmtDur(st.marker.Remaining) + " more"
	}
	fmt.Fprintf(a.stdout, "%s is a semaphore of %d slots, none held; its marker %s keeps the number of slots at %d %s\n",
		quoteName(st.resource), st.markerN, quoteName(st.marker.Resource), st.markerN, until)
	return exitWith(exitFree)
}

// json is the JSON object of a status in which something is held.
func (st *leaseStatus) json() leaseJSON {
	j := leaseJSON{Resource: st.resource}
	if st.held {
		j = toJSON(st.rec)
		if len(st.shared) > 0 || naming.IsSharedRequest(st.rec.Owner) {
			j.Mode = gateMode(st.rec, len(st.shared))
		}
	}
	if len(st.shared) > 0 {
		j.Held = true
		j.SharedHeld = len(st.shared)
		for _, r := range st.shared {
			j.SharedHolders = append(j.SharedHolders, toJSON(r))
		}
	}
	if len(st.slots) > 0 {
		j.Held = true
		j.Slots, j.SlotsHeld = slotsOf(st.slots), len(st.slots)
		for _, r := range st.slots {
			j.Holders = append(j.Holders, toJSON(r))
		}
	}
	return j
}

// printStatusText prints a status in which something is held as a table.
func (a *app) printStatusText(st *leaseStatus) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "resource:\t%s\n", display(st.resource))
	if rec := st.rec; st.held {
		fmt.Fprintf(tw, "owner:\t%s\n", display(rec.Owner))
		if _, value := naming.ParseCandidate(rec.Owner); value != "" {
			fmt.Fprintf(tw, "value:\t%s\n", display(value))
		}
		fmt.Fprintf(tw, "token:\t%s\n", tokenCell(rec.Token))
		fmt.Fprintf(tw, "ttl:\t%s\n", durCell(rec.TTL))
		fmt.Fprintf(tw, "left:\t%s\n", durCell(rec.Remaining))
		if len(st.shared) > 0 || naming.IsSharedRequest(rec.Owner) {
			fmt.Fprintf(tw, "mode:\t%s\n", gateModeText(rec, len(st.shared)))
		}
	}
	if len(st.shared) > 0 {
		fmt.Fprintf(tw, "shared:\t%s\n", sharedSummary(len(st.shared)))
		for _, r := range st.shared {
			fmt.Fprintf(tw, "shared holder:\towner %s, token %s, ttl %s, left %s\n",
				display(r.Owner), tokenCell(r.Token), durCell(r.TTL), durCell(r.Remaining))
		}
	}
	if len(st.slots) > 0 {
		fmt.Fprintf(tw, "slots:\t%s\n", slotsSummary(st.slots))
		for _, r := range st.slots {
			_, slot, n, _ := semaphoreOf(r.Resource)
			fmt.Fprintf(tw, "slot %d of %d:\towner %s, token %s, ttl %s, left %s\n",
				slot, n, display(r.Owner), tokenCell(r.Token), durCell(r.TTL), durCell(r.Remaining))
		}
	}
	return tw.Flush()
}
