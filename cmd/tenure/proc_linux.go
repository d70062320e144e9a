//go:build linux

package main

import (
	"errors"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// canForeground says that the command may take the terminal's foreground:
// reclaimTTY can give it back.
const canForeground = true

// waitExited blocks until the process pid has exited, without reaping it:
// while it is a zombie its process id, which is also its process group id,
// cannot be reused, so tenure can still signal what is left of the group
// without hitting an unrelated one. The caller reaps it with cmd.Wait.
// It returns false when it could not wait (the caller then reaps at once).
func waitExited(pid int) bool {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil
	}
}

// reclaimTTY gives the foreground of the terminal fd back to tenure's own
// process group if the group pgid still has it (the command took it when it
// started). SIGTTOU is blocked on this thread meanwhile, as tenure is then a
// background process and the kernel would otherwise stop it.
func reclaimTTY(fd, pgid int) {
	if fd < 0 {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	sigaddset(&set, unix.SIGTTOU)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
		return
	}
	defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	if cur, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil && cur == pgid {
		_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, unix.Getpgrp())
	}
}

func sigaddset(set *unix.Sigset_t, sig unix.Signal) {
	bits := uint(unsafe.Sizeof(set.Val[0])) * 8
	n := uint(sig - 1)
	set.Val[n/bits] |= 1 << (n % bits)
}
