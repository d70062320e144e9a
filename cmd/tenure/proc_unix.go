//go:build unix

package main

import (
	"errors"
	"os"
	"syscall"

	"github.com/mattn/go-isatty"
	"golang.org/x/sys/unix"
)

// forwardedSignals are the signals that tenure passes on to the command's
// process group. SIGINT, SIGTERM and SIGHUP also tell tenure to stop (see
// isStopSignal); SIGQUIT, SIGUSR1 and SIGUSR2 are only passed on (a JVM
// prints its threads on SIGQUIT and goes on). While tenure waits for a
// lease, all but SIGUSR1 and SIGUSR2 end the wait (see isWaitStop).
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// isStopSignal reports whether s tells tenure to stop the command: SIGINT,
// SIGTERM or SIGHUP. The command gets it, then SIGKILL after --grace if it
// has not exited by then.
func isStopSignal(s os.Signal) bool {
	return s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGHUP
}

// isUserSignal reports whether s is SIGUSR1 or SIGUSR2.
func isUserSignal(s os.Signal) bool { return s == syscall.SIGUSR1 || s == syscall.SIGUSR2 }

// signalNumber returns the number of a signal, for the 128+N exit codes.
func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return int(syscall.SIGTERM)
}

// signalName returns a signal's conventional name, such as "SIGTERM".
func signalName(s os.Signal) string {
	if n, ok := s.(syscall.Signal); ok {
		if name := unix.SignalName(n); name != "" {
			return name
		}
	}
	return s.String()
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	return f != nil && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// terminalWidth returns the width of the terminal f, or 0.
func terminalWidth(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// signalGroup sends sig to the process group pgid. A group that no longer
// exists is not an error.
func signalGroup(pgid int, sig syscall.Signal) error {
	err := unix.Kill(-pgid, sig)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

// groupAlive reports whether any process of the group pgid is left, a
// zombie included.
func groupAlive(pgid int) bool {
	err := unix.Kill(-pgid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// foregroundTTY returns the file descriptor of the controlling terminal when
// stdin is that terminal and tenure's process group is in its foreground, so
// that the command's process group can take the foreground (an interactive
// command can then read the terminal, and Ctrl-C reaches it). Otherwise it
// returns -1.
func foregroundTTY(stdin *os.File) int {
	if !canForeground || !isTerminal(stdin) {
		return -1
	}
	fd := int(stdin.Fd())
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || pgrp != unix.Getpgrp() {
		return -1
	}
	return fd
}

// procAttr returns the attributes of the command's process: its own process
// group, in the terminal's foreground when ttyFD >= 0.
func procAttr(ttyFD int) *syscall.SysProcAttr {
	if ttyFD >= 0 {
		return &syscall.SysProcAttr{Setpgid: true, Foreground: true, Ctty: ttyFD}
	}
	return &syscall.SysProcAttr{Setpgid: true}
}
