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

func (a *app) newStatusCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status [flags] RESOURCE",
		Short: "Show who holds the lease on RESOURCE",
		Long: `Show the holder of the lease on RESOURCE: its owner, fencing token, TTL and
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
exit-codes).`,
		Example: `  tenure status nightly-backup
  tenure status nightly-backup --json | jq .owner_id

  # In a script: is anyone running the backup?
  if tenure status nightly-backup >/dev/null; then echo "backup running"; fi`,
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
				rec, err := s.Get(ctx, resource)
				held := err == nil
				if err != nil && !errors.Is(err, tenure.ErrNotHeld) {
					return storeErr(err, "status %s", quoteName(resource))
				}
				slots, err := slotHolders(ctx, s, resource)
				if err != nil {
					return storeErr(err, "status %s: list its slots", quoteName(resource))
				}
				markerN, marker, err := semaphoreMarker(ctx, s, resource)
				if err != nil {
					return storeErr(err, "status %s: read its semaphore's marker", quoteName(resource))
				}
				shared, err := sharedHolders(ctx, s, resource)
				if err != nil {
					return storeErr(err, "status %s: list its shared holders", quoteName(resource))
				}
				if !held && len(slots) == 0 && len(shared) == 0 && markerN > 0 {
					// A semaphore with no slot held: free, but its number of
					// slots is fixed until its marker expires.
					if asJSON {
						if err := a.printJSON(leaseJSON{Resource: resource, Slots: markerN}); err != nil {
							return err
						}
					} else {
						until := "until it expires"
						if marker.Remaining > 0 {
							until = "for " + fmtDur(marker.Remaining) + " more"
						}
						fmt.Fprintf(a.stdout, "%s is a semaphore of %d slots, none held; its marker %s keeps the number of slots at %d %s\n",
							quoteName(resource), markerN, quoteName(marker.Resource), markerN, until)
					}
					return exitWith(exitFree)
				}
				if !held && len(slots) == 0 && len(shared) == 0 {
					if asJSON {
						if err := a.printJSON(leaseJSON{Resource: resource}); err != nil {
							return err
						}
					} else {
						fmt.Fprintf(a.stdout, "%s is free\n", quoteName(resource))
					}
					return exitWith(exitFree)
				}
				if asJSON {
					j := leaseJSON{Resource: resource}
					if held {
						j = toJSON(rec)
						if len(shared) > 0 || naming.IsSharedRequest(rec.Owner) {
							j.Mode = gateMode(rec, len(shared))
						}
					}
					if len(shared) > 0 {
						j.Held = true
						j.SharedHeld = len(shared)
						for _, r := range shared {
							j.SharedHolders = append(j.SharedHolders, toJSON(r))
						}
					}
					if len(slots) > 0 {
						j.Held = true
						j.Slots, j.SlotsHeld = slotsOf(slots), len(slots)
						for _, r := range slots {
							j.Holders = append(j.Holders, toJSON(r))
						}
					}
					return a.printJSON(j)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(tw, "resource:\t%s\n", display(resource))
				if held {
					fmt.Fprintf(tw, "owner:\t%s\n", display(rec.Owner))
					if _, value := naming.ParseCandidate(rec.Owner); value != "" {
						fmt.Fprintf(tw, "value:\t%s\n", display(value))
					}
					fmt.Fprintf(tw, "token:\t%s\n", tokenCell(rec.Token))
					fmt.Fprintf(tw, "ttl:\t%s\n", durCell(rec.TTL))
					fmt.Fprintf(tw, "left:\t%s\n", durCell(rec.Remaining))
					if len(shared) > 0 || naming.IsSharedRequest(rec.Owner) {
						fmt.Fprintf(tw, "mode:\t%s\n", gateModeText(rec, len(shared)))
					}
				}
				if len(shared) > 0 {
					fmt.Fprintf(tw, "shared:\t%s\n", sharedSummary(len(shared)))
					for _, r := range shared {
						fmt.Fprintf(tw, "shared holder:\towner %s, token %s, ttl %s, left %s\n",
							display(r.Owner), tokenCell(r.Token), durCell(r.TTL), durCell(r.Remaining))
					}
				}
				if len(slots) > 0 {
					fmt.Fprintf(tw, "slots:\t%s\n", slotsSummary(slots))
					for _, r := range slots {
						_, slot, n, _ := semaphoreOf(r.Resource)
						fmt.Fprintf(tw, "slot %d of %d:\towner %s, token %s, ttl %s, left %s\n",
							slot, n, display(r.Owner), tokenCell(r.Token), durCell(r.TTL), durCell(r.Remaining))
					}
				}
				return tw.Flush()
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object instead of a line")
	return c
}
