package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/store"
	"github.com/tenure-go/tenure/store/cassandra"
	"github.com/tenure-go/tenure/store/etcd"
	"github.com/tenure-go/tenure/store/mysql"
	"github.com/tenure-go/tenure/store/postgres"
	"github.com/tenure-go/tenure/store/redis"
	"github.com/tenure-go/tenure/store/sqlite"
)

// Fault kinds.
const (
	FaultPause          = "pause"           // SIGSTOP the holder for longer than its TTL, then SIGCONT
	FaultKill           = "kill"            // SIGKILL the holder; a fresh worker replaces it
	FaultStuckWriter    = "stuck-writer"    // SQLite: another process holds BEGIN IMMEDIATE for longer than the TTL
	FaultProxyDelay     = "proxy-delay"     // network stores: the proxy delays every chunk both ways
	FaultProxyDrop      = "proxy-drop"      // the proxy forwards requests and drops replies
	FaultProxyBlackhole = "proxy-blackhole" // the proxy drops everything without closing connections
	FaultProxyPartition = "proxy-partition" // a black hole in which new connections never complete either (dials hang)
	FaultLateDelivery   = "late-delivery"   // network stores: the proxy holds requests back and delivers them after their senders gave up
	FaultNodeKill       = "node-kill"       // Cassandra, etcd and Galera clusters, Kubernetes (its etcd, its API server): SIGKILL one node, restart it later
	FaultNodePause      = "node-pause"      // Cassandra, etcd and Galera clusters, Kubernetes (its etcd, its API server): SIGSTOP one node for longer than the TTL
	FaultCASTimeout     = "cas-timeout"     // Cassandra cluster: pause two replicas for a moment while holders renew
	FaultLeaderChange   = "leader-change"   // etcd cluster: move the raft leader to another member
	FaultLeaderPause    = "leader-pause"    // etcd cluster: SIGSTOP the raft leader for longer than the TTL (an open etcd server bug; not a default)
	FaultServerRestart  = "server-restart"  // PostgreSQL, MySQL: SIGKILL the server, start it again (crash recovery)
	FaultStoreReset     = "store-reset"     // SQLite: delete or replace the database file under running workers
	FaultKeyDelete      = "key-delete"      // PostgreSQL, MySQL, etcd, Redis, Kubernetes: an operator deletes lease rows, keys or Lease objects
	FaultStaleRenewal   = "stale-renewal"   // Cassandra: a renewal its holder gave up is applied after a newer one, with the time its coordinator started it
	FaultMasterFailover = "master-failover" // Redis Sentinel and Cluster: SIGKILL a master; a replica takes over; the node rejoins as a replica
	FaultNotifyHalfOpen = "notify-halfopen" // PostgreSQL, etcd, a single Redis server: the proxy silences the workers' notification connections (no FIN, no reset)
)

// AllFaults lists every fault kind.
var AllFaults = []string{FaultPause, FaultKill, FaultStuckWriter, FaultProxyDelay, FaultProxyDrop,
	FaultProxyBlackhole, FaultProxyPartition, FaultLateDelivery, FaultNodeKill, FaultNodePause, FaultCASTimeout, FaultLeaderChange,
	FaultLeaderPause, FaultServerRestart, FaultStoreReset, FaultKeyDelete, FaultStaleRenewal, FaultMasterFailover,
	FaultNotifyHalfOpen}

// OutsideContract lists the fault kinds that break a premise of the lease
// contract, with the reason: the checker reports the overlaps of trusted
// holds they cause as outside the contract instead of as violations (every
// other check still applies: fencing tokens must keep increasing, the store
// must stay linearizable with the deletion as one of its operations).
var OutsideContract = map[string]string{
	FaultKeyDelete: "an operator deleted the lease of a live holder: the store grants the resource again at once, " +
		"and the holder cannot know before its next renewal (up to TTL/3 later) that its lease is gone",
	FaultStoreReset: "an operator deleted or replaced the SQLite file under live holders: the store grants the resource again " +
		"in the new file at once, and a holder cannot know before its next write (up to TTL/3 later) that its file is gone",
	FaultLeaderPause: "etcd's raft leader was stopped for longer than the TTL: when it runs again, its leadership check passes " +
		"(its raft loop ticked) and it proposes the revocation of every etcd lease it thinks expired, which the new leader " +
		"may apply, deleting keys of leases that were kept alive (etcd-io/etcd#15247, open again since the check trusts an " +
		"active member; docs/stores.md); tenure cannot prevent a server from deleting a live key",
}

// storeEnv is how the orchestrator reaches a store and which faults apply.
type storeEnv struct {
	scheme     string
	profile    Profile
	raw        string // the store's URL (the real servers)
	workerURL  string
	workerURLs []string // Galera: one URL per node; worker i uses workerURLs[i % len]
	translate  string   // Cassandra: node address=proxy address pairs for the workers
	faults     []string
	extra      []string // faults that apply but run only when named (-faults)
	proxies    []*netfault.Proxy
	nodes      []int  // node numbers of scripts/cassandra or scripts/etcd
	nodeScript string // the script that kills, restarts, pauses and resumes nodes
	serverCmd  string // scripts/postgres or scripts/mariadb, for server-restart
	sqlitePth  string // SQLite: the database file
	// notifyPattern is what a worker's notification connection sends
	// first (netfault.Proxy.Silence): LISTEN, subscribe; empty for etcd,
	// whose watches share the client's one connection with everything.
	notifyPattern []byte
	closers       []func() error
}

func (e *storeEnv) close() {
	for _, p := range e.proxies {
		p.Close()
	}
	for _, c := range e.closers {
		c() //nolint:errcheck // clean-up
	}
}

// setupStore prepares the store of cfg: the schema, and for network stores
// a fault proxy in front of every node.
func setupStore(ctx context.Context, cfg Config) (*storeEnv, error) {
	raw := cfg.Store
	su, err := store.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	env := &storeEnv{scheme: su.Scheme(), workerURL: raw, raw: raw}
	switch scfg := su.Config().(type) {
	case *sqlite.Config:
		return setupSQLite(ctx, env, su, scfg)
	case *cassandra.Config:
		return setupCassandra(ctx, cfg, env, su, scfg)
	case *etcd.Config:
		return setupEtcd(ctx, cfg, env, su, scfg)
	case *mysql.Config:
		if cfg.Galera != "" {
			return setupGalera(ctx, cfg, env, su)
		}
		return setupOneServer(ctx, cfg, env, su, raw)
	case *redis.Config:
		if scfg.Failover == nil && scfg.Cluster == nil {
			return setupOneServer(ctx, cfg, env, su, raw)
		}
		return setupRedisServers(ctx, cfg, env, su, scfg)
	case *postgres.Config:
		return setupOneServer(ctx, cfg, env, su, raw)
	}
	if k := lookupKind(su.Scheme()); k != nil {
		return setupKind(ctx, k, env, cfg)
	}
	return nil, fmt.Errorf("harness: store %q: the harness knows sqlite:, cassandra://, postgres://, mysql://, etcd:// and redis:// stores, and those of RegisterKind", su.Scheme())
}

// setupSQLite prepares a SQLite file: its directory, the file and its
// schema. Its faults are the processes' and the file's; there is no
// network to put a proxy in.
func setupSQLite(ctx context.Context, env *storeEnv, su *store.URL, scfg *sqlite.Config) (*storeEnv, error) {
	env.profile = SQLiteProfile
	p := scfg.Path
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	if err := su.Init(ctx); err != nil { // creates the file and schema
		return nil, err
	}
	env.sqlitePth = p
	env.faults = []string{FaultPause, FaultKill, FaultStuckWriter, FaultStoreReset}
	return env, nil
}

// setupCassandra puts a proxy in front of each node, on the node's own
// loopback address, makes the schema, and adds the node faults for a
// cluster of three or more.
func setupCassandra(ctx context.Context, cfg Config, env *storeEnv, su *store.URL, scfg *cassandra.Config) (*storeEnv, error) {
	env.profile = CassandraProfile
	env.nodeScript = cfg.CassandraScript
	port := scfg.Port
	if port == 0 {
		port = 9042
	}
	var pairs []string
	for _, h := range scfg.Hosts {
		ip := net.ParseIP(h)
		if ip == nil || !ip.IsLoopback() {
			env.close()
			return nil, fmt.Errorf("harness: cassandra host %q: the harness drives nodes on loopback addresses only (scripts/cassandra)", h)
		}
		target := net.JoinHostPort(h, strconv.Itoa(port))
		// Each node's proxy listens on the node's own address: gocql
		// tells nodes apart by IP address alone, so proxies sharing
		// 127.0.0.1 made it see one node (and take one node's failure
		// for another's).
		p, err := netfault.StartOn(h, target)
		if err != nil {
			env.close()
			return nil, err
		}
		env.proxies = append(env.proxies, p)
		pairs = append(pairs, target+"="+p.Addr())
		if len(scfg.Hosts) > 1 {
			env.nodes = append(env.nodes, int(ip.To4()[3])) // node N is 127.0.0.N
		} else {
			env.nodes = append(env.nodes, 0) // the one-node server
		}
	}
	env.translate = strings.Join(pairs, ",")
	// A cluster that has just started may still reset connections
	// while it settles: try the schema a few times.
	for try := 1; ; try++ {
		err := su.Init(ctx)
		if err == nil {
			break
		}
		if try == 5 || !sleep(ctx, 3*time.Second) {
			env.close()
			return nil, err
		}
	}
	env.faults = []string{FaultPause, FaultKill, FaultProxyDelay, FaultProxyDrop, FaultProxyBlackhole, FaultProxyPartition, FaultLateDelivery, FaultStaleRenewal}
	if len(scfg.Hosts) >= 3 {
		env.faults = append(env.faults, FaultNodeKill, FaultNodePause, FaultCASTimeout)
	}
	return env, nil
}

// setupEtcd puts a proxy in front of each member, on the member's own
// loopback address, points the workers' URL at the proxies, makes the
// schema, and adds the member faults for a cluster of three or more.
func setupEtcd(ctx context.Context, cfg Config, env *storeEnv, su *store.URL, scfg *etcd.Config) (*storeEnv, error) {
	env.profile = EtcdProfile
	// Each member gets a proxy on its own address; the workers' URL
	// names the proxies.
	var eps []string
	for _, ep := range scfg.Client.Endpoints {
		h, _, err := net.SplitHostPort(ep)
		if err != nil {
			env.close()
			return nil, fmt.Errorf("harness: etcd endpoint %q: %w", ep, err)
		}
		ip := net.ParseIP(h)
		if ip == nil || !ip.IsLoopback() {
			env.close()
			return nil, fmt.Errorf("harness: etcd endpoint %q: the harness drives servers on loopback addresses only", ep)
		}
		p, err := netfault.StartOn(h, ep)
		if err != nil {
			env.close()
			return nil, err
		}
		env.proxies = append(env.proxies, p)
		eps = append(eps, p.Addr())
		if len(scfg.Client.Endpoints) > 1 {
			env.nodes = append(env.nodes, int(ip.To4()[3])) // member N is on 127.0.0.N (scripts/etcd start3)
		}
	}
	_, query, _ := strings.Cut(env.raw, "?")
	env.workerURL = "etcd://" + strings.Join(eps, ",")
	if query != "" {
		env.workerURL += "?" + query
	}
	if err := su.Init(ctx); err != nil {
		env.close()
		return nil, err
	}
	env.faults = []string{FaultPause, FaultKill, FaultProxyDelay, FaultProxyDrop, FaultProxyBlackhole, FaultProxyPartition, FaultLateDelivery, FaultKeyDelete,
		FaultNotifyHalfOpen}
	if len(env.nodes) >= 3 {
		if err := checkScriptNodes(ctx, cfg.EtcdScript, scfg.Client.Endpoints); err != nil {
			env.close()
			return nil, err
		}
		env.nodeScript = cfg.EtcdScript
		env.faults = append(env.faults, FaultNodeKill, FaultNodePause, FaultLeaderChange)
		env.extra = []string{FaultLeaderPause}
	}
	return env, nil
}

// setupRedisServers prepares a Redis Sentinel set or a Redis Cluster.
func setupRedisServers(ctx context.Context, cfg Config, env *storeEnv, su *store.URL, scfg *redis.Config) (*storeEnv, error) {
	// A Sentinel set or a cluster: the workers reach the servers
	// directly (the sentinels hand out the master's own address, and a
	// cluster its nodes'), so no network faults. Without a proxy that
	// holds requests back, and with faults that kill masters (a killed
	// server applies nothing later), a call takes effect before it
	// returns or never: no late effects. (A request applied after its
	// caller gave up would make the checker report a violation, never
	// hide one.)
	env.profile = RedisProfile
	env.profile.LateEffects = false
	addrs, script, name := []string(nil), cfg.RedisClusterScript, "TENURE_REDIS_CLUSTER"
	if scfg.Failover != nil {
		addrs, script, name = scfg.Failover.SentinelAddrs, cfg.RedisSentinelScript, "TENURE_REDIS_SENTINEL"
	} else {
		addrs = scfg.Cluster.Addrs
	}
	for _, a := range addrs {
		h, _, err := net.SplitHostPort(a)
		if ip := net.ParseIP(h); err != nil || ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("harness: %s address %q: the harness drives servers on loopback addresses only", env.scheme, a)
		}
	}
	if err := su.Init(ctx); err != nil {
		return nil, err
	}
	env.faults = []string{FaultPause, FaultKill}
	if cfg.ServerFaults {
		v, err := scriptEnv(ctx, script, name)
		if err != nil {
			return nil, fmt.Errorf("harness: server faults: %w", err)
		}
		if vs, _, _ := strings.Cut(v, "?"); !strings.HasPrefix(env.raw, vs) {
			return nil, fmt.Errorf("harness: server faults: %s manages %s, not the store's servers (set its TENURE_* variables, or leave out -server-faults)", script, store.Redact(v))
		}
		env.nodeScript = script
		env.faults = append(env.faults, FaultMasterFailover)
	}
	return env, nil
}

// setupOneServer prepares a PostgreSQL or MySQL server or a single Redis server:
// one proxy in front of it, and the workers' URL points at the proxy.
func setupOneServer(ctx context.Context, cfg Config, env *storeEnv, su *store.URL, raw string) (*storeEnv, error) {
	scfg := su.Config()
	// One server: one proxy in front of it, and the workers' URL
	// points at the proxy.
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("harness: store URL: %w", err)
	}
	env.profile, _ = ProfileFor(u.Scheme)
	if strings.Contains(u.Host, ",") {
		return nil, fmt.Errorf("harness: %s: the harness drives one server (one host in the URL)", u.Scheme)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("harness: %s host %q: the harness drives servers on loopback addresses only", u.Scheme, u.Hostname())
	}
	p, err := netfault.Start(u.Host)
	if err != nil {
		return nil, err
	}
	env.proxies = append(env.proxies, p)
	wu := *u
	wu.Host = p.Addr()
	env.workerURL = wu.String()
	if err := su.Init(ctx); err != nil { // PostgreSQL's table; a check that the others answer
		env.close()
		return nil, err
	}
	env.faults = []string{FaultPause, FaultKill, FaultProxyDelay, FaultProxyDrop, FaultProxyBlackhole, FaultProxyPartition, FaultLateDelivery, FaultKeyDelete}
	// PostgreSQL's listening connection and Redis's pub/sub connection
	// can go half-open on their own; MySQL has no notification
	// connection (its Store polls over the pool), so no notify-halfopen.
	switch scfg.(type) {
	case *postgres.Config:
		env.notifyPattern = []byte("LISTEN")
		env.faults = append(env.faults, FaultNotifyHalfOpen)
	case *redis.Config:
		env.notifyPattern = []byte("subscribe")
		env.faults = append(env.faults, FaultNotifyHalfOpen)
	}
	script, name := cfg.PostgresScript, "TENURE_POSTGRES"
	if _, ok := scfg.(*mysql.Config); ok {
		script, name = cfg.MySQLScript, "TENURE_MYSQL"
	}
	if _, ok := scfg.(*redis.Config); !ok && cfg.ServerFaults {
		if err := checkScriptServer(ctx, script, name, u.Host); err != nil {
			env.close()
			return nil, err
		}
		env.serverCmd = script
		env.faults = append(env.faults, FaultServerRestart)
	}
	return env, nil
}

// setupGalera sets up a MySQL store on a three-node Galera cluster: a
// proxy in front of each node, the workers spread over them, node faults
// through cfg.MySQLScript (whose "env 3" must name the same nodes).
func setupGalera(ctx context.Context, cfg Config, env *storeEnv, su *store.URL) (*storeEnv, error) {
	u, err := url.Parse(env.raw)
	if err != nil {
		return nil, fmt.Errorf("harness: store URL: %w", err)
	}
	env.profile = MySQLProfile
	nodes := strings.Split(cfg.Galera, ",")
	if len(nodes) < 3 || nodes[0] != u.Host {
		return nil, fmt.Errorf("harness: -galera %s: want three nodes, the first the store URL's (%s)", cfg.Galera, u.Host)
	}
	v, err := scriptEnv(ctx, cfg.MySQLScript, "TENURE_GALERA", "3")
	if err != nil {
		return nil, fmt.Errorf("harness: node faults: %w", err)
	}
	if got, want := strings.Split(v, ","), slices.Clone(nodes); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		return nil, fmt.Errorf("harness: node faults: %s env 3 names the nodes %s, -galera %s", cfg.MySQLScript, v, cfg.Galera)
	}
	for i, n := range nodes {
		h, _, err := net.SplitHostPort(n)
		if err != nil {
			return nil, fmt.Errorf("harness: galera node %q: %w", n, err)
		}
		if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("harness: galera node %q: the harness drives nodes on loopback addresses only", n)
		}
		p, err := netfault.Start(n)
		if err != nil {
			env.close()
			return nil, err
		}
		env.proxies = append(env.proxies, p)
		wu := *u
		wu.Host = p.Addr()
		env.workerURLs = append(env.workerURLs, wu.String())
		env.nodes = append(env.nodes, i+1) // scripts/mariadb's node numbers
	}
	env.workerURL = env.workerURLs[0]
	if err := su.Init(ctx); err != nil {
		env.close()
		return nil, err
	}
	env.nodeScript = cfg.MySQLScript
	env.faults = []string{FaultPause, FaultKill, FaultProxyDelay, FaultProxyDrop, FaultProxyBlackhole, FaultProxyPartition, FaultLateDelivery,
		FaultKeyDelete, FaultNodeKill, FaultNodePause}
	return env, nil
}

// openWorkerStore opens the store for a worker. For Cassandra, translate
// ("node=proxy,...") makes the driver reach every node through the
// orchestrator's fault proxy: the contact points are the proxies, and the
// node addresses the cluster announces are translated to them.
func openWorkerStore(ctx context.Context, raw, translate string) (driver.Store, error) {
	su, err := store.Parse(raw)
	if err != nil {
		return nil, err
	}
	cfg, ok := su.Config().(*cassandra.Config)
	if translate == "" || !ok {
		return su.Open(ctx)
	}
	m := map[string]string{}
	var hosts []string
	for _, pair := range strings.Split(translate, ",") {
		from, to, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("harness: bad -translate pair %q", pair)
		}
		m[from] = to
		hosts = append(hosts, to)
	}
	sort.Strings(hosts)
	cfg.Hosts, cfg.Port = hosts, 0
	cfg.ClusterHook = func(c *gocql.ClusterConfig) {
		c.AddressTranslator = gocql.AddressTranslatorFunc(func(addr net.IP, port int) (net.IP, int) {
			to, ok := m[net.JoinHostPort(addr.String(), strconv.Itoa(port))]
			if !ok {
				return addr, port
			}
			h, p, err := net.SplitHostPort(to)
			if err != nil {
				return addr, port
			}
			pn, _ := strconv.Atoi(p)
			return net.ParseIP(h), pn
		})
	}
	return su.Open(ctx)
}

var errNoFault = errors.New("harness: fault does not apply")
