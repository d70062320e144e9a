package clock

import "golang.org/x/sys/unix"

// On Linux, CLOCK_BOOTTIME counts time spent suspended and never steps;
// CLOCK_MONOTONIC, which Go's monotonic readings follow, stops while the
// system is suspended (clock_gettime(2)).
const (
	withSuspend    = unix.CLOCK_BOOTTIME
	withoutSuspend = unix.CLOCK_MONOTONIC
)
