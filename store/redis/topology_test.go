package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store"
	tredis "github.com/tenure-go/tenure/store/redis"
	"github.com/tenure-go/tenure/store/storetest"
)

// sentinelURL returns $TENURE_REDIS_SENTINEL (scripts/redis-sentinel) or
// skips the test.
func sentinelURL(tb testing.TB) string {
	return testserver.Env(tb, "TENURE_REDIS_SENTINEL", "redis-sentinel")
}

// clusterURL returns $TENURE_REDIS_CLUSTER (scripts/redis-cluster) or skips
// the test.
func clusterURL(tb testing.TB) string {
	return testserver.Env(tb, "TENURE_REDIS_CLUSTER", "redis-cluster")
}

func openSentinel(tb testing.TB, mod ...func(*tredis.Config)) *tredis.Store {
	return testserver.Open(tb, sentinelURL(tb), tredis.ParseURL, tredis.Open, mod...)
}

func openCluster(tb testing.TB, mod ...func(*tredis.Config)) *tredis.Store {
	return testserver.Open(tb, clusterURL(tb), tredis.ParseURL, tredis.Open, mod...)
}

// TestSentinelConformance: the conformance suite on the master that
// scripts/redis-sentinel's sentinels name.
func TestSentinelConformance(t *testing.T) {
	sentinelURL(t)
	c := cfg
	c.New = func(t *testing.T) driver.Store { return openSentinel(t) }
	c.Reopen = func(t *testing.T, _ driver.Store) driver.Store { return openSentinel(t) }
	storetest.Run(t, c)
}

// TestSentinelConformanceWait: the conformance suite with every grant and
// renewal waiting for both replicas.
func TestSentinelConformanceWait(t *testing.T) {
	sentinelURL(t)
	c := cfg
	wait := func(c *tredis.Config) { c.WaitReplicas = 2 }
	c.New = func(t *testing.T) driver.Store { return openSentinel(t, wait) }
	c.Reopen = func(t *testing.T, _ driver.Store) driver.Store { return openSentinel(t, wait) }
	storetest.Run(t, c)
}

// TestClusterConformance: the conformance suite on scripts/redis-cluster's
// three masters.
func TestClusterConformance(t *testing.T) {
	clusterURL(t)
	c := cfg
	c.New = func(t *testing.T) driver.Store { return openCluster(t) }
	c.Reopen = func(t *testing.T, _ driver.Store) driver.Store { return openCluster(t) }
	storetest.Run(t, c)
}

// TestClusterConformanceWait: the same, every write waiting for the
// master's replica.
func TestClusterConformanceWait(t *testing.T) {
	clusterURL(t)
	c := cfg
	wait := func(c *tredis.Config) { c.WaitReplicas = 1 }
	c.New = func(t *testing.T) driver.Store { return openCluster(t, wait) }
	c.Reopen = func(t *testing.T, _ driver.Store) driver.Store { return openCluster(t, wait) }
	storetest.Run(t, c)
}

// BenchmarkGrantCycle measures an acquire and a release of a free
// resource (two script calls) on the Sentinel set's master and on the
// cluster, without WAIT and with WAIT for one or two replicas: the cost of
// WaitReplicas.
//
//	go test -run '^$' -bench GrantCycle -count 5 ./store/redis
func BenchmarkGrantCycle(b *testing.B) {
	owner, _ := naming.NewOwner("bench")
	cycle := func(b *testing.B, s *tredis.Store) {
		ctx := context.Background()
		r := testserver.Resource(b)
		b.ResetTimer()
		for b.Loop() {
			rec, err := s.Acquire(ctx, r, owner, time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Release(ctx, r, owner, rec.Token); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, n := range []int{0, 1, 2} {
		b.Run(fmt.Sprintf("sentinel/wait_replicas=%d", n), func(b *testing.B) {
			cycle(b, openSentinel(b, func(c *tredis.Config) { c.WaitReplicas = n }))
		})
	}
	for _, n := range []int{0, 1} {
		b.Run(fmt.Sprintf("cluster/wait_replicas=%d", n), func(b *testing.B) {
			cycle(b, openCluster(b, func(c *tredis.Config) { c.WaitReplicas = n }))
		})
	}
}

// TestTopologyURLs: the URL forms of Sentinel and Cluster, and what they
// refuse, without I/O; Open refuses routing options that would read or
// write leases on replicas (go-redis's failover client panics on two of
// them) before any I/O.
func TestTopologyURLs(t *testing.T) {
	c, err := tredis.ParseURL("redis+sentinel://u:pw@h1,h2:26380,[::1]/mymaster/2?sentinel_username=su&sentinel_password=sp&wait_replicas=1&wait_timeout=500ms")
	if err != nil {
		t.Fatal(err)
	}
	f := c.Failover
	if f == nil || c.Options != nil || c.Cluster != nil || f.MasterName != "mymaster" || f.DB != 2 ||
		strings.Join(f.SentinelAddrs, " ") != "h1:26379 h2:26380 [::1]:26379" ||
		f.Username != "u" || f.Password != "pw" || f.SentinelUsername != "su" || f.SentinelPassword != "sp" ||
		c.WaitReplicas != 1 || c.WaitTimeout != 500*time.Millisecond {
		t.Fatalf("sentinel URL parsed as %+v %+v", c, f)
	}
	c, err = tredis.ParseURL("rediss+cluster://u:pw@h1:7000,h2:7001/?prefix=app:&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Cluster
	if cl == nil || strings.Join(cl.Addrs, " ") != "h1:7000 h2:7001" || cl.Username != "u" || cl.Password != "pw" ||
		cl.TLSConfig == nil || cl.DialTimeout != 2*time.Second || c.Prefix != "app:" {
		t.Fatalf("cluster URL parsed as %+v %+v", c, cl)
	}
	for _, bad := range []string{
		"redis+sentinel://h1",                       // no master name
		"redis+sentinel://h1:0/m",                   // port
		"redis+sentinel://h1,,h2/m",                 // empty host
		"redis+cluster://h1/1",                      // a database other than 0
		"redis+cluster://h1?addr=h2:1",              // hosts go in the authority
		"redis+sentinel://h1/m?master_name=x",       // the path names the master
		"redis+sentinel://h1/m?password=x",          // the user information names it
		"redis://h1/0?sentinel_password=x",          // not a sentinel URL
		"redis+cluster://h1?wait_replicas=-1",       // negative
		"redis+cluster://h1?wait_timeout=soon",      // not a duration
		"redis+sentinel://h1/m?route_randomly=true", // panics in go-redis; refused by Open
		"redis+ring://h1",                           // unknown topology
	} {
		cfg, err := tredis.ParseURL(bad)
		if err == nil {
			_, err = tredis.Open(context.Background(), cfg)
		}
		if err == nil {
			t.Errorf("%s: accepted", bad)
		} else if strings.Contains(err.Error(), "sp") && strings.Contains(bad, "sp") {
			t.Errorf("%s: the error shows the password: %v", bad, err)
		}
	}
	cfg := tredis.Config{Cluster: &goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}, Prefix: "a{b}:"}
	if _, err := tredis.Open(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "'{'") {
		t.Errorf("a prefix with a hash tag on a cluster: %v", err)
	}
	if got := store.Redact("redis+sentinel://u:pw@h1,h2/m?sentinel_password=sp"); strings.Contains(got, "pw") || strings.Contains(got, "=sp") {
		t.Errorf("Redact: %s", got)
	}
}

// BenchmarkWaitCost alternates grant cycles (acquire and release of a free
// resource) without WAIT and with WAIT for one and for two replicas on the
// Sentinel set's master, one cycle of each in turn, so that the load of a
// shared machine falls on all three alike, and reports the median cycle of
// each (µs) and the ratios to the cycle without WAIT.
//
//	go test -run '^$' -bench WaitCost -benchtime 3000x ./store/redis
func BenchmarkWaitCost(b *testing.B) {
	owner, _ := naming.NewOwner("bench")
	ctx := context.Background()
	var stores [3]*tredis.Store
	for n := range stores {
		stores[n] = openSentinel(b, func(c *tredis.Config) { c.WaitReplicas = n })
	}
	r := testserver.Resource(b)
	var took [3][]time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		n := i % 3
		start := time.Now()
		rec, err := stores[n].Acquire(ctx, r, owner, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := stores[n].Release(ctx, r, owner, rec.Token); err != nil {
			b.Fatal(err)
		}
		took[n] = append(took[n], time.Since(start))
	}
	b.StopTimer()
	var p50 [3]float64
	for n := range took {
		if len(took[n]) == 0 {
			return
		}
		slices.Sort(took[n])
		p50[n] = float64(took[n][len(took[n])/2].Microseconds())
	}
	b.ReportMetric(p50[0], "µs-p50-no-wait")
	b.ReportMetric(p50[1], "µs-p50-wait1")
	b.ReportMetric(p50[2], "µs-p50-wait2")
	b.ReportMetric(p50[1]/p50[0], "ratio-wait1")
	b.ReportMetric(p50[2]/p50[0], "ratio-wait2")
}
