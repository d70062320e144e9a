package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
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
	storetest.Run(t, c)
}

// TestSentinelConformanceWait: the conformance suite with every grant and
// renewal waiting for both replicas.
func TestSentinelConformanceWait(t *testing.T) {
	sentinelURL(t)
	c := cfg
	c.New = func(t *testing.T) driver.Store {
		return openSentinel(t, func(c *tredis.Config) { c.WaitReplicas = 2 })
	}
	storetest.Run(t, c)
}

// TestClusterConformance: the conformance suite on scripts/redis-cluster's
// three masters.
func TestClusterConformance(t *testing.T) {
	clusterURL(t)
	c := cfg
	c.New = func(t *testing.T) driver.Store { return openCluster(t) }
	storetest.Run(t, c)
}

// TestClusterConformanceWait: the same, every write waiting for the
// master's replica.
func TestClusterConformanceWait(t *testing.T) {
	clusterURL(t)
	c := cfg
	c.New = func(t *testing.T) driver.Store {
		return openCluster(t, func(c *tredis.Config) { c.WaitReplicas = 1 })
	}
	storetest.Run(t, c)
}

// BenchmarkGrantCycle measures an acquire and a release of a free
// resource (two script calls) on the Sentinel set's master and on the
// cluster, without WAIT and with WAIT for one or two replicas: the cost of
// WaitReplicas.
//
//	go test -run '^$' -bench GrantCycle -count 5 ./store/redis
func BenchmarkGrantCycle(b *testing.B) {
	owner, _ := tenure.NewOwner("bench")
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
