package bench

import (
	"sort"
	"sync/atomic"
)

// Meter counts the requests a store sends to its server, by kind, as the
// driver's own hooks see them (Cassandra's query and batch observers,
// SQLite's commit, rollback and pre-update hooks, pgx's tracer, go-redis's
// hooks, gRPC interceptors): counted, never estimated. Its kinds are fixed
// when it is made; Primary is the one the tables show (LWTs for Cassandra,
// transactions for SQLite, statements for PostgreSQL, commands for Redis,
// RPCs for etcd).
type Meter struct {
	primary string
	kinds   []string
	counts  map[string]*atomic.Int64
}

// NewMeter returns a meter with the given kinds; the first is the primary.
func NewMeter(kinds ...string) *Meter {
	m := &Meter{primary: kinds[0], kinds: kinds, counts: make(map[string]*atomic.Int64, len(kinds))}
	for _, k := range kinds {
		m.counts[k] = new(atomic.Int64)
	}
	return m
}

// Primary returns the meter's main kind.
func (m *Meter) Primary() string {
	if m == nil {
		return ""
	}
	return m.primary
}

// Add counts n requests of kind; unknown kinds are ignored.
func (m *Meter) Add(kind string, n int64) {
	if c := m.counts[kind]; c != nil {
		c.Add(n)
	}
}

// Snapshot returns the counts so far.
func (m *Meter) Snapshot() Counts {
	if m == nil {
		return nil
	}
	out := make(Counts, len(m.kinds))
	for _, k := range m.kinds {
		out[k] = m.counts[k].Load()
	}
	return out
}

// Counts are request counts by kind.
type Counts map[string]int64

// Sub returns c − prev, kind by kind.
func (c Counts) Sub(prev Counts) Counts {
	if c == nil {
		return nil
	}
	out := make(Counts, len(c))
	for k, v := range c {
		out[k] = v - prev[k]
	}
	return out
}

// Kinds returns the kinds in c, sorted.
func (c Counts) Kinds() []string {
	ks := make([]string, 0, len(c))
	for k := range c {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
