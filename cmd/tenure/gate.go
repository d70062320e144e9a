//go:build unix

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// gateArg is the hidden first argument that makes the tenure binary run as
// a command's gate: the process that becomes the command, and that waits
// until tenure has armed the reaper with the lease's deadline before it
// executes the command (see supervise). It is not a subcommand users see.
//
// Without it the command started before the reaper existed, and a tenure
// stopped, frozen or starved between the two left the command running past
// the lease's deadline with nothing to stop it (found by a second
// adversarial review).
const gateArg = "__tenure_exec"

// gateFD is the gate's pipe from tenure in the gate process (ExtraFiles[0]).
const gateFD = 3

// gateGo is the byte that opens the gate.
const gateGo = 'g'

// gateMain is the gate process: argv is the command's path and then its
// argv (argv[0] included). It reads one byte from gateFD: gateGo executes
// the command in this very process (same pid, process group and terminal);
// anything else (tenure is gone, or decided not to start it) exits 70
// without running it.
func gateMain(argv []string, stderr io.Writer) int {
	if len(argv) < 2 {
		fmt.Fprintln(stderr, "tenure: gate: want the command's path and argv")
		return exitUsage
	}
	f := os.NewFile(gateFD, "gate")
	var b [1]byte
	n, _ := f.Read(b[:])
	f.Close()
	if n != 1 || b[0] != gateGo {
		return exitSoftware
	}
	err := unix.Exec(argv[0], argv[1:], os.Environ())
	code := exitCannotExec
	if errors.Is(err, syscall.ENOENT) {
		code = exitNotFound
	}
	fmt.Fprintf(stderr, "tenure: cannot run %s: %s\n", quoteName(argv[1]), errText(err))
	return code
}

// gateCmd returns the binary to start as the gate (this very one, as the
// reaper is started) and the gate's pipe.
func gateCmd() (exe string, r, w *os.File, err error) {
	if exe, err = selfExe(); err != nil {
		return "", nil, nil, err
	}
	r, w, err = os.Pipe()
	return exe, r, w, err
}

// selfExe returns the path that runs this very binary: /proc/self/exe,
// which does so even if its file was replaced or deleted since tenure
// started (an upgrade in place); elsewhere the executable's path.
func selfExe() (string, error) {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe", nil
	}
	return os.Executable()
}
