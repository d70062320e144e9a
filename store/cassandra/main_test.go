package cassandra_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/cassandra"
)

// The tests run against a real Cassandra only. TENURE_CASSANDRA=host:port
// selects a single node (scripts/cassandra start; eval $(scripts/cassandra
// env)); TENURE_CASSANDRA_CLUSTER=h1:port,h2:port,h3:port a three-node
// cluster (scripts/cassandra start3). Every run creates its own keyspace,
// tenure_test_<random>, and drops it at the end.

var (
	single  = os.Getenv("TENURE_CASSANDRA")
	cluster = os.Getenv("TENURE_CASSANDRA_CLUSTER")

	runKeyspace = "tenure_test_" + randHex(6)

	setupOnce sync.Once
	setupErr  error
	nativeS   *cassandra.Store
	jaegerS   *cassandra.Store
)

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func TestMain(m *testing.M) {
	// The holder process of testserver.Fairness: arg is the keyspace.
	testserver.FairHolderMain(func(ctx context.Context, keyspace string) (driver.Store, error) {
		host, port, err := net.SplitHostPort(single)
		if err != nil {
			return nil, err
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, err
		}
		return cassandra.Open(ctx, cassandra.Config{Hosts: []string{host}, Port: p, Keyspace: keyspace, Timeout: 5 * time.Second})
	})
	code := m.Run()
	if nativeS != nil {
		// Drop the run's keyspace; a failure only leaves it behind.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		_ = nativeS.Session().Query(`DROP KEYSPACE IF EXISTS ` + runKeyspace).WithContext(ctx).Exec()
		cancel()
		nativeS.Close()
		jaegerS.Close()
	}
	os.Exit(code)
}

// needSingle skips the test unless TENURE_CASSANDRA is set.
func needSingle(t testing.TB) {
	t.Helper()
	if single == "" {
		t.Skip("set TENURE_CASSANDRA=host:port to run against a real Cassandra (scripts/cassandra start; eval $(scripts/cassandra env))")
	}
}

func hostPort(t testing.TB, addr string) (string, int) {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return addr, 9042
	}
	var port int
	if _, err := fmt.Sscan(addr[i+1:], &port); err != nil {
		t.Fatalf("bad address %q", addr)
	}
	return addr[:i], port
}

// baseConfig is the single node's configuration in the run's keyspace.
func baseConfig(t testing.TB, mode cassandra.Mode) cassandra.Config {
	t.Helper()
	needSingle(t)
	host, port := hostPort(t, single)
	return cassandra.Config{
		Hosts:    []string{host},
		Port:     port,
		Keyspace: runKeyspace,
		Mode:     mode,
		Timeout:  5 * time.Second,
	}
}

// stores returns the run's shared stores, creating the keyspace and both
// tables once.
func stores(t testing.TB) (native, jaeger *cassandra.Store) {
	t.Helper()
	needSingle(t)
	setupOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, mode := range []cassandra.Mode{cassandra.ModeNative, cassandra.ModeJaeger} {
			if setupErr = cassandra.Init(ctx, baseConfig(t, mode)); setupErr != nil {
				return
			}
		}
		if nativeS, setupErr = cassandra.Open(ctx, baseConfig(t, cassandra.ModeNative)); setupErr != nil {
			return
		}
		jaegerS, setupErr = cassandra.Open(ctx, baseConfig(t, cassandra.ModeJaeger))
	})
	if setupErr != nil {
		t.Fatalf("setting up keyspace %s: %v", runKeyspace, setupErr)
	}
	return nativeS, jaegerS
}

// openStore opens a store of its own (own session and token cache) in the
// run's keyspace, closed when the test ends.
func openStore(t testing.TB, mode cassandra.Mode, edit func(*cassandra.Config)) *cassandra.Store {
	t.Helper()
	stores(t)
	cfg := baseConfig(t, mode)
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := cassandra.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func owner(t testing.TB, id string) string {
	t.Helper()
	o, err := naming.NewOwner(id)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// resource returns a resource name unique to the test.
func resource(t testing.TB, name string) string {
	return "test/" + strings.ReplaceAll(t.Name(), "/", ".") + "/" + randHex(4) + "/" + name
}

// serialRow reads a native row directly at SERIAL, bypassing the store.
type rawRow struct {
	owner     string
	token     int64
	writeID   int64
	remaining int
	found     bool
}

func serialRow(t testing.TB, s *gocql.Session, table, res string) rawRow {
	t.Helper()
	var r rawRow
	m := map[string]any{}
	if !strings.Contains(table, ".") {
		table = runKeyspace + "." + table
	}
	err := s.Query(`SELECT owner, fencing_token, write_id, TTL(owner) AS remaining FROM `+table+` WHERE resource = ?`, res).
		Consistency(gocql.Serial).MapScan(m)
	if err == gocql.ErrNotFound {
		return r
	}
	if err != nil {
		t.Fatalf("serial read of %q: %v", res, err)
	}
	r.found = true
	r.owner, _ = m["owner"].(string)
	r.token, _ = m["fencing_token"].(int64)
	r.writeID, _ = m["write_id"].(int64)
	r.remaining, _ = m["remaining"].(int)
	return r
}

func serialJaegerOwner(t testing.TB, s *gocql.Session, table, res string) (string, int) {
	t.Helper()
	var owner string
	var ttl int
	err := s.Query(`SELECT owner, TTL(owner) FROM `+runKeyspace+`.`+table+` WHERE name = ?`, res).
		Consistency(gocql.Serial).Scan(&owner, &ttl)
	if err == gocql.ErrNotFound {
		return "", 0
	}
	if err != nil {
		t.Fatalf("serial read of %q: %v", res, err)
	}
	return owner, ttl
}
