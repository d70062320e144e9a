//go:build !linux

package sqlite

import "time"

// hostClock falls back to the wall clock where no host-wide monotonic clock
// is known: a wall-clock step on such a host can shorten or lengthen leases.
func hostClock() (string, time.Duration, error) {
	return "wall", time.Duration(time.Now().UnixNano()), nil
}
