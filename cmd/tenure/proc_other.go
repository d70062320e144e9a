//go:build unix && !linux

package main

import (
	"errors"
	"syscall"
)

// canForeground is false: reclaimTTY is not implemented here.
const canForeground = false

// canReap is false: without waitExited the command is reaped as soon as it
// exits, and a reaper could then signal a reused process group id.
const canReap = false

// waitExited cannot wait without reaping here; the caller reaps at once.
func waitExited(pid int, stops chan<- struct{}) bool { return false }

// reclaimTTY gives the terminal's foreground back to tenure's process group.
// Not implemented outside Linux, where the command does not take the
// foreground (see foregroundTTY).
func reclaimTTY(fd, pgid int) {}

// suspend is not needed where the command never takes the foreground.
func suspend(fd, pgid int) {}

// groupRunning reports whether a process of the group pgid is left. The
// command is reaped as soon as it exits here, so groupAlive counts only the
// others.
func groupRunning(pgid int) bool { return groupAlive(pgid) }

// stopSelf stops tenure with SIGSTOP (a failpoint of the tests).
func stopSelf() { _ = syscall.Kill(syscall.Getpid(), syscall.SIGSTOP) }

// reaperClock is not used here (canReap is false).
func reaperClock() int64 { return 0 }

// deadlineTimer is not used here (canReap is false).
type deadlineTimer struct{ fired chan struct{} }

func newDeadlineTimer() (*deadlineTimer, error) {
	return nil, errors.New("no deadline timer on this system")
}

func (t *deadlineTimer) arm(int64) error { return nil }
