package postgres

import (
	"time"

	"github.com/tenure-go/tenure"
)

// CheckTTL implements tenure.TTLChecker, so a Locker rejects a TTL this
// store cannot keep before any I/O.
func (s *Store) CheckTTL(ttl time.Duration) error { return validateTTL(ttl) }

var _ tenure.TTLChecker = (*Store)(nil)
