package clock

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/tenure-go/tenure/internal/timens"
)

// On Linux, CLOCK_BOOTTIME counts time spent suspended and never steps;
// CLOCK_MONOTONIC, which Go's monotonic readings follow, stops while the
// system is suspended (clock_gettime(2)).
const (
	withSuspend    = unix.CLOCK_BOOTTIME
	withoutSuspend = unix.CLOCK_MONOTONIC
)

// hostOffset is what to subtract from a CLOCK_BOOTTIME reading for the
// host's (internal/timens). In a time namespace, CLOCK_BOOTTIME and
// CLOCK_MONOTONIC are both offset; a process that CRIU or podman
// checkpointed and restored runs in a namespace whose offsets make both
// continue from the checkpoint, as if no time had passed, while the host's
// clocks (and the stores') ran on. Against the host's CLOCK_BOOTTIME, that
// time counts as suspended, so a lease whose deadline passed while the
// process was checkpointed is lost at its first check after the restore.
var hostOffset = func() time.Duration {
	off, err := timens.BoottimeOffset()
	if err != nil {
		return 0
	}
	return off
}
