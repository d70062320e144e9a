//go:build !linux

package clock

import "time"

// Outside Linux the real clock is Go's own: time.Now(), whose monotonic
// reading on some systems (macOS, for one) stops while the machine sleeps.
func now() time.Time { return time.Now() }

func suspendedNow() time.Duration { return 0 }
