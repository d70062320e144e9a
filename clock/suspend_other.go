//go:build !linux && !darwin

package clock

import "time"

// Outside Linux and macOS the real clock is Go's own: time.Now(), whose
// monotonic reading may stop while the machine sleeps (the suspend watch
// then sees nothing, and a lease whose deadline passed during a suspend is
// lost at its next renewal or check after the timers catch up).
func now() time.Time { return time.Now() }

func suspendedNow() time.Duration { return 0 }
