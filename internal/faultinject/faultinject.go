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

// CassandraLateRenewal, set by store/cassandra, reads the live lease of
// resource now and builds the renewal that the store, on a host whose clock
// is skew ahead, would send for that lease's owner and token now: a
// renewal whose answer was lost. The returned send delivers it later, with
// CQL v5's now_in_seconds at the time it was built, as a coordinator that
// kept retrying its Paxos round under contention applies it: with the time
// it started, from which the owner cell's TTL counts. send reports whether
// the write was applied, and a line describing it. With no live lease, send
// is nil and err is nil.
//
// The owner string may be shared by hosts (a semaphore's marker lease is
// renewed by every holder), so the late write may come from a host other
// than the one whose renewal the row shows last.
var CassandraLateRenewal func(ctx context.Context, s driver.Store, resource string, skew time.Duration) (send func(ctx context.Context) (applied bool, detail string, err error), err error)
