//go:build linux || darwin

package clock

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The real clock's reading is time.Now() plus the suspended time, which is
// how far the clock that counts suspended time (Linux: CLOCK_BOOTTIME;
// macOS: CLOCK_MONOTONIC) has run ahead of the one that does not and that
// Go's monotonic readings follow (Linux: CLOCK_MONOTONIC; macOS:
// CLOCK_UPTIME_RAW) since the process started. Reading them is a system
// call (x/sys/unix does not use the vDSO), so they are read only when the
// suspended time may have moved: a suspend moves the
// wall clock ahead of Go's monotonic clock too, and time.Now() returns both
// in one vDSO call. When their difference jumps by more than jumpThreshold
// (a suspend, or a step of the wall clock), the suspended time is read
// again. Slow NTP slewing never reaches the threshold between two readings
// far enough apart to matter, and a reading on a threshold-sized drift just
// costs one system call.

const jumpThreshold = 2 * time.Millisecond

var (
	base = time.Now() // carries the monotonic reading all offsets are taken from

	// bootMinusMono0 is the difference of the two clocks at start: the
	// time suspended before this process started, which does not count.
	bootMinusMono0 = bootMinusMono()

	suspended    atomic.Int64 // nanoseconds suspended since start
	wallMinusMon atomic.Int64 // wall − monotonic (relative to base) when suspended was last read
)

func init() { wallMinusMon.Store(wallMinusMono(base)) }

// bootMinusMono returns how far the host's clock that counts suspended
// time is ahead of the process's clock that does not (see suspendClocks;
// hostOffset).
func bootMinusMono() int64 {
	var b, m unix.Timespec
	if unix.ClockGettime(withoutSuspend, &m) != nil || unix.ClockGettime(withSuspend, &b) != nil {
		return 0
	}
	return b.Nano() - int64(hostOffset()) - m.Nano()
}

// wallMinusMono is t's wall time minus its monotonic time since base, in
// nanoseconds: constant while neither clock jumps.
func wallMinusMono(t time.Time) int64 { return t.UnixNano() - int64(t.Sub(base)) }

func suspendedNow() time.Duration {
	return time.Duration(suspendedAt(wallMinusMono(time.Now()), bootMinusMono))
}

func now() time.Time {
	t := time.Now()
	return t.Add(time.Duration(suspendedAt(wallMinusMono(t), bootMinusMono)))
}

// suspendedAt returns the time suspended since start, given wall − monotonic
// now; it reads CLOCK_BOOTTIME (through boot) only after a jump.
func suspendedAt(d int64, boot func() int64) int64 {
	if last := wallMinusMon.Load(); d-last > int64(jumpThreshold) || last-d > int64(jumpThreshold) {
		// The two clocks are read a few hundred nanoseconds apart: count
		// only what exceeds that noise.
		if s := boot() - bootMinusMono0; s > suspended.Load()+int64(time.Millisecond) {
			suspended.Store(s)
		}
		wallMinusMon.Store(d)
	}
	return suspended.Load()
}
