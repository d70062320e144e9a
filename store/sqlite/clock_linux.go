//go:build linux

package sqlite

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tenure-go/tenure/internal/timens"
)

// hostClock reads CLOCK_BOOTTIME, the kernel's clock that never steps (NTP
// and operators change only the wall clock), counts time spent suspended,
// and is shared by every process on the host: the host's reading, without
// the offset of a time namespace the process may be in (unshare --time,
// CRIU and podman's checkpoint/restore offset CLOCK_BOOTTIME per namespace
// while the boot id stays the host's: processes of one host sharing a file
// would otherwise read clocks seconds or hours apart, and each take the
// other's live lease for expired, or for one granted in the future).
// Its epoch is the boot id, so a reboot expires every lease.
func hostClock() (string, time.Duration, error) {
	off, err := timens.BoottimeOffset()
	if err != nil {
		return "", 0, fmt.Errorf("sqlite store: %w", err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return "", 0, fmt.Errorf("sqlite store: CLOCK_BOOTTIME: %w", err)
	}
	return bootID, time.Duration(ts.Nano()) - off, nil
}

var bootID = func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "linux-unknown-boot"
	}
	return strings.TrimSpace(string(b))
}()
