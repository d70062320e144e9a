package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/internal/storeclient"
	"github.com/tenure-go/tenure/store"
	"github.com/tenure-go/tenure/store/cassandra"
)

// BaselineTable is the Jaeger-shaped table (name text PRIMARY KEY, owner
// text) in the Cassandra keyspace on which the Jaeger protocol and the raw
// LWT run. The bench empties it at the start of each run.
const BaselineTable = "tenure_bench_baselines"

// Cassandra request kinds.
const (
	KindLWT     = "lwt"     // conditional statements and conditional batches (one Paxos round each)
	KindSerial  = "serial"  // reads at SERIAL or LOCAL_SERIAL
	KindRequest = "request" // every query and batch sent, attempts included
)

// cqlObserver counts, through the driver's QueryObserver and BatchObserver,
// the requests sent to one keyspace: a statement or a batch with an IF
// clause is one lightweight transaction. Every attempt is observed, so
// retries would be counted too.
type cqlObserver struct {
	keyspace string
	m        *Meter
}

func (o cqlObserver) ours(stmt string) bool {
	return strings.Contains(stmt, `"`+o.keyspace+`".`) || strings.Contains(stmt, " "+o.keyspace+".")
}

func (o cqlObserver) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	if !o.ours(q.Statement) {
		return
	}
	o.m.Add(KindRequest, 1)
	switch {
	case strings.Contains(q.Statement, " IF "):
		o.m.Add(KindLWT, 1)
	case q.Query != nil && (q.Query.GetConsistency() == gocql.Serial || q.Query.GetConsistency() == gocql.LocalSerial):
		o.m.Add(KindSerial, 1)
	}
}

func (o cqlObserver) ObserveBatch(_ context.Context, b gocql.ObservedBatch) {
	if len(b.Statements) == 0 || !o.ours(b.Statements[0]) {
		return
	}
	o.m.Add(KindRequest, 1)
	for _, s := range b.Statements {
		if strings.Contains(s, " IF ") {
			o.m.Add(KindLWT, 1)
			return
		}
	}
}

// openCassandra opens the native store of the URL u (raw, parsed into cfg)
// with the observer installed, creating the keyspace and the native table
// when they do not exist, and a Jaeger-mode store (same URL, its own
// session) on a table of its own, whose session carries the baselines: the
// Jaeger protocol and the raw single LWT.
func openCassandra(ctx context.Context, raw string, u *store.URL, cfg *cassandra.Config, t *Target) error {
	m := NewMeter(KindLWT, KindSerial, KindRequest)
	ks := strings.ToLower(cfg.Keyspace)
	if ks == "" {
		ks = cassandra.DefaultKeyspace
	}
	obs := cqlObserver{keyspace: ks, m: m}
	observe := func(c *cassandra.Config) {
		user := c.ClusterHook
		c.ClusterHook = func(cc *gocql.ClusterConfig) {
			if user != nil {
				user(cc)
			}
			cc.QueryObserver, cc.BatchObserver = obs, obs
		}
	}
	// The baselines get a Jaeger-shaped table of the bench's own, emptied
	// at the start: never a `leases` table that Jaeger collectors may use,
	// and no tombstones left by earlier runs (their deletes and expired
	// rows), which make Cassandra refuse the store's schema check with
	// READ_TOO_MANY_TOMBSTONES once there are more than 100,000.
	observe(cfg)
	cfg.Mode, cfg.Table = cassandra.ModeNative, ""
	if err := u.Init(ctx); err != nil {
		return err
	}
	s, err := u.Open(ctx)
	if err != nil {
		return err
	}
	t.closers = append(t.closers, s.Close)
	ns := s.(*cassandra.Store)
	if err := storeclient.Of[*gocql.Session](ns).Query(`CREATE TABLE IF NOT EXISTS "` + ns.Keyspace() + `"."` + BaselineTable + `" (name text PRIMARY KEY, owner text)`).
		WithContext(ctx).Exec(); err != nil {
		return fmt.Errorf("bench: create the baselines' table: %w", err)
	}
	if err := storeclient.Of[*gocql.Session](ns).AwaitSchemaAgreement(ctx); err != nil {
		return fmt.Errorf("bench: create the baselines' table: %w", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = storeclient.Of[*gocql.Session](ns).Query(`TRUNCATE "` + ns.Keyspace() + `"."` + BaselineTable + `"`).WithContext(tctx).Exec()
	cancel()
	if err != nil {
		return fmt.Errorf("bench: empty the baselines' table: %w", err)
	}
	ju, err := store.Parse(raw)
	if err != nil {
		return err
	}
	jcfg := ju.Config().(*cassandra.Config)
	observe(jcfg)
	jcfg.Mode, jcfg.Table = cassandra.ModeJaeger, BaselineTable
	s, err = ju.Open(ctx)
	if err != nil {
		return err
	}
	t.closers = append(t.closers, s.Close)
	js := s.(*cassandra.Store)
	t.Store, t.Meter = ns, m
	table := `"` + js.Keyspace() + `"."` + js.Table() + `"`
	t.Baselines = []System{
		&lockerSystem{store: ns, fresh: true},
		&jaegerSystem{session: storeclient.Of[*gocql.Session](js), table: table},
		&floorSystem{session: storeclient.Of[*gocql.Session](js), table: table},
	}
	t.Peers = t.Baselines
	return nil
}

// jaegerSystem is a client issuing the statements of Jaeger's Cassandra lock
// (jaegertracing/jaeger, internal/storage/distributedlock/cassandra/lock.go)
// on a Jaeger-shaped table: acquire is INSERT ... IF NOT EXISTS USING TTL;
// renewing a held lease is that INSERT (not applied, the row names this
// owner) followed by UPDATE ... USING TTL ... IF owner = ?; release is
// DELETE ... IF owner = ?. TTLs are whole seconds, truncated, as Jaeger
// does.
type jaegerSystem struct {
	session *gocql.Session
	table   string
	n       atomic.Int64
}

func (j *jaegerSystem) Name() string { return "jaeger-protocol" }

func (j *jaegerSystem) Ops() []string { return []string{OpAcquire, OpRenew, OpRelease} }

func (j *jaegerSystem) NewClient(string) (Client, error) {
	return &jaegerClient{j: j, owner: fmt.Sprintf("jaeger-bench-%d", j.n.Add(1))}, nil
}

type jaegerClient struct {
	j        *jaegerSystem
	owner    string
	resource string
	ttl      time.Duration
}

// acquire is Jaeger's Acquire: insert if not exists; when the row names this
// owner, extend it with the conditional update. It reports whether this
// owner holds the lock.
func (c *jaegerClient) acquire(ctx context.Context, resource string, ttl time.Duration) (bool, error) {
	secs := int(ttl.Seconds())
	var name, owner string
	applied, err := c.j.session.Query(`INSERT INTO `+c.j.table+` (name, owner) VALUES (?, ?) IF NOT EXISTS USING TTL ?`,
		resource, c.owner, secs).WithContext(ctx).ScanCAS(&name, &owner)
	if err != nil {
		return false, err
	}
	if applied {
		return true, nil
	}
	if owner != c.owner {
		return false, nil
	}
	var cur string
	applied, err = c.j.session.Query(`UPDATE `+c.j.table+` USING TTL ? SET owner = ? WHERE name = ? IF owner = ?`,
		secs, c.owner, resource, c.owner).WithContext(ctx).ScanCAS(&cur)
	if err != nil {
		return false, err
	}
	if !applied {
		return false, errors.New("jaeger protocol: this host does not own the resource lock")
	}
	return true, nil
}

func (c *jaegerClient) Acquire(ctx context.Context, resource string, ttl time.Duration) error {
	ok, err := c.acquire(ctx, resource, ttl)
	if err != nil {
		return err
	}
	if !ok {
		return tenure.ErrHeld
	}
	c.resource, c.ttl = resource, ttl
	return nil
}

func (c *jaegerClient) Renew(ctx context.Context) error {
	ok, err := c.acquire(ctx, c.resource, c.ttl)
	if err != nil {
		return err
	}
	if !ok {
		return tenure.ErrLeaseLost
	}
	return nil
}

func (c *jaegerClient) Release(ctx context.Context) error {
	var name, owner string
	applied, err := c.j.session.Query(`DELETE FROM `+c.j.table+` WHERE name = ? IF owner = ?`,
		c.resource, c.owner).WithContext(ctx).ScanCAS(&name, &owner)
	if err != nil {
		return err
	}
	if !applied {
		return tenure.ErrLeaseLost
	}
	return nil
}

func (c *jaegerClient) Close() {}

// floorSystem is the floor: one raw INSERT ... IF NOT EXISTS USING TTL, a
// single lightweight transaction, on a resource never used before.
type floorSystem struct {
	session *gocql.Session
	table   string
	n       atomic.Int64
}

func (f *floorSystem) Name() string { return "raw-lwt" }

func (f *floorSystem) Ops() []string { return []string{OpAcquire} }

func (f *floorSystem) NewClient(string) (Client, error) {
	return &floorClient{f: f, owner: fmt.Sprintf("floor-bench-%d", f.n.Add(1))}, nil
}

type floorClient struct {
	f     *floorSystem
	owner string
	i     int
}

func (c *floorClient) Acquire(ctx context.Context, resource string, ttl time.Duration) error {
	c.i++
	var name, owner string
	applied, err := c.f.session.Query(`INSERT INTO `+c.f.table+` (name, owner) VALUES (?, ?) IF NOT EXISTS USING TTL ?`,
		fmt.Sprintf("%s/%d", resource, c.i), c.owner, int(ttl.Seconds())).WithContext(ctx).ScanCAS(&name, &owner)
	if err != nil {
		return err
	}
	if !applied {
		return tenure.ErrHeld
	}
	return nil
}

func (c *floorClient) Renew(context.Context) error   { return errors.ErrUnsupported }
func (c *floorClient) Release(context.Context) error { return errors.ErrUnsupported }
func (c *floorClient) Close()                        {}
