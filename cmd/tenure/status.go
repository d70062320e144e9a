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

Exit codes: 0 when the resource is held, 1 when it is free, 64 for bad
arguments, 69 when the store cannot be opened or reached.`,
		Example: `  tenure status nightly-backup
  tenure status nightly-backup --json | jq .owner_id

  # In a script: is anyone running the backup?
  if tenure status nightly-backup >/dev/null; then echo "backup running"; fi`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usage("status: expected one RESOURCE, got %d arguments; usage: tenure status [--json] RESOURCE", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			resource := args[0]
			if err := driver.ValidateResource(resource); err != nil {
				return usage("status: resource %q: %s", resource, errText(err))
			}
			return a.withStore(func(ctx context.Context, s driver.Store) error {
				rec, err := s.Get(ctx, resource)
				if errors.Is(err, tenure.ErrNotHeld) {
					if asJSON {
						if err := a.printJSON(leaseJSON{Resource: resource}); err != nil {
							return err
						}
					} else {
						fmt.Fprintf(a.stdout, "%s is free\n", quoteName(resource))
					}
					return exitWith(exitFree)
				}
				if err != nil {
					return storeErr(err, "status %s", quoteName(resource))
				}
				if asJSON {
					return a.printJSON(toJSON(rec))
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(tw, "resource:\t%s\n", display(rec.Resource))
				fmt.Fprintf(tw, "owner:\t%s\n", display(rec.Owner))
				fmt.Fprintf(tw, "token:\t%s\n", tokenCell(rec.Token))
				fmt.Fprintf(tw, "ttl:\t%s\n", durCell(rec.TTL))
				fmt.Fprintf(tw, "left:\t%s\n", durCell(rec.Remaining))
				return tw.Flush()
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON: resource, held, owner, owner_id, token, ttl_ms, remaining_ms")
	return c
}
