package cassandra

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tenure-go/tenure/driver"

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
    write_id bigint,            -- id of the last conditional write (outcome resolution, renewal order)
    waiter text                 -- the waiting acquire that reserved the resource, with its wait as TTL
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
// cfg.Mode if the table does not exist, then waits until every node that is
// up agrees on the schema; nodes that are down are not waited for (they
// take the schema from the others when they return), so Init works with a
// node dead. A table that exists is left alone, except that a native table
// of an earlier version gets the waiter column (reservations,
// driver.Reserver; one ALTER TABLE, which needs the nodes up to agree).
// Init is idempotent and leaves existing data and an existing keyspace's
// replication alone. Run it from one place at a time: Cassandra may
// disagree on a table created concurrently from two clients. It returns an
// error wrapping ErrBadConfig for a configuration that cannot work, and
// driver errors wrapped otherwise. It is bounded by ctx, by the connect
// bound of Open, per statement by Timeout plus 2 s, and by Timeout plus
// 60 s in all for the nodes to agree, which Init waits for after each
// statement (the next statement may go to another node).
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

// schemaAgreementWait bounds how long Init waits, after a schema change,
// for the nodes that are up to agree on the new schema.
const schemaAgreementWait = 60 * time.Second

// driverSchemaWait bounds the wait gocql does on its own after each schema
// change. gocql counts every node in system.peers, down ones included, so
// with one node dead it would wait its whole bound after every statement and
// then report no agreement; tenure waits itself, for the nodes that are up
// (awaitLiveSchemaAgreement), as the DataStax Java driver does.
const driverSchemaWait = 2 * time.Second

func createSchema(ctx context.Context, r resolved, session *gocql.Session) error {
	// A table that exists needs no schema change (but a missing waiter
	// column): Open and Init on a cluster with a node down must not wait
	// for that node.
	qctx, cancel := context.WithTimeout(ctx, r.Timeout)
	var name string
	err := session.Query(`SELECT table_name FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`,
		r.keyspace, r.table).Consistency(gocql.One).ScanContext(qctx, &name)
	cancel()
	if err == nil {
		return addWaiterColumn(ctx, r, session)
	}
	if !errors.Is(err, gocql.ErrNotFound) {
		return fmt.Errorf("cassandra store: create schema: look for table %s.%s: %w", r.keyspace, r.table, err)
	}
	// Every statement waits for the nodes that are up to agree before the
	// next one is sent: the next may go to another coordinator, and one
	// that has not yet applied CREATE KEYSPACE refuses CREATE TABLE with
	// "Keyspace ... doesn't exist". gocql's own wait is cut short
	// (driverSchemaWait) and only logs when it runs out.
	actx, cancel := context.WithTimeout(ctx, r.Timeout+schemaAgreementWait)
	defer cancel()
	for _, st := range schemaStatements(r) {
		qctx, qcancel := context.WithTimeout(actx, r.Timeout+driverSchemaWait)
		err := session.Query(st).Consistency(gocql.All).Idempotent(true).ExecContext(qctx)
		qcancel()
		if err != nil {
			return fmt.Errorf("cassandra store: create schema: %s: %w", firstLine(st), err)
		}
		if err := awaitLiveSchemaAgreement(actx, session, r.Timeout); err != nil {
			return fmt.Errorf("cassandra store: create schema: %s: waiting for schema agreement: %w", firstLine(st), err)
		}
	}
	return nil
}

// addWaiterColumn adds the waiter column (reservations, driver.Reserver)
// to a native table of an earlier version that lacks it, and waits for the
// nodes that are up to agree; a table that has it is left alone.
func addWaiterColumn(ctx context.Context, r resolved, session *gocql.Session) error {
	if r.Mode != ModeNative {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, r.Timeout)
	var name string
	err := session.Query(`SELECT column_name FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ? AND column_name = 'waiter'`,
		r.keyspace, r.table).Consistency(gocql.One).ScanContext(qctx, &name)
	cancel()
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, gocql.ErrNotFound):
		return fmt.Errorf("cassandra store: create schema: look for column waiter of %s.%s: %w", r.keyspace, r.table, err)
	}
	actx, cancel := context.WithTimeout(ctx, r.Timeout+schemaAgreementWait)
	defer cancel()
	st := `ALTER TABLE ` + quote(r.keyspace) + `.` + quote(r.table) + ` ADD waiter text`
	qctx, qcancel := context.WithTimeout(actx, r.Timeout+driverSchemaWait)
	err = session.Query(st).Consistency(gocql.All).Idempotent(true).ExecContext(qctx)
	qcancel()
	if err != nil {
		return fmt.Errorf("cassandra store: create schema: %s: %w", st, err)
	}
	if err := awaitLiveSchemaAgreement(actx, session, r.Timeout); err != nil {
		return fmt.Errorf("cassandra store: create schema: %s: waiting for schema agreement: %w", st, err)
	}
	return nil
}

// awaitLiveSchemaAgreement returns once every node the driver sees up
// reports the same schema version (system.local, asked of each node), or
// with an error when ctx ends first. Nodes that are down are not waited
// for: they take the schema from the others when they come back (Cassandra
// pulls schema from peers on gossip).
func awaitLiveSchemaAgreement(ctx context.Context, session *gocql.Session, timeout time.Duration) error {
	var last error
	for {
		versions := map[string]bool{}
		asked := 0
		last = nil
		for _, h := range session.GetHosts() {
			if !h.IsUp() || h.HostID() == "" {
				continue
			}
			qctx, cancel := context.WithTimeout(ctx, timeout)
			var v gocql.UUID
			err := session.Query(`SELECT schema_version FROM system.local WHERE key = 'local'`).
				SetHostID(h.HostID()).Consistency(gocql.One).ScanContext(qctx, &v)
			cancel()
			if err != nil {
				if h.IsUp() {
					last = fmt.Errorf("node %s: %w", h.ConnectAddress(), err)
				}
				continue
			}
			asked++
			versions[v.String()] = true
		}
		if last == nil && asked > 0 && len(versions) == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %w)", context.Cause(ctx), last)
			}
			return fmt.Errorf("%w: %d schema versions among the %d nodes up", context.Cause(ctx), len(versions), asked)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// schemaProbeKey is the partition checkSchema reads. Reading one partition
// by key (not a LIMIT 1 scan) keeps Open fast and working on tables full of
// tombstones: a scan that meets more than tombstone_failure_threshold
// (100,000 by default, cassandra.yaml) fails with READ_TOO_MANY_TOMBSTONES,
// and deleted or expired leases leave tombstones until gc_grace_seconds.
const schemaProbeKey = "tenure/schema-probe"

// checkSchema reads one partition with every column the mode uses, so that
// a missing keyspace, table or column fails Open with a clear message.
func (s *Store) checkSchema(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	iter := s.session.Query(s.st.find, schemaProbeKey).Consistency(gocql.One).IterContext(qctx)
	err := iter.Close()
	if err == nil {
		return nil
	}
	var inv *gocql.RequestErrInvalid
	if errors.As(err, &inv) {
		// Missing (ErrNoStore), or there but not the mode's table
		// (ErrNotStore)? The schema metadata tells.
		kind := driver.ErrNotStore
		if ks, merr := s.session.KeyspaceMetadata(s.cfg.keyspace); errors.Is(merr, gocql.ErrKeyspaceDoesNotExist) || (merr == nil && ks.Tables[s.cfg.table] == nil) {
			kind = driver.ErrNoStore
		}
		return fmt.Errorf("cassandra store: table %s.%s is missing or lacks the columns of %s mode (create it with cassandra.Init, `tenure init`, or the CQL of cassandra.Schema): %w: %w",
			s.cfg.keyspace, s.cfg.table, s.cfg.Mode, kind, err)
	}
	return fmt.Errorf("cassandra store: check table %s.%s: %w", s.cfg.keyspace, s.cfg.table, err)
}
