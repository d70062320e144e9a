package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

func (a *app) newListCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [flags] [PREFIX]",
		Short: "List the leases that are held, optionally only those whose name starts with PREFIX",
		Long: `List prints the live leases, sorted by resource: a table with the columns
RESOURCE, OWNER, TOKEN, TTL and LEFT (the time before the store expires the
lease unless it is renewed), or with --json an array of objects with the
fields resource, held, owner, owner_id, token, ttl_ms and remaining_ms.
With PREFIX, only resources whose name starts with it. Names read from the
store are quoted when they contain spaces or characters that do not print.

The slots of a semaphore ("tenure run --slots N R") are leases named
R/slot-I-of-N; the table shows them under a line such as
"R  (2 of 3 slots held)", and in JSON they have the fields semaphore, slot
and slots.

List never changes the store: it creates no file, table or keyspace, and
opens a file it may only read read-only.

Exit codes: 0, also when no lease is held; 64 for bad arguments; 66 when
there is no tenure store at the URL (nothing was created); 69 when the
store cannot be opened or reached, or is not a tenure store; 74 when the
output cannot be written.`,
		Example: `  tenure list
  tenure list jobs/
  tenure list --json | jq -r '.[] | select(.remaining_ms < 5000) | .resource'`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usage("list: expected at most one PREFIX, got %d arguments; usage: tenure list [--json] [PREFIX]", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			if err := driver.ValidatePrefix(prefix); err != nil {
				return usage("list: prefix %s: %s", quoteName(prefix), errText(err))
			}
			return a.withStore(func(ctx context.Context, s driver.Store) error {
				recs, err := s.List(ctx, prefix)
				if err != nil {
					return storeErr(err, "list %s", quoteName(prefix))
				}
				if asJSON {
					out := make([]leaseJSON, 0, len(recs))
					for _, r := range recs {
						out = append(out, toJSON(r))
					}
					return a.printJSON(out)
				}
				// The slots of each semaphore, whatever their number of slots,
				// under one line that says how many are held.
				bySem := map[string][]tenure.Record{}
				for _, r := range recs {
					if sem, _, _, ok := semaphoreOf(r.Resource); ok {
						bySem[sem] = append(bySem[sem], r)
					}
				}
				// A semaphore's marker (R/slots) without a slot held shows
				// as a semaphore with none held.
				grouped := map[string]bool{}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "RESOURCE\tOWNER\tTOKEN\tTTL\tLEFT")
				for _, r := range recs {
					if sem, _, _, ok := semaphoreOf(r.Resource); ok && !grouped[sem] {
						fmt.Fprintf(tw, "%s\t(%s)\t-\t-\t-\n", display(sem), slotsSummary(bySem[sem]))
						grouped[sem] = true
					} else if sem, n, ok := markerOf(r); ok && !grouped[sem] {
						fmt.Fprintf(tw, "%s\t(0 of %d slots held)\t-\t-\t-\n", display(sem), n)
						grouped[sem] = true
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", display(r.Resource), display(r.Owner), tokenCell(r.Token), durCell(r.TTL), durCell(r.Remaining))
				}
				return tw.Flush()
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array instead of a table")
	return c
}
