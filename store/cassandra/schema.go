package cassandra

import (
	"context"
	"fmt"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// schemaStatements returns the CQL that creates the keyspace and the mode's
// table, idempotently (IF NOT EXISTS).
func schemaStatements(r resolved) []string {
	ks := quote(r.keyspace)
	t := ks + "." + quote(r.table)
	stmts := []string{
		`CREATE KEYSPACE IF NOT EXISTS ` + ks + ` WITH replication = ` + r.Replication.String() + ` AND durable_writes = true`,
	}
	if r.Mode == ModeJaeger {
		// The table of Jaeger's Cassandra schema: one row per lock name,
		// written only with conditional statements and a TTL.
		return append(stmts, `CREATE TABLE IF NOT EXISTS `+t+` (
    name text,
    owner text,
    PRIMARY KEY (name)
) WITH comment = 'Jaeger-compatible leases (tenure jaeger mode): owner is written with the lease TTL; no fencing token'`)
	}
	return append(stmts, `CREATE TABLE IF NOT EXISTS `+t+` (
    resource text PRIMARY KEY,  -- the leased resource
    owner text,                 -- holder, written with the lease TTL; null when free
    fencing_token bigint,       -- last token granted, written without TTL: never goes back
    ttl_ms bigint,              -- the TTL the holder asked for, in ms (with the lease TTL)
    write_id bigint             -- random id of the last conditional write (outcome resolution)
) WITH comment = 'tenure leases (native mode); see docs/cassandra.md'`)
}

// Schema returns the CQL that Init runs for cfg: the keyspace with
// cfg.Replication and the table of cfg.Mode, each statement ending with a
// semicolon, for operators who create schemas by hand (cqlsh -f). Keyspace,
// table and data-center names are validated before they are written into
// the CQL. It returns an error wrapping ErrBadConfig for a configuration
// that cannot work; it needs no Hosts.
func Schema(cfg Config) (string, error) {
	if len(cfg.Hosts) == 0 {
		cfg.Hosts = []string{"localhost"} // not used; lets resolve check the rest
	}
	r, err := cfg.resolve()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- tenure Cassandra schema, %s mode\n", r.Mode)
	if len(r.Replication.DataCenters) == 0 && r.Replication.Factor <= 1 {
		b.WriteString("-- Replication factor 1 is for development: use 3 or more per data center in production.\n")
	}
	for _, st := range schemaStatements(r) {
		b.WriteString(st)
		b.WriteString(";\n")
	}
	return b.String(), nil
}

// Init creates the keyspace (with cfg.Replication) and the table of
// cfg.Mode if they do not exist, then waits until every node agrees on the
// schema. It is idempotent and leaves existing data and an existing
// keyspace's replication alone. Run it from one place at a time: Cassandra
// may disagree on a table created concurrently from two clients. It returns
// an error wrapping ErrBadConfig for a configuration that cannot work, and
// driver errors wrapped otherwise. It is bounded by ctx, by the connect
// bound of Open, and per statement by Timeout plus 60 s, the longest it
// waits for the nodes to agree on a schema change.
func Init(ctx context.Context, cfg Config) error {
	r, err := cfg.resolve()
	if err != nil {
		return err
	}
	session, _, err := connect(ctx, r)
	if err != nil {
		return err
	}
	defer session.Close()
	return createSchema(ctx, r, session)
}

// schemaAgreementWait bounds how long the driver waits, after a schema
// change, for every node to agree on the new schema.
const schemaAgreementWait = 60 * time.Second

func createSchema(ctx context.Context, r resolved, session *gocql.Session) error {
	for _, st := range schemaStatements(r) {
		// A schema change returns once the driver saw every node agree on
		// it, which on a busy or freshly started cluster takes much longer
		// than a query.
		qctx, cancel := context.WithTimeout(ctx, r.Timeout+schemaAgreementWait)
		err := session.Query(st).Consistency(gocql.All).Idempotent(true).ExecContext(qctx)
		cancel()
		if err != nil {
			return fmt.Errorf("cassandra store: create schema: %s: %w", firstLine(st), err)
		}
	}
	actx, cancel := context.WithTimeout(ctx, r.Timeout+schemaAgreementWait)
	defer cancel()
	if err := session.AwaitSchemaAgreement(actx); err != nil {
		return fmt.Errorf("cassandra store: create schema: waiting for schema agreement: %w", err)
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
