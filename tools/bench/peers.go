package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/tenure-go/tenure"
)

// The peers: the libraries a user would otherwise pick to lock on the same
// server, measured by the peers phase next to tenure on the same server in
// the same run. Each runs the same cycle as tenure's (acquire a free lock
// with a TTL, renew it once, release it), on its own connection or client
// to the server, with the target's meter installed in it through the same
// hooks as the store's, so its requests are counted the same way.
const (
	PeerRedislock         = "redislock"
	PeerRedsync           = "redsync"
	PeerEtcdSessionPerLck = "concurrency-session-per-lock"
	PeerEtcdSharedSession = "concurrency-shared-session"
	PeerPgAdvisory        = "advisory-lock-no-ttl-no-fencing"
	PeerJaeger            = "jaeger-protocol"
	PeerRawLWT            = "raw-lwt"
)

// PeerVersions are the peer libraries' versions (tools/go.mod), for the
// report.
var PeerVersions = map[string]string{
	PeerRedislock:         "github.com/bsm/redislock v0.9.4",
	PeerRedsync:           "github.com/go-redsync/redsync/v4 v4.18.1",
	PeerEtcdSessionPerLck: "go.etcd.io/etcd/client/v3/concurrency v3.6.16",
	PeerEtcdSharedSession: "go.etcd.io/etcd/client/v3/concurrency v3.6.16",
	PeerPglock:            "cirello.io/pglock v1.16.1 (on github.com/lib/pq v1.10.9)",
	PeerPgAdvisory:        "PostgreSQL pg_try_advisory_lock / pg_advisory_unlock (session locks: no TTL, no fencing token)",
	PeerJaeger:            "the statements of Jaeger's Cassandra lock (internal/storage/distributedlock/cassandra)",
	PeerRawLWT:            "one INSERT ... IF NOT EXISTS USING TTL (the floor)",
}

// ---- Redis: bsm/redislock ----

// redislockSystem is github.com/bsm/redislock: Obtain (a script: SET NX PX,
// or PEXPIRE by the same token), Lock.Refresh (a script: GET, PEXPIRE),
// Lock.Release (a script: GET, DEL). No fencing token. Obtain is given no
// retry strategy, so a held lock fails at once with ErrNotObtained.
type redislockSystem struct{ cli redislock.RedisClient }

func (s *redislockSystem) Name() string  { return PeerRedislock }
func (s *redislockSystem) Ops() []string { return []string{OpAcquire, OpRenew, OpRelease} }
func (s *redislockSystem) NewClient(string) (Client, error) {
	return &redislockClient{locker: redislock.New(s.cli)}, nil
}

type redislockClient struct {
	locker *redislock.Client
	lock   *redislock.Lock
	ttl    time.Duration
}

func (c *redislockClient) Acquire(ctx context.Context, resource string, ttl time.Duration) error {
	l, err := c.locker.Obtain(ctx, resource, ttl, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return tenure.ErrHeld
	}
	if err != nil {
		return err
	}
	c.lock, c.ttl = l, ttl
	return nil
}

func (c *redislockClient) Renew(ctx context.Context) error {
	if c.lock == nil {
		return errors.New("bench: renew without a lock")
	}
	err := c.lock.Refresh(ctx, c.ttl, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return tenure.ErrLeaseLost
	}
	return err
}

func (c *redislockClient) Release(ctx context.Context) error {
	if c.lock == nil {
		return errors.New("bench: release without a lock")
	}
	err := c.lock.Release(ctx)
	c.lock = nil
	if errors.Is(err, redislock.ErrLockNotHeld) {
		return tenure.ErrLeaseLost
	}
	return err
}

func (c *redislockClient) Close() {}

// ---- Redis: go-redsync/redsync ----

// redsyncSystem is github.com/go-redsync/redsync/v4 on one Redis (one pool,
// quorum 1): Mutex.TryLockContext (SET NX PX; when that fails, a release
// script for the value it tried), ExtendContext (a script: GET, PEXPIRE),
// UnlockContext (a script: GET, DEL). No fencing token.
type redsyncSystem struct{ rs *redsync.Redsync }

func (s *redsyncSystem) Name() string  { return PeerRedsync }
func (s *redsyncSystem) Ops() []string { return []string{OpAcquire, OpRenew, OpRelease} }
func (s *redsyncSystem) NewClient(string) (Client, error) {
	return &redsyncClient{rs: s.rs}, nil
}

type redsyncClient struct {
	rs *redsync.Redsync
	m  *redsync.Mutex
}

func (c *redsyncClient) Acquire(ctx context.Context, resource string, ttl time.Duration) error {
	m := c.rs.NewMutex(resource, redsync.WithExpiry(ttl), redsync.WithTries(1))
	err := m.TryLockContext(ctx)
	var taken *redsync.ErrTaken
	if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
		return tenure.ErrHeld
	}
	if err != nil {
		return err
	}
	c.m = m
	return nil
}

func (c *redsyncClient) Renew(ctx context.Context) error {
	if c.m == nil {
		return errors.New("bench: renew without a lock")
	}
	ok, err := c.m.ExtendContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return tenure.ErrLeaseLost
	}
	return nil
}

func (c *redsyncClient) Release(ctx context.Context) error {
	if c.m == nil {
		return errors.New("bench: release without a lock")
	}
	ok, err := c.m.UnlockContext(ctx)
	c.m = nil
	if err != nil {
		return err
	}
	if !ok {
		return tenure.ErrLeaseLost
	}
	return nil
}

func (c *redsyncClient) Close() {}

// redisPeers returns the Redis peers on a client of their own to the
// store's server (a copy of the store's options, with the counting hook).
func redisPeers(opts *goredis.Options, m *Meter) ([]System, func() error) {
	o := *opts
	o.MaxRetries = 0 // go-redis's default: what a user of the peers gets
	cli := goredis.NewClient(&o)
	cli.AddHook(redisHook{m})
	return []System{
		&redislockSystem{cli: cli},
		&redsyncSystem{rs: redsync.New(redsyncgoredis.NewPool(cli))},
	}, cli.Close
}

// redisClusterPeers returns the peer on a Redis Cluster: redislock on a
// go-redis cluster client of its own (a copy of the store's options, with
// the counting hook). redislock's lock is one key, so the cluster client
// routes each call to the key's master. redsync is left out: on a cluster
// it would be one Redlock instance on one client, not a peer a user would
// pick.
func redisClusterPeers(opts *goredis.ClusterOptions, m *Meter) ([]System, func() error) {
	o := *opts
	o.MaxRetries = 0 // go-redis's default: what a user of the peer gets
	o.NewClient = nil
	cli := goredis.NewClusterClient(&o)
	cli.AddHook(redisHook{m})
	return []System{&redislockSystem{cli: cli}}, cli.Close
}

// ---- etcd: client/v3/concurrency ----

// etcdMutexSystem is etcd's own lock, concurrency.Mutex. With sharedSession
// false, every lock has a Session of its own, as the package's examples
// do: acquire is NewSession (Grant, and the session's keep-alive stream,
// opened once per client connection) and TryLock (a Txn; when held, a
// Delete of its own key), renew is KeepAliveOnce of the session's lease,
// release is Unlock (a Delete) and Session.Close (Revoke). With
// sharedSession true, each client makes one Session when it starts and all
// its locks use it: acquire is TryLock, renew a KeepAliveOnce of the shared
// lease (which renews every lock of the client at once), release Unlock.
// The lock's key is "/tenure-bench-peers/" + resource + "/" + lease id; its
// create revision orders waiters, and can serve as a fencing token.
type etcdMutexSystem struct {
	cli    *clientv3.Client
	shared bool
}

func (s *etcdMutexSystem) Name() string {
	if s.shared {
		return PeerEtcdSharedSession
	}
	return PeerEtcdSessionPerLck
}

func (s *etcdMutexSystem) Ops() []string { return []string{OpAcquire, OpRenew, OpRelease} }

func etcdSeconds(ttl time.Duration) int { return int((ttl + time.Second - 1) / time.Second) }

// NewClient returns a client; with a shared session, the session is made
// by the client's first acquire, with that acquire's TTL (the bench's
// unmeasured warm-up round makes it).
func (s *etcdMutexSystem) NewClient(string) (Client, error) {
	return &etcdMutexClient{sys: s}, nil
}

// newSession makes a session whose keep-alive outlives ctx (which bounds
// only the grant).
func newSession(ctx context.Context, cli *clientv3.Client, ttl time.Duration) (*concurrency.Session, error) {
	g, err := cli.Grant(ctx, int64(etcdSeconds(ttl)))
	if err != nil {
		return nil, err
	}
	return concurrency.NewSession(cli, concurrency.WithTTL(etcdSeconds(ttl)), concurrency.WithLease(g.ID))
}

type etcdMutexClient struct {
	sys  *etcdMutexSystem
	sess *concurrency.Session // shared, or the current lock's
	m    *concurrency.Mutex
}

func (c *etcdMutexClient) Acquire(ctx context.Context, resource string, ttl time.Duration) error {
	sess := c.sess
	if !c.sys.shared || sess == nil {
		var err error
		if sess, err = newSession(ctx, c.sys.cli, ttl); err != nil {
			return err
		}
		if c.sys.shared {
			c.sess = sess
		}
	}
	m := concurrency.NewMutex(sess, "/tenure-bench-peers/"+resource)
	err := m.TryLock(ctx)
	if err != nil {
		if !c.sys.shared {
			_ = sess.Close()
		}
		if errors.Is(err, concurrency.ErrLocked) {
			return tenure.ErrHeld
		}
		return err
	}
	c.sess, c.m = sess, m
	return nil
}

func (c *etcdMutexClient) Renew(ctx context.Context) error {
	if c.m == nil {
		return errors.New("bench: renew without a lock")
	}
	_, err := c.sys.cli.KeepAliveOnce(ctx, c.sess.Lease())
	return err
}

func (c *etcdMutexClient) Release(ctx context.Context) error {
	if c.m == nil {
		return errors.New("bench: release without a lock")
	}
	err := c.m.Unlock(ctx)
	c.m = nil
	if !c.sys.shared {
		err = errors.Join(err, c.sess.Close())
		c.sess = nil
	}
	return err
}

func (c *etcdMutexClient) Close() {
	if c.sess != nil {
		_ = c.sess.Close()
	}
}

// etcdPeers returns the etcd peers on a client of their own, made from the
// store's client configuration (which carries the counting interceptors).
func etcdPeers(cfg clientv3.Config) ([]System, func() error, error) {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	cfg.Logger = zap.NewNop()
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: etcd client for the peers: %w", err)
	}
	return []System{
		&etcdMutexSystem{cli: cli},
		&etcdMutexSystem{cli: cli, shared: true},
	}, cli.Close, nil
}

// ---- PostgreSQL: advisory locks ----

// pgAdvisorySystem is what many PostgreSQL users do instead of a lease
// table: a session-level advisory lock, pg_try_advisory_lock on a 64-bit
// hash of the name, held by a connection of its own until
// pg_advisory_unlock (or until the connection ends). It is not a lease: it
// has no TTL (nothing to renew: the renew column stays empty), no fencing
// token, and a holder that stops answering keeps the lock as long as its
// connection lives. It is measured as the floor of a lock on PostgreSQL.
type pgAdvisorySystem struct{ cfg *pgx.ConnConfig }

func (s *pgAdvisorySystem) Name() string  { return PeerPgAdvisory }
func (s *pgAdvisorySystem) Ops() []string { return []string{OpAcquire, OpRelease} }

func (s *pgAdvisorySystem) NewClient(string) (Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, s.cfg.Copy())
	if err != nil {
		return nil, fmt.Errorf("bench: advisory-lock connection: %w", err)
	}
	return &pgAdvisoryClient{conn: conn}, nil
}

type pgAdvisoryClient struct {
	conn     *pgx.Conn
	resource string
}

func (c *pgAdvisoryClient) Acquire(ctx context.Context, resource string, _ time.Duration) error {
	var ok bool
	if err := c.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, resource).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return tenure.ErrHeld
	}
	c.resource = resource
	return nil
}

func (c *pgAdvisoryClient) Renew(context.Context) error { return errors.ErrUnsupported }

func (c *pgAdvisoryClient) Release(ctx context.Context) error {
	var ok bool
	if err := c.conn.QueryRow(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, c.resource).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return tenure.ErrLeaseLost
	}
	return nil
}

func (c *pgAdvisoryClient) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.conn.Close(ctx)
}
