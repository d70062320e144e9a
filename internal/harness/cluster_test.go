package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/internal/storeclient"
	"github.com/tenure-go/tenure/store/cassandra"
)

// hostObserver records the coordinator of every query.
type hostObserver struct {
	mu    sync.Mutex
	hosts map[string]string // host id → connect address
}

func (o *hostObserver) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	if q.Host == nil {
		return
	}
	o.mu.Lock()
	o.hosts[q.Host.HostID()] = q.Host.ConnectAddress().String()
	o.mu.Unlock()
}

// TestClusterWorkersReachEveryNode: a worker's store, which reaches every
// node of the three-node cluster through the orchestrator's fault proxies,
// sends its queries to all three nodes, as a direct connection does. Proxies
// that all listened on 127.0.0.1 (with different ports) made gocql, which
// tells hosts apart by IP address, see a single node: every call went to
// that node, and failed with "no hosts available in the pool" while it was
// down.
func TestClusterWorkersReachEveryNode(t *testing.T) {
	cluster := os.Getenv("TENURE_CASSANDRA_CLUSTER")
	if cluster == "" {
		t.Skip("set TENURE_CASSANDRA_CLUSTER=h1:port,h2:port,h3:port (scripts/cassandra start3; eval $(scripts/cassandra env 3))")
	}
	var hosts []string
	port := "9042"
	for _, hp := range strings.Split(cluster, ",") {
		h, p, err := net.SplitHostPort(hp)
		if err != nil {
			t.Fatalf("TENURE_CASSANDRA_CLUSTER: %v", err)
		}
		hosts, port = append(hosts, h), p
	}
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	ks := "tenure_hctest_" + hex.EncodeToString(b)
	raw := "cassandra://" + strings.Join(hosts, ",") + ":" + port + "/" + ks + "?replication=3"

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := setupStore(ctx, Config{Store: raw})
	if err != nil {
		t.Fatal(err)
	}
	defer env.close()
	st, err := openWorkerStore(ctx, env.workerURL, env.translate)
	if err != nil {
		t.Fatal(err)
	}
	s := st.(*cassandra.Store)
	defer s.Close()
	defer storeclient.Of[*gocql.Session](s).Query(`DROP KEYSPACE IF EXISTS ` + ks).WithContext(ctx).Exec()

	// The store tries nodes that were silent for a moment (a loaded
	// machine) last: query until every node was seen, for up to 20 s.
	obs := &hostObserver{hosts: map[string]string{}}
	seen := func() int {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return len(obs.hosts)
	}
	n := 0
	for end := time.Now().Add(20 * time.Second); n < 30 || (seen() < len(hosts) && time.Now().Before(end)); n++ {
		if err := storeclient.Of[*gocql.Session](s).Query(`SELECT release_version FROM system.local`).Observer(obs).WithContext(ctx).Exec(); err != nil {
			t.Logf("query %d: %v", n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.hosts) != len(hosts) {
		t.Fatalf("%d queries through the proxies went to %d node(s) %v; want all %d", n, len(obs.hosts), obs.hosts, len(hosts))
	}
}
