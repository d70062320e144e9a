package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
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
	FaultNodeKill       = "node-kill"       // Cassandra cluster: SIGKILL one node, restart it later
	FaultNodePause      = "node-pause"      // Cassandra cluster: SIGSTOP one node for longer than the TTL
	FaultCASTimeout     = "cas-timeout"     // Cassandra cluster: pause two replicas for a moment while holders renew
)

// AllFaults lists every fault kind.
var AllFaults = []string{FaultPause, FaultKill, FaultStuckWriter, FaultProxyDelay, FaultProxyDrop,
	FaultProxyBlackhole, FaultNodeKill, FaultNodePause, FaultCASTimeout}

// storeEnv is how the orchestrator reaches a store and which faults apply.
type storeEnv struct {
	scheme    string
	profile   Profile
	workerURL string
	translate string // Cassandra: node address=proxy address pairs for the workers
	faults    []string
	proxies   []*netfault.Proxy
	nodes     []int  // Cassandra node numbers of scripts/cassandra
	sqlitePth string // SQLite: the database file
	db        *sql.DB
}

func (e *storeEnv) close() {
	for _, p := range e.proxies {
		p.Close()
	}
	if e.db != nil {
		e.db.Close()
	}
}

// setupStore prepares the store named by raw: the schema, and for network
// stores a fault proxy in front of every node.
func setupStore(ctx context.Context, raw string) (*storeEnv, error) {
	su, err := store.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	env := &storeEnv{scheme: su.Scheme(), workerURL: raw}
	switch cfg := su.Config().(type) {
	case *sqlite.Config:
		env.profile = SQLiteProfile
		p := cfg.Path
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := su.Init(ctx); err != nil { // creates the file and schema
			return nil, err
		}
		env.sqlitePth = p
		env.faults = []string{FaultPause, FaultKill, FaultStuckWriter}
		db, err := sql.Open("sqlite", "file:"+p+"?_busy_timeout=30000&_txlock=immediate")
		if err != nil {
			return nil, err
		}
		env.db = db
		return env, nil
	case *cassandra.Config:
		env.profile = CassandraProfile
		port := cfg.Port
		if port == 0 {
			port = 9042
		}
		var pairs []string
		for _, h := range cfg.Hosts {
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
			if len(cfg.Hosts) > 1 {
				env.nodes = append(env.nodes, int(ip.To4()[3])) // node N is 127.0.0.N
			} else {
				env.nodes = append(env.nodes, 0) // the one-node server
			}
		}
		env.translate = strings.Join(pairs, ",")
		// A cluster that has just started may still reset connections
		// while it settles: try the schema a few times.
		for try := 1; ; try++ {
			err = su.Init(ctx)
			if err == nil {
				break
			}
			if try == 5 || !sleep(ctx, 3*time.Second) {
				env.close()
				return nil, err
			}
		}
		env.faults = []string{FaultPause, FaultKill, FaultProxyDelay, FaultProxyDrop, FaultProxyBlackhole}
		if len(cfg.Hosts) >= 3 {
			env.faults = append(env.faults, FaultNodeKill, FaultNodePause, FaultCASTimeout)
		}
		return env, nil
	case *postgres.Config, *etcd.Config, *redis.Config:
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
		env.faults = []string{FaultPause, FaultKill, FaultProxyDelay, FaultProxyDrop, FaultProxyBlackhole}
		return env, nil
	}
	return nil, fmt.Errorf("harness: store %q: the harness knows sqlite:, cassandra://, postgres://, etcd:// and redis:// stores", su.Scheme())
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
