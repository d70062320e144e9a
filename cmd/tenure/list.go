package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

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
With PREFIX, only resources whose name starts with it.

Exit codes: 0, also when no lease is held; 64 for bad arguments; 69 when the
store cannot be opened or reached.`,
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
				return usage("list: prefix %q: %s", prefix, errText(err))
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
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "RESOURCE\tOWNER\tTOKEN\tTTL\tLEFT")
				for _, r := range recs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", display(r.Resource), display(r.Owner), tokenCell(r.Token), durCell(r.TTL), durCell(r.Remaining))
				}
				return tw.Flush()
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array instead of a table")
	return c
}
