//go:build linux

package main

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// canForeground says that the command may take the terminal's foreground:
// reclaimTTY can give it back.
const canForeground = true

// canReap says that a reaper can guard the command (see startReaper):
// waitExited lets tenure disarm it before the command is reaped.
const canReap = true

// cldStopped is CLD_STOPPED of <signal.h>: the si_code of a child that was
// stopped.
const cldStopped = 5

// waitExited blocks until the process pid has exited, without reaping it:
// while it is a zombie its process id, which is also its process group id,
// cannot be reused, so tenure can still signal what is left of the group
// without hitting an unrelated one. The caller reaps it with cmd.Wait.
// When stops is not nil, each time the process is stopped (Ctrl-Z) a value
// is sent on stops, without blocking. It returns false when it could not
// wait (the caller then reaps at once).
func waitExited(pid int, stops chan<- struct{}) bool {
	for {
		var info unix.Siginfo
		opts := unix.WEXITED | unix.WNOWAIT
		if stops != nil {
			opts |= unix.WSTOPPED
		}
		err := unix.Waitid(unix.P_PID, pid, &info, opts, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false
		}
		if stops != nil && info.Code == cldStopped {
			// Consume the stop, so that the next wait does not report it again.
			var consumed unix.Siginfo
			_ = unix.Waitid(unix.P_PID, pid, &consumed, unix.WSTOPPED|unix.WNOHANG, nil)
			select {
			case stops <- struct{}{}:
			default:
			}
			continue
		}
		return true
	}
}

// reclaimTTY gives the foreground of the terminal fd back to tenure's own
// process group if the command's group pgid still has it (the command took
// it when it started).
func reclaimTTY(fd, pgid int) {
	if fd >= 0 {
		moveForeground(fd, pgid, unix.Getpgrp())
	}
}

// suspend is called when the command, which has the terminal's foreground,
// was stopped (Ctrl-Z): tenure takes the terminal back and stops itself with
// SIGTSTP, so that the shell sees the job stopped. Once continued ("fg" or
// "bg"; at once if the kernel discards the SIGTSTP because no shell controls
// tenure's process group), it hands the terminal back to the command if
// tenure is in the foreground, and continues the command. The lease is not
// renewed while tenure is stopped: stopped for longer than its TTL, it is
// lost, and the command is stopped when it resumes.
func suspend(fd, pgid int) {
	if fd < 0 {
		return
	}
	self := unix.Getpgrp()
	moveForeground(fd, pgid, self)
	_ = unix.Kill(unix.Getpid(), unix.SIGTSTP)
	moveForeground(fd, self, pgid)
	_ = unix.Kill(-pgid, unix.SIGCONT)
}

// moveForeground makes the process group to the terminal fd's foreground if
// from has it. SIGTTOU is blocked on this thread meanwhile, since a
// background process that changes the foreground is otherwise stopped.
func moveForeground(fd, from, to int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	sigaddset(&set, unix.SIGTTOU)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
		return
	}
	defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	if cur, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil && cur == from {
		_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, to)
	}
}

func sigaddset(set *unix.Sigset_t, sig unix.Signal) {
	bits := uint(unsafe.Sizeof(set.Val[0])) * 8
	n := uint(sig - 1)
	set.Val[n/bits] |= 1 << (n % bits)
}

// groupRunning reports whether a process of the group pgid is running (or
// stopped): one that is not a zombie. The command, which leads the group,
// is a zombie until tenure reaps it (see waitExited), so groupAlive would
// count it; this reads the group of every process in /proc instead. Where
// /proc cannot be read it falls back to groupAlive.
func groupRunning(pgid int) bool {
	d, err := os.Open("/proc")
	if err != nil {
		return groupAlive(pgid)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return groupAlive(pgid)
	}
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may contain spaces and ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			return true
		}
	}
	return false
}

// stopSelf stops tenure with SIGSTOP (a failpoint of the tests). The signal
// goes to this very thread, which is stopped before it returns from the
// call: a signal to the process may be taken by another thread while this
// one runs on for a while.
func stopSelf() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), unix.SIGSTOP)
}

// reaperClock reads CLOCK_BOOTTIME in nanoseconds: a clock that tenure and
// its reaper share and that counts time spent suspended, so that a deadline
// that passed during a suspend is seen at once after it.
func reaperClock() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// deadlineTimer is a timer on reaperClock (CLOCK_BOOTTIME) for the reaper:
// a timerfd armed at an absolute time, which fires on time after a suspend
// too (Go's timers count no suspended time). fired receives once per
// expiry.
type deadlineTimer struct {
	fd    int
	fired chan struct{}
}

func newDeadlineTimer() (*deadlineTimer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_BOOTTIME, unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	t := &deadlineTimer{fd: fd, fired: make(chan struct{}, 1)}
	go func() {
		var b [8]byte
		for {
			if _, err := unix.Read(fd, b[:]); err != nil {
				if err == unix.EINTR {
					continue
				}
				return
			}
			select {
			case t.fired <- struct{}{}:
			default:
			}
		}
	}()
	return t, nil
}

// arm sets the timer to fire at deadline (nanoseconds of reaperClock).
func (t *deadlineTimer) arm(deadline int64) error {
	return unix.TimerfdSettime(t.fd, unix.TFD_TIMER_ABSTIME, &unix.ItimerSpec{Value: unix.NsecToTimespec(deadline)}, nil)
}
