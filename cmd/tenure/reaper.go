//go:build unix

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
)

// reaperArg is the hidden first argument that makes the tenure binary run as
// a command's reaper (see startReaper). It is not a subcommand users see.
const reaperArg = "__tenure_reaper"

// reaper is a small process (this binary, re-executed) that kills the
// command's process group if tenure dies without stopping it first.
//
// tenure renews the lease; when tenure is killed with SIGKILL (or crashes),
// nobody renews it, and another host runs its copy of the command once the
// TTL has passed, while the orphaned command would run on. The reaper reads
// a pipe whose only writer is tenure: when tenure ends in any way, the
// kernel closes the pipe, the reaper reads end-of-file and sends SIGKILL to
// the command's process group at once. Before tenure itself reaps the
// command (after which the group id could be reused), it disarms the reaper
// by writing a byte and waits for it to exit.
type reaper struct {
	cmd  *exec.Cmd
	w    *os.File
	once sync.Once
}

// startReaper starts the reaper of the process group pgid. The reaper runs
// in a process group of its own, so that signals sent to tenure's or the
// command's group (Ctrl-C, forwarded signals) do not end it.
func startReaper(pgid int) (*reaper, error) {
	// /proc/self/exe runs this very binary even if its file was replaced or
	// deleted since tenure started (an upgrade in place); elsewhere the path.
	exe := "/proc/self/exe"
	if _, err := os.Stat(exe); err != nil {
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, reaperArg, strconv.Itoa(pgid))
	cmd.Stdin = r
	cmd.Stdout, cmd.Stderr = nil, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	r.Close() // the reaper's copy is the only reader left
	return &reaper{cmd: cmd, w: w}, nil
}

// disarm tells the reaper that tenure has the command in hand, and waits
// for it to exit. It is safe to call on a nil reaper and more than once.
func (r *reaper) disarm() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		_, _ = r.w.Write([]byte{'d'})
		r.w.Close()
		_ = r.cmd.Wait()
	})
}

// reaperMain is the reaper process: argv is the process group id. It ignores
// the signals a terminal or a supervisor sends to whole groups, and waits on
// stdin: a byte disarms it (exit 0); end-of-file means tenure is gone, and
// the group gets SIGKILL (exit 1).
func reaperMain(argv []string, stdin io.Reader, stderr io.Writer) int {
	if len(argv) != 1 {
		fmt.Fprintln(stderr, "tenure: reaper: want one process group id")
		return exitUsage
	}
	pgid, err := strconv.Atoi(argv[0])
	if err != nil || pgid <= 1 {
		fmt.Fprintln(stderr, "tenure: reaper: bad process group id", strconv.Quote(argv[0]))
		return exitUsage
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	var b [1]byte
	for {
		n, err := stdin.Read(b[:])
		if n == 1 {
			return 0
		}
		if err != nil {
			break
		}
	}
	if err := signalGroup(pgid, syscall.SIGKILL); err != nil {
		fmt.Fprintf(stderr, "tenure: reaper: tenure is gone; cannot kill the command's process group %d: %v\n", pgid, err)
		return 1
	}
	fmt.Fprintf(stderr, "tenure: reaper: tenure is gone without stopping the command; killed its process group %d\n", pgid)
	return 1
}
