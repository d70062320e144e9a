package cassandra

import (
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// SetClock sets the clock of s's token floor and holder checks (tests only;
// before s is used).
func SetClock(s *Store, now func() time.Time) { s.now = now }

// SetHeldCheckAfter sets how long s sees the same holder refuse its
// acquires before it reads the holder's row (tests only; before s is used).
func SetHeldCheckAfter(s *Store, d time.Duration) { s.heldCheckAfter = d }

// Session returns the driver session.
func (s *Store) Session() *gocql.Session { return s.session }
