package bench

import (
	"syscall"
	"time"

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

// processCPU returns the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
