package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

func (a *app) newStatusCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status [flags] RESOURCE",
		Short: "Show who holds the lease on RESOURCE",
		Long: `Status shows the holder of the lease on RESOURCE: its owner, fencing token,
TTL and the time left before the store expires it unless it is renewed.
When RESOURCE is a semaphore ("tenure run --slots N"), it shows how many of
its slots are held ("2 of 3 slots held") and who holds each. Names read from
the store are quoted when they contain spaces or characters that do not
print.

With --json it prints an object with the fields resource, held, owner,
owner_id, token, ttl_ms and remaining_ms; for a semaphore, slots,
slots_held and holders (one such object per slot held, with semaphore,
slot and slots).

Status never changes the store: it creates no file, table or keyspace, and
opens a file it may only read read-only.

Exit codes: 0 when the resource is held (a semaphore: at least one slot);
1 when it is free; 64 for bad arguments; 66 when there is no tenure store
at the URL (nothing was created); 69 when the store cannot be opened or
reached, or is not a tenure store; 74 when the output cannot be written.`,
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
				if !held && len(slots) == 0 && markerN > 0 {
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
				if !held && len(slots) == 0 {
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
					fmt.Fprintf(tw, "token:\t%s\n", tokenCell(rec.Token))
					fmt.Fprintf(tw, "ttl:\t%s\n", durCell(rec.TTL))
					fmt.Fprintf(tw, "left:\t%s\n", durCell(rec.Remaining))
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
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON: resource, held, owner, owner_id, token, ttl_ms, remaining_ms")
	return c
}
