// Package faultinject holds the hooks through which the fault-injection
// harness (internal/harness) makes a store do what only a misbehaving
// server or network would, without widening any store's public API. A
// store package sets its hooks in an init function; a hook left nil means
// the store has no such fault.
package faultinject

import (
	"context"
	"time"

	"github.com/tenure-go/tenure/driver"
)

// CassandraStaleRenewal, set by store/cassandra, sends for the live lease
// of resource the renewal that its holder gave up earlier and that a
// coordinator applies only now, with the time it started: what Cassandra
// does with a renewal it kept retrying under Paxos contention. The write
// carries an id older than the row's and the time that leaves the lease
// about left to live if it applies. It reports whether it applied, and a
// line describing it.
var CassandraStaleRenewal func(ctx context.Context, s driver.Store, resource string, left time.Duration) (applied bool, detail string, err error)
