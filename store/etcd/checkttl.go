package etcd

import (
	"time"

	"github.com/tenure-go/tenure/driver"
)

// CheckTTL implements driver.TTLChecker, so a Locker rejects a TTL this
// store cannot keep before any I/O.
func (s *Store) CheckTTL(ttl time.Duration) error {
	_, err := seconds(ttl)
	return err
}

var _ driver.TTLChecker = (*Store)(nil)
