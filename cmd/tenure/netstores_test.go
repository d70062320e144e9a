//go:build linux

package main

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
)

// networkStores returns the store URLs of the real servers named by the
// test environment (scripts/test starts them all), and skips the test when
// there is none.
func networkStores(t *testing.T) map[string]string {
	urls := networkStoresOrNone()
	if len(urls) == 0 {
		t.Skip("no network store configured: set TENURE_CASSANDRA, TENURE_POSTGRES, TENURE_ETCD, TENURE_REDIS or TENURE_MYSQL (scripts/test does)")
	}
	return urls
}

// uniqueResource returns a resource name under a prefix of its own, so that
// tests sharing a server do not meet.
func uniqueResource(name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "cli-test/" + hex.EncodeToString(b[:]) + "/" + name
}

// networkStoresOrNone returns the store URLs of the real servers named by
// the test environment, by store name; none when none is set.
func networkStoresOrNone() map[string]string {
	urls := map[string]string{}
	if h := os.Getenv("TENURE_CASSANDRA"); h != "" {
		urls["cassandra"] = "cassandra://" + h + "/tenure_cli_test"
	}
	if u := os.Getenv("TENURE_POSTGRES"); u != "" {
		urls["postgres"] = u
	}
	if h := os.Getenv("TENURE_ETCD"); h != "" {
		urls["etcd"] = "etcd://" + h
	}
	if u := os.Getenv("TENURE_REDIS"); u != "" {
		urls["redis"] = u
	}
	if u := os.Getenv("TENURE_MYSQL"); u != "" {
		urls["mysql"] = u
	}
	return urls
}

// "tenure run" works on every network store as it does on SQLite: two
// --no-wait started together, exactly one runs; ten waiting processes run
// one at a time with increasing tokens.
func TestRunOnNetworkStores(t *testing.T) {
	for name, url := range networkStores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.store = url
			e.init() // creates the Cassandra keyspace or the PostgreSQL table if needed
			var b [6]byte
			_, _ = rand.Read(b[:])
			prefix := "cli-test/" + hex.EncodeToString(b[:]) + "/"
			t.Run("NoWaitExcludes", func(t *testing.T) { checkNoWaitExcludes(t, e, prefix+"nowait") })
			t.Run("WaitSerializes", func(t *testing.T) { checkWaitSerializes(t, e, prefix+"wait", 5) })
		})
	}
}
