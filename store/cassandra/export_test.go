package cassandra

import (
	"context"
	"time"
)

// SetClock sets the clock of s's token floor and holder checks (tests only;
// before s is used).
func SetClock(s *Store, now func() time.Time) { s.now = now }

// SetHeldCheckAfter sets how long s sees the same holder refuse its
// acquires before it reads the holder's row (tests only; before s is used).
func SetHeldCheckAfter(s *Store, d time.Duration) { s.heldCheckAfter = d }

// NewWriteID returns a write id as s's next write would get (tests only).
func NewWriteID() int64 { return newWriteID() }

// StaleRenew sends s's renew statement for (owner, token) with write id wid
// as a coordinator that started it at nowInSeconds would (CQL v5's
// now_in_seconds): a renewal that a client gave up, still applied by its
// coordinator after the client's next renewal (tests only). It reports
// whether it was applied.
func StaleRenew(ctx context.Context, s *Store, resource, owner string, token uint64, ttl time.Duration, wid int64, nowInSeconds int) (bool, error) {
	secs, err := StoreTTL(ttl)
	if err != nil {
		return false, err
	}
	m := newRowMap()
	return s.session.Query(s.st.renew, secs, owner, ttl.Milliseconds(), wid, resource, owner, int64(token), wid).
		Consistency(s.cfg.CommitConsistency).
		SerialConsistency(s.cfg.SerialConsistency).
		WithNowInSeconds(nowInSeconds).
		MapScanCASContext(ctx, m)
}
