package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure/store"
	"github.com/tenure-go/tenure/store/cassandra"
	"github.com/tenure-go/tenure/store/mysql"
)

func (a *app) newSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema cassandra|mysql [STORE-URL]",
		Short: "Print the statements that create a Cassandra or MySQL schema",
		Long: `Print the statements that "tenure init" runs for a Cassandra or a
MySQL/MariaDB store, for operators who create schemas by hand (cqlsh -f,
mysql <). Without a URL: for Cassandra, the keyspace "tenure" with
replication factor 1 (for development), native mode; for MySQL, the tables
tenure_leases and tenure_leases_tokens. With a URL: its keyspace or
database and its table, mode and replication parameters, such as
replication=3 (SimpleStrategy) or replication=dc1:3,dc2:3
(NetworkTopologyStrategy). Exit codes: 0, 64.`,
		Example: `  tenure schema cassandra
  tenure schema cassandra 'cassandra://c1/tenure?replication=dc1:3,dc2:3'
  tenure schema cassandra 'cassandra://c1/jaeger_v1_dc1?mode=jaeger&table=leases' | cqlsh c1
  tenure schema mysql 'mysql://db/locks?table=app_leases' | mysql locks`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) >= 1 && args[0] != "cassandra" && args[0] != "mysql" {
				return usage("schema: usage: tenure schema cassandra|mysql [STORE-URL]; only Cassandra's and MySQL's schemas are printed (tenure init creates the schema of any store)")
			}
			if len(args) < 1 || len(args) > 2 {
				return usage("schema: usage: tenure schema cassandra|mysql [STORE-URL]")
			}
			if len(args) == 2 && args[0] == "cassandra" && !strings.HasPrefix(args[1], "cassandra://") {
				return usage("schema: %q is not a cassandra:// URL", store.Redact(args[1]))
			}
			if len(args) == 2 && args[0] == "mysql" && !strings.HasPrefix(args[1], "mysql://") && !strings.HasPrefix(args[1], "mariadb://") {
				return usage("schema: %q is not a mysql:// URL", store.Redact(args[1]))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if args[0] == "mysql" {
				var cfg mysql.Config
				if len(args) == 2 {
					var err error
					if cfg, err = mysql.ParseURL(args[1]); err != nil {
						return usage("schema: %s", errText(err))
					}
				}
				ddl, err := mysql.Schema(cfg)
				if err != nil {
					return usage("schema: %s", errText(err))
				}
				fmt.Fprint(a.stdout, ddl)
				return nil
			}
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
