package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure/store"
	"github.com/tenure-go/tenure/store/cassandra"
)

func (a *app) newSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema cassandra [STORE-URL]",
		Short: "Print the CQL that creates the Cassandra keyspace and table",
		Long: `Print the CQL statements that "tenure init" runs for a Cassandra store,
for operators who create schemas by hand (cqlsh -f). Without a URL: the
keyspace "tenure" with replication factor 1 (for development), native
mode. With a cassandra:// URL: its keyspace and its table, mode and
replication parameters, such as replication=3 (SimpleStrategy) or
replication=dc1:3,dc2:3 (NetworkTopologyStrategy). Exit codes: 0, 64.`,
		Example: `  tenure schema cassandra
  tenure schema cassandra 'cassandra://c1/tenure?replication=dc1:3,dc2:3'
  tenure schema cassandra 'cassandra://c1/jaeger_v1_dc1?mode=jaeger&table=leases' | cqlsh c1`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) >= 1 && args[0] != "cassandra" {
				return usage("schema: usage: tenure schema cassandra [STORE-URL]; only Cassandra's schema is printed (tenure init creates the schema of any store)")
			}
			if len(args) < 1 || len(args) > 2 {
				return usage("schema: usage: tenure schema cassandra [STORE-URL]")
			}
			if len(args) == 2 && !strings.HasPrefix(args[1], "cassandra://") {
				return usage("schema: %q is not a cassandra:// URL", store.Redact(args[1]))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			cfg := cassandra.Config{Hosts: []string{"localhost"}}
			if len(args) == 2 {
				var err error
				if cfg, err = cassandra.ParseURL(args[1]); err != nil {
					return usage("schema: %s", errText(err))
				}
			}
			cql, err := cassandra.Schema(cfg)
			if err != nil {
				return usage("schema: %s", errText(err))
			}
			fmt.Fprint(a.stdout, cql)
			return nil
		},
	}
}
