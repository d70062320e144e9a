package cassandra

import (
	"time"

	"github.com/tenure-go/tenure/driver"
)

// TTL limits.
const (
	// MinTTL is the shortest lease TTL the store accepts. Cassandra's TTLs
	// are whole seconds and `USING TTL 0` means "never expires", so a TTL
	// below one second is rejected (driver.ErrInvalidTTL) rather than
	// rounded to 0.
	MinTTL = time.Second

	// MaxTTL is the longest lease TTL the store accepts: one second less
	// than Cassandra's maximum TTL of 630,720,000 s (20 years), because the
	// store writes one second more than asked (see StoreTTL). A server that
	// keeps the Cassandra 4 storage format (Cassandra 5.0's default
	// storage_compatibility_mode) also refuses any TTL whose expiry passes
	// 2038-01-19; the store then returns the server's InvalidRequest error,
	// wrapped.
	MaxTTL = (cassandraMaxTTL - 1) * time.Second

	// MaxExpirySlack bounds how long after its requested TTL a lease whose
	// holder vanished may still be live in the store: the store TTL is the
	// requested TTL rounded up to whole seconds plus one (StoreTTL), and
	// Cassandra expires a cell up to one second before its store TTL is up.
	// For whole-second TTLs the slack is at most one second.
	MaxExpirySlack = 2 * time.Second
)

// cassandraMaxTTL is Cassandra's largest TTL, in seconds
// (org.apache.cassandra.cql3.Attributes.MAX_TTL in Cassandra 5.0.8).
const cassandraMaxTTL = 630_720_000

// StoreTTL returns the TTL, in whole seconds, that the store writes for a
// lease whose holder asked for ttl: the smallest whole number of seconds T
// with T − 1 s ≥ ttl, that is ⌈ttl⌉ + 1 s.
//
// Why the extra second: Cassandra computes a cell's expiry as the write's
// time in whole seconds, truncated, plus the TTL, and treats the cell as live
// while the current whole second is below that expiry (Cassandra 5.0.8:
// ExpirationDateOverflowHandling.computeLocalExpirationTime and
// AbstractCell.isLive; docs/cassandra.md has our measurement). A cell written
// at 12.9 s with TTL 1 expires at 13.0 s, after 0.1 s. The client trusts a
// lease until tSend + TTL·(1−ρ); to keep mutual exclusion the store must keep
// it at least TTL after it applied the write, and T − 1 ≥ TTL guarantees
// that whatever the sub-second offset of the write.
//
// The store's clock is every coordinator's: the write's time comes from the
// node that coordinates the write, and a read's from the node that
// coordinates the read. A node whose clock runs ahead of another's by more
// than the holder's margin (ρ·ttl, plus T − 1 s − ttl) can expire a lease
// before its holder stops trusting it; keep the nodes' clocks in sync
// (docs/cassandra.md, "TTLs").
//
// It returns an error wrapping driver.ErrInvalidTTL for ttl below MinTTL or
// above MaxTTL. A TTL of 0 is never returned.
func StoreTTL(ttl time.Duration) (int, error) {
	if err := ttls.CheckTTL(ttl); err != nil {
		return 0, err
	}
	secs := (ttl + time.Second - 1) / time.Second
	return int(secs) + 1, nil
}

// ttls is the range of TTLs the store keeps: MinTTL to MaxTTL.
var ttls = driver.TTLRange{Min: MinTTL, Max: MaxTTL,
	Why: "Cassandra TTLs are whole seconds, and TTL 0 means never expires"}

// CheckTTL returns an error wrapping driver.ErrInvalidTTL for a TTL that a
// store opened with c cannot keep (see StoreTTL), without I/O.
func (c Config) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// CheckTTL implements driver.TTLChecker, so a Locker rejects a TTL this
// store cannot keep (see StoreTTL) before any I/O.
func (s *Store) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// remaining converts Cassandra's TTL(owner), in whole seconds, to a lower
// bound of the time left: a cell whose TTL() reads n expires within
// (n−1, n] seconds. A lease in its last second reports 1 ms, since a zero
// Remaining means "unknown".
func remaining(ttlSeconds int) time.Duration {
	if ttlSeconds <= 0 {
		return 0
	}
	return max(time.Duration(ttlSeconds-1)*time.Second, time.Millisecond)
}
