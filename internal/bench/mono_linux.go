package bench

import (
	"syscall"

	"golang.org/x/sys/unix"
)

var sigTerm = syscall.SIGTERM

// Mono reads CLOCK_MONOTONIC in nanoseconds: one clock that every process
// of the host shares, so that times from several processes compare.
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}
