// Package redis is a driver.Store on a single Redis server (5.0 or later;
// tested with 7.0), on the master that Redis Sentinel names
// (Config.Failover, redis+sentinel://), or on a Redis Cluster
// (Config.Cluster, redis+cluster://), through
// github.com/redis/go-redis/v9. docs/store-redis.md describes Sentinel and
// Cluster: their URLs, keys, failover behaviour and Config.WaitReplicas.
//
// # Keys
//
// With the default prefix "tenure:", a resource R uses:
//
//	tenure:lease:R   string "<token>:<owner>:<ttl ms>" with a PX expiry: the live lease,
//	                 "+" at the end when someone waits for it
//	tenure:token     integer: the last fencing token granted, for every resource (one key per store)
//	tenure:released  pub/sub channel; the release of a lease marked "+" publishes R
//
// Everything a lease writes lives in its key, which expires or is deleted
// by its release; only the store's one counter stays. Redis keeps no state
// for names no longer in use. List finds the leases with SCAN over the
// lease keys.
//
// Every operation is one Lua script (EVALSHA), which Redis runs atomically:
// acquire (create the lease if absent, with the next token and a PX expiry;
// extend it if the caller already holds it), renew (compare owner and
// token, then PEXPIRE), release (compare owner and token, then DEL, and
// PUBLISH when the lease is marked). Renew and release name the current
// holder when another grant holds the resource (driver.NotHolder).
// RenewBatch renews many leases in one script call. Expiry is decided by
// the Redis server's clock, in milliseconds, never by a client's.
//
// # Fencing tokens
//
// A token is max(the counter + 1, the server's clock in microseconds since
// the Unix epoch), read with TIME inside the script (Redis replicates a
// script's effects, so the value written is what a replica keeps). The
// counter gives a strictly increasing sequence for every resource; the
// clock floor makes it survive lost data: after a Redis that restarted
// empty, a counter deleted by hand, or a failover to a replica that missed
// the last writes, a new token is still above every token granted before,
// unless the server's wall clock is behind the clock that granted them (a
// clock stepped back, or a replica whose clock is behind the old master's
// by more than the time the failover took). Tokens are therefore large
// (about 1.8e15 in 2027) and stay below 2^53.
//
// # What a lost lease costs
//
// Losing data cannot make a token go back, but it can break mutual
// exclusion for a while: a lease key that vanishes (a Redis restarted
// without persistence, FLUSHALL, DEL by hand, eviction, a failover to a
// replica that had not received it) lets another owner be granted at once,
// while the old holder trusts its lease until its next renewal tells it
// (within the renewal interval, TTL/3 by default) or its local deadline
// passes. The resource's fencing check (a token greater than the last it
// saw) is what stops the old holder's writes meanwhile. See docs/stores.md
// for what the operator must not do.
//
// # Why no Redlock
//
// tenure does not offer Redlock (locking on a majority of independent Redis
// masters). Martin Kleppmann's analysis ("How to do distributed locking",
// 2016) showed that it produces no fencing token, so a paused or partitioned
// holder cannot be stopped by the resource it protects, and that its safety
// rests on bounded network delay, bounded pauses and clocks that run at the
// same rate. Salvatore Sanfilippo's reply ("Is Redlock safe?", 2016) argues
// that these timing assumptions are reasonable in practice and that a
// random unique value can serve for check-and-set; tenure's contract
// (docs/design.md) demands a monotonic fencing token, which Redlock cannot
// provide, so tenure keeps to one server and says what that server must
// guarantee.
//
// # Notifications
//
// The Store implements driver.Notifier and driver.Watcher with one pub/sub
// connection per Store that fans out to the waiting Acquires (one waiter
// per release, driver.Hub) and the watching holders. A release publishes
// only when its lease is marked as waited for, so a release nobody waits
// for sends no message to the listening connections of other processes. A
// waiter's acquire attempt that finds the resource held marks the lease in
// the same script (so a release that follows it publishes), an acquire
// granted while other subscribers of the Store wait marks its own lease (so
// its release wakes the next), and Watch marks the lease there (for a
// holder that watches its own lease). The Store also
// listens for expired-key events (__keyevent@DB__:expired), which arrive
// only when the server is configured with notify-keyspace-events including
// "Ex"; without them, a waiter notices an expired lease by its backoff.
//
// # Upgrading from the earlier layout
//
// Earlier versions of this store kept a hash per lease, a counter per
// resource (tenure:token:R, never deleted) and an index of every name ever
// used (tenure:index). This version reads an old lease hash as a live lease
// (so processes of both versions exclude each other), and its tokens start
// above any old counter (the clock floor). When Open finds the old index,
// the Store also keeps each old counter it meets in step with its grants,
// so that a process not yet upgraded never grants a smaller token. Once no
// process of an earlier version runs, RemoveOldLayout deletes the old
// counters and index.
//
// # Sentinel and Cluster
//
// On Sentinel the keys are those above. On a cluster, the lease key is
// <prefix>lease:{R} (the resource is its hash tag) and grants use the
// counter of that key's hash slot, <prefix>token:{T}, T a short tag that
// hashes to the slot (slotTag): a lease and its counter share a slot, so
// every script touches one slot, and tokens strictly increase per resource
// without a cross-slot counter. Script calls go to the slot's master and
// follow MOVED, ASK and TRYAGAIN; RenewBatch and List group keys by slot.
// Releases PUBLISH, which a cluster forwards to every node.
//
// Replication is asynchronous on both: a failover can lose a grant that
// the master acknowledged, and with it exclusion (two holders until the
// first one's next renewal), while tokens keep increasing within the clock
// condition above. Config.WaitReplicas makes each write wait for replicas
// (WAIT) before it is confirmed. A crashed master without persistence
// must stay down until a replica took its place: started again before, it
// is still the master, empty, and its replicas copy it (Redis's
// replication documentation warns of this), which loses every lease it
// had, acknowledged by WAIT or not.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/storeclient"
)

// Defaults.
const (
	// DefaultPrefix starts every key and the channel.
	DefaultPrefix = "tenure:"
	// DefaultDialTimeout bounds connecting when the options set no
	// dial timeout.
	DefaultDialTimeout = 5 * time.Second
)

// MaxTTL is the longest TTL the store accepts (about 146 years; PX takes
// int64 milliseconds).
const MaxTTL = driver.MaxMillisecondTTL

// ttls is the range of TTLs the store keeps: 1 ms to MaxTTL.
var ttls = driver.MillisecondTTLs

// maxBatch bounds the keys of one script call (RenewBatch, List).
const maxBatch = 1000

// ErrEvictionPolicy means that the server's maxmemory-policy may delete
// lease keys (anything but noeviction).
var ErrEvictionPolicy = errors.New("redis store: the server's maxmemory-policy can evict leases; set maxmemory-policy noeviction (or Config.AllowEviction to accept the risk)")

// Config configures a Store. Exactly one of Options, Failover and Cluster
// names the servers.
type Config struct {
	// Options are go-redis's connection options for one server (address,
	// TLS, auth, DB, timeouts, pool). The store sets MaxRetries to -1 (it
	// never lets the client resend a write whose answer was lost: that is
	// an unknown outcome for tenure to resolve) and ContextTimeoutEnabled,
	// and a DialTimeout of DefaultDialTimeout when none is set; so it does
	// with Failover and Cluster.
	Options *redis.Options

	// Failover names a master that Redis Sentinel watches (MasterName,
	// SentinelAddrs; SentinelUsername and SentinelPassword authenticate to
	// the sentinels, Username and Password to the master): go-redis's
	// failover client asks the sentinels for the master's address and
	// follows a failover to the replica they promote. The keys are those
	// of a single server. Replication is asynchronous: see WaitReplicas.
	Failover *redis.FailoverOptions

	// Cluster names some nodes of a Redis Cluster (Addrs); go-redis finds
	// the others and follows MOVED and ASK redirections. The keys of a
	// lease, and the token counter it uses, share one hash slot (see the
	// package documentation). Replication is asynchronous: see
	// WaitReplicas.
	Cluster *redis.ClusterOptions

	// Prefix starts every key and the channel. Default DefaultPrefix. Stores
	// that share leases must share the prefix. With Cluster, it must not
	// hold '{' or '}' (hash tags are the store's).
	Prefix string

	// AllowEviction skips the check that the server's maxmemory-policy is
	// noeviction (see ErrEvictionPolicy). When the server does not allow
	// CONFIG GET, the check is skipped anyway.
	AllowEviction bool

	// WaitReplicas, when above zero, makes every grant, renewal, Keep and
	// release wait, with Redis's WAIT on the connection that wrote it, until that
	// many replicas of the master acknowledged the write (at most
	// WaitTimeout) before it is confirmed. A write that fewer replicas
	// acknowledged in time is not reported done: the error wraps
	// ErrNotReplicated and driver.ErrUnknownOutcome (the master applied it;
	// a failover may lose it), which a Locker resolves by retrying the same
	// grant and frees when it stays unknown (a release not confirmed
	// likewise: a failover could bring the lease back until its TTL ends).
	// Default 0: no WAIT, a grant is
	// confirmed when the master applied it. It costs one replication round
	// trip per write (docs/store-redis.md gives the measured cost). WAIT
	// narrows, but does not close, the window in which a failover loses an
	// acknowledged grant (the Redis documentation of WAIT says so too):
	// Sentinel or the cluster must promote a replica that acknowledged, a
	// replica restarted without persistence forgets, and a master without
	// persistence started again before a replica took its place comes back
	// empty as the master, and its replicas copy it (every lease it had is
	// lost).
	WaitReplicas int

	// WaitTimeout bounds each WAIT. Default DefaultWaitTimeout.
	WaitTimeout time.Duration

	// Hooks are added to the client (go-redis's AddHook) before it sends
	// anything: to count or trace commands. On a cluster they are added to
	// the client of every node, which send every command.
	Hooks []redis.Hook

	// Logger receives what the Store does on its own: the pub/sub
	// connection of release notifications lost, found silent, and
	// re-established (warnings and information). Default slog.Default().
	Logger *slog.Logger
}

// DefaultWaitTimeout is how long a WAIT for replicas lasts at most when
// Config.WaitTimeout is zero.
const DefaultWaitTimeout = time.Second

// ErrNotReplicated means that a write was applied by the master but fewer
// replicas than Config.WaitReplicas acknowledged it within
// Config.WaitTimeout: a failover could lose it. Errors that wrap it wrap
// driver.ErrUnknownOutcome too.
var ErrNotReplicated = errors.New("redis store: the write did not reach the replicas WAIT asked for in time")

// CheckTTL returns an error wrapping driver.ErrInvalidTTL for a TTL that a
// store opened with c cannot keep (below 1 ms or above MaxTTL), without
// I/O.
func (c Config) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// CheckTTL implements driver.TTLChecker, so a Locker rejects a TTL this
// store cannot keep before any I/O.
func (s *Store) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// Store is a driver.Store, driver.BatchRenewer and driver.Notifier on one
// Redis server, a master that Sentinel watches, or a Redis Cluster. It is
// safe for concurrent use.
type Store struct {
	rdb     redis.UniversalClient
	single  *redis.Client        // one server or Sentinel's master; nil on a cluster
	cluster *redis.ClusterClient // nil unless a cluster
	where   string               // the servers, for messages
	dial    time.Duration        // the dial timeout
	prefix  string
	counter string // the store's token counter (not on a cluster: one per slot)
	channel string
	expired string // keyspace event channel of expired keys; "" on a cluster

	waitN       int           // WAIT for this many replicas; 0: no WAIT
	waitTimeout time.Duration // WAIT's timeout

	// compat: the old layout's index existed at Open (see RemoveOldLayout).
	compat atomic.Bool

	// newNode makes a cluster node's client as the cluster client does
	// (Cluster.NewClient, the hooks added).
	newNode func(*redis.Options) *redis.Client
	nodesMu sync.Mutex
	// nodeOptions are the options go-redis gave a cluster node's client,
	// copied before NewClient filled in its defaults (which would turn
	// the MaxRetries of -1 into 3 resends).
	nodeOptions *redis.Options
	nodes       map[string]*redis.Client // cluster nodes by address (MOVED and ASK redirections)

	hub    driver.Hub // release notifications; Listen is listen
	waits  waits      // the resources subscribed to
	closed atomic.Bool
	log    *slog.Logger
	// listenCheck is how long the pub/sub connection may be silent before
	// it is pinged, and how long the ping may take (ListenCheck).
	listenCheck time.Duration
}

// Open connects to the server (the master Sentinel names, or the cluster's
// nodes) and checks that it answers (PING, bounded by the dial and read
// timeouts and ctx) and that its eviction policy cannot delete leases (see
// ErrEvictionPolicy; on a cluster, every master's), and looks for keys of
// the layout of earlier versions (see RemoveOldLayout; not on a cluster).
// Bad configuration returns an error before any I/O.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := checkConfig(&cfg); err != nil {
		return nil, err
	}
	s := &Store{
		prefix:      cfg.Prefix,
		counter:     cfg.Prefix + "token",
		channel:     cfg.Prefix + "released",
		waitN:       cfg.WaitReplicas,
		waitTimeout: cfg.WaitTimeout,
		log:         cfg.Logger,

		listenCheck: ListenCheck,
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.waitTimeout == 0 {
		s.waitTimeout = DefaultWaitTimeout
	}
	var readTimeout time.Duration
	switch {
	case cfg.Options != nil:
		readTimeout = s.newSingleClient(*cfg.Options)
	case cfg.Failover != nil:
		readTimeout = s.newFailoverClient(*cfg.Failover)
	default:
		readTimeout = s.newClusterClient(*cfg.Cluster, cfg.Hooks)
	}
	if err := s.checkWaitTimeout(readTimeout); err != nil {
		s.closeClients()
		return nil, err
	}
	if s.cluster == nil {
		for _, h := range cfg.Hooks {
			s.rdb.AddHook(h)
		}
	}
	s.hub.Listen = s.listen
	bound := s.dial + 3*time.Second
	if readTimeout > 0 {
		bound = s.dial + readTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if err := s.checkServers(pctx, cfg.AllowEviction); err != nil {
		s.closeClients()
		return nil, err
	}
	return s, nil
}

// checkConfig refuses a bad configuration before any I/O, and fills in the
// default prefix.
func checkConfig(cfg *Config) error {
	n := 0
	for _, set := range []bool{cfg.Options != nil, cfg.Failover != nil, cfg.Cluster != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return errors.New("redis store: no options")
	case n > 1:
		return errors.New("redis store: set only one of Options, Failover and Cluster")
	case cfg.Failover != nil && (cfg.Failover.MasterName == "" || len(cfg.Failover.SentinelAddrs) == 0):
		return errors.New("redis store: Failover needs MasterName and SentinelAddrs")
	case cfg.Failover != nil && (cfg.Failover.ReplicaOnly || cfg.Failover.UseDisconnectedReplicas ||
		cfg.Failover.RouteByLatency || cfg.Failover.RouteRandomly):
		// Leases are written and read on the master; go-redis's failover
		// client panics on the two routing options.
		return errors.New("redis store: Failover: replica_only, use_disconnected_replicas, route_by_latency and route_randomly are not allowed (leases live on the master)")
	case cfg.Cluster != nil && len(cfg.Cluster.Addrs) == 0:
		return errors.New("redis store: Cluster needs Addrs")
	case cfg.Cluster != nil && (cfg.Cluster.ReadOnly || cfg.Cluster.RouteByLatency || cfg.Cluster.RouteRandomly):
		return errors.New("redis store: Cluster: read_only, route_by_latency and route_randomly are not allowed (leases are read on the masters)")
	case cfg.WaitReplicas < 0:
		return fmt.Errorf("redis store: WaitReplicas %d is negative", cfg.WaitReplicas)
	case cfg.WaitTimeout < 0:
		return fmt.Errorf("redis store: WaitTimeout %v is negative", cfg.WaitTimeout)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "*?[]\\") {
		return fmt.Errorf("redis store: prefix %q: glob characters are not allowed", cfg.Prefix)
	}
	if cfg.Cluster != nil && strings.ContainsAny(cfg.Prefix, "{}") {
		return fmt.Errorf("redis store: prefix %q: '{' and '}' are not allowed on a cluster", cfg.Prefix)
	}
	return nil
}

// Every client is made so that the store decides every resend: go-redis
// retries nothing (MaxRetries −1), each command is bounded by its context,
// and a dial by DefaultDialTimeout unless set. Each newXClient returns the
// read timeout.

// newSingleClient makes the client of one server.
func (s *Store) newSingleClient(o redis.Options) time.Duration {
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	s.single = redis.NewClient(&o)
	s.rdb, s.where, s.dial = s.single, o.Addr, o.DialTimeout
	s.expired = fmt.Sprintf("__keyevent@%d__:expired", o.DB)
	return o.ReadTimeout
}

// newFailoverClient makes the client of the master that Sentinel names.
func (s *Store) newFailoverClient(o redis.FailoverOptions) time.Duration {
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	s.single = redis.NewFailoverClient(&o)
	s.rdb, s.dial = s.single, o.DialTimeout
	s.where = fmt.Sprintf("master %q of sentinels %s", o.MasterName, strings.Join(o.SentinelAddrs, ","))
	s.expired = fmt.Sprintf("__keyevent@%d__:expired", o.DB)
	return o.ReadTimeout
}

// newClusterClient makes the client of a cluster. Every command goes to a
// node's client: the hooks are theirs, and the options of the first node's
// client are kept for the clients that redirections need (nodeClient).
func (s *Store) newClusterClient(o redis.ClusterOptions, hooks []redis.Hook) time.Duration {
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	newClient := o.NewClient
	if newClient == nil {
		newClient = redis.NewClient
	}
	s.newNode = func(opt *redis.Options) *redis.Client {
		c := newClient(opt)
		for _, h := range hooks {
			c.AddHook(h)
		}
		return c
	}
	o.NewClient = func(opt *redis.Options) *redis.Client {
		s.nodesMu.Lock()
		if s.nodeOptions == nil {
			keep := *opt
			s.nodeOptions = &keep
		}
		s.nodesMu.Unlock()
		return s.newNode(opt)
	}
	s.cluster = redis.NewClusterClient(&o)
	s.rdb, s.dial = s.cluster, o.DialTimeout
	s.where = "cluster " + strings.Join(o.Addrs, ",")
	return o.ReadTimeout
}

// checkWaitTimeout refuses a WAIT whose timeout the read timeout would cut
// short.
func (s *Store) checkWaitTimeout(readTimeout time.Duration) error {
	rt := readTimeout
	if s.waitN == 0 || rt < 0 {
		return nil
	}
	if rt == 0 {
		rt = 3 * time.Second // go-redis's default
	}
	if s.waitTimeout+time.Second > rt {
		return fmt.Errorf("redis store: WaitTimeout %v needs a read timeout at least a second longer (it is %v)", s.waitTimeout, rt)
	}
	return nil
}

// checkServers checks, within ctx, that the servers answer, that a single
// server is not a cluster node, that no eviction policy can delete leases
// (unless allowEviction), and reads the slot map of a cluster, or whether
// a single server has keys of the old layout.
func (s *Store) checkServers(ctx context.Context, allowEviction bool) error {
	fail := func(err error) error {
		return fmt.Errorf("redis store: connect %s: %w", s.where, err)
	}
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fail(err)
	}
	if s.cluster == nil {
		// A node of a cluster serves only its slots: the store's keys
		// would be in slots of other nodes (MOVED) or of two (CROSSSLOT).
		// A server that does not allow INFO is taken as it is.
		if info, err := s.single.Info(ctx, "cluster").Result(); err == nil && strings.Contains(info, "cluster_enabled:1") {
			return fmt.Errorf("redis store: %s is a node of a Redis Cluster: use a redis+cluster:// URL (Config.Cluster)", s.where)
		}
	}
	if !allowEviction {
		if err := s.checkEviction(ctx); err != nil {
			return err
		}
	}
	if s.cluster != nil {
		// The slot map, and a node's client whose options nodeClient
		// copies.
		if _, err := s.cluster.MasterForKey(ctx, s.leaseKey("x")); err != nil {
			return fail(err)
		}
		return nil
	}
	n, err := s.rdb.Exists(ctx, s.oldIndexKey()).Result()
	if err != nil {
		return fail(err)
	}
	s.compat.Store(n > 0)
	return nil
}

// checkEviction returns an error wrapping ErrEvictionPolicy when the
// server, or a master of the cluster, may evict keys. A server that does
// not allow CONFIG GET is taken as it is.
func (s *Store) checkEviction(ctx context.Context) error {
	check := func(ctx context.Context, c *redis.Client) error {
		policy, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err == nil && policy["maxmemory-policy"] != "" && policy["maxmemory-policy"] != "noeviction" {
			return fmt.Errorf("%w (it is %s on %s)", ErrEvictionPolicy, policy["maxmemory-policy"], c.Options().Addr)
		}
		return nil
	}
	if s.cluster != nil {
		return s.cluster.ForEachMaster(ctx, check)
	}
	return check(ctx, s.single)
}

// The store's clients, for tenure's own tests and benchmarks: the client of
// the server or of Sentinel's master (nil on a cluster), and the cluster
// client (nil elsewhere).
func init() {
	storeclient.Register(func(s *Store) *redis.Client { return s.single })
	storeclient.Register(func(s *Store) *redis.ClusterClient { return s.cluster })
}

// Close stops the pub/sub connection and closes the client. It does not
// release leases. It is safe to call more than once.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.hub.Close()
	return s.closeClients()
}

func (s *Store) closeClients() error {
	s.nodesMu.Lock()
	for _, c := range s.nodes {
		c.Close()
	}
	s.nodes = nil
	s.nodesMu.Unlock()
	return s.rdb.Close()
}

// errClosed is what a closed Store answers: it matches
// driver.ErrStoreUnusable, so that a Locker waiting on it stops.
var errClosed = fmt.Errorf("redis store: closed (%w)", driver.ErrStoreUnusable)

// writeErr classifies the error of a write script: an error reply from
// Redis (the script did not run, or failed before writing), a failed dial
// or a pool timeout is definite; any other (a connection that broke, a read
// timeout, ctx ending after the command was sent) leaves the outcome
// unknown.
func writeErr(op, resource string, err error) error {
	e := fmt.Errorf("redis store: %s %q: %w", op, resource, err)
	var rerr redis.Error
	var opErr *net.OpError
	switch {
	case errors.As(err, &rerr),
		errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrClosed),
		errors.As(err, &opErr) && opErr.Op == "dial":
		return e
	}
	return driver.UnknownOutcome(e)
}
