//go:build linux

package sqlite

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// hostClock reads CLOCK_BOOTTIME, the kernel's clock that never steps (NTP
// and operators change only the wall clock), counts time spent suspended,
// and is shared by every process on the host. Its epoch is the boot id, so a
// reboot expires every lease.
func hostClock() (string, time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return "", 0, fmt.Errorf("sqlite store: CLOCK_BOOTTIME: %w", err)
	}
	return bootID, time.Duration(ts.Nano()), nil
}

var bootID = func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "linux-unknown-boot"
	}
	return strings.TrimSpace(string(b))
}()
