package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) newInitCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "init",
		Short: "Create the store's tables or keyspace where they are missing",
		Long: `Prepare the store named by --store (or $TENURE_STORE) for use: create
PostgreSQL's table and sequence, MySQL's two tables, Cassandra's keyspace
(with the URL's replication parameter) and table, or the SQLite file and
its tables, where they are missing. Existing leases are left alone; init can run again, and
an upgrade of tenure may ask for it (docs/operations.md). etcd and Redis
need no init; run and elect create a SQLite file on first use.

Exit codes: 0 done, 64 bad store URL, 69 the store cannot be reached or the
schema cannot be created, for instance for lack of privileges.`,
		Example: `  tenure --store 'postgres://tenure@db.internal/locks?sslmode=verify-full' init
  tenure --store 'mysql://tenure@db.internal/locks' init
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
