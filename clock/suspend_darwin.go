package clock

import (
	"time"

	"golang.org/x/sys/unix"
)

// On macOS, CLOCK_MONOTONIC goes on while the system sleeps, and
// CLOCK_UPTIME_RAW, which Go's monotonic readings follow, stops
// (clock_gettime(3) on macOS).
const (
	withSuspend    = unix.CLOCK_MONOTONIC
	withoutSuspend = unix.CLOCK_UPTIME_RAW
)

// hostOffset: macOS has no time namespaces.
var hostOffset = func() time.Duration { return 0 }
