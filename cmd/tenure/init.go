package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) newInitCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "init",
		Short: "Prepare the store for use: create its tables or keyspace if they do not exist",
		Long: `Init prepares the store named by --store (or $TENURE_STORE) for use: it
creates the PostgreSQL leases table, or the Cassandra keyspace (with the
URL's replication parameter) and table, if they do not exist yet. It leaves
existing leases alone and can be run again. A SQLite file needs no init
("tenure run" and "tenure elect" create it on first use); init creates it
and its table, or checks an existing one. status, list and release never
create a store.

Exit codes: 0 done; 64 bad store URL; 69 the store cannot be reached or the
schema cannot be created (for instance for lack of privileges); 74 the
output cannot be written (the store was prepared).`,
		Example: `  tenure --store 'postgres://tenure@db.internal/locks?sslmode=verify-full' init
  tenure --store 'cassandra://c1,c2,c3/tenure?replication=dc1:3' init`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usage("init: takes no arguments; name the store with --store URL")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			u, err := a.parseStore()
			if err != nil {
				return err
			}
			if err := a.makeDefaultDir(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*storeTimeout)
			defer cancel()
			if err := u.Init(ctx); err != nil {
				return storeOpenErr(err)
			}
			fmt.Fprintf(a.stdout, "store ready: %s\n", u)
			return nil
		},
	}
}
