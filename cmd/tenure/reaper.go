//go:build unix

package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// reaperArg is the hidden first argument that makes the tenure binary run as
// a command's reaper (see startReaper). It is not a subcommand users see.
const reaperArg = "__tenure_reaper"

// reaper is a small process (this binary, re-executed) that kills the
// command's process group if tenure dies without stopping it first, or
// cannot stop it by the lease's deadline.
//
// tenure renews the lease; when tenure is killed with SIGKILL (or crashes),
// nobody renews it, and another host runs its copy of the command once the
// TTL has passed, while the orphaned command would run on. The reaper reads
// a pipe whose only writer is tenure: when tenure ends in any way, the
// kernel closes the pipe, the reaper reads end-of-file and sends SIGKILL to
// the command's process group at once. Before tenure itself reaps the
// command (after which the group id could be reused), it disarms the reaper
// by writing a byte and waits for it to exit.
//
// tenure also sends it the lease's deadline after every renewal (on the
// host's clock that counts suspended time, reaperClock), and the reaper
// kills the group when the deadline passes without a later one: a tenure
// that is stopped (SIGSTOP), frozen or starved of CPU past the deadline
// cannot stop the command itself, and another host may already run its copy
// (found by an adversarial review).
type reaper struct {
	cmd      *exec.Cmd
	w        *os.File
	once     sync.Once
	mu       sync.Mutex
	last     int64         // the last deadline sent
	exited   chan struct{} // closed once the reaper process has exited
	disarmed atomic.Bool   // disarm was called: an exit is expected
}

// Reaper messages: reaperDisarm alone, or reaperDeadline and the deadline
// as 8 bytes, big-endian nanoseconds of reaperClock.
const (
	reaperDisarm   = 'd'
	reaperDeadline = 'k'
)

// reaperPoll is how often the reaper compares the clock with the deadline
// where it has no timer on that clock (deadlineTimer: Go's timers do not
// count suspended time).
const reaperPoll = 50 * time.Millisecond

// startReaper starts the reaper of the process group pgid. The reaper runs
// in a process group of its own, so that signals sent to tenure's or the
// command's group (Ctrl-C, forwarded signals) do not end it.
func startReaper(pgid int) (*reaper, error) {
	exe, err := selfExe()
	if err != nil {
		return nil, err
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
	rp := &reaper{cmd: cmd, w: w, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(rp.exited)
	}()
	return rp, nil
}

// died returns a channel closed when the reaper exits without having been
// disarmed (killed, or after it killed the command's group itself): the
// command is no longer guarded. A nil reaper's never is.
func (r *reaper) died() <-chan struct{} {
	if r == nil {
		return nil
	}
	return r.exited
}

// unexpected reports whether the reaper's exit (died fired) was not
// asked for by disarm.
func (r *reaper) unexpected() bool { return r != nil && !r.disarmed.Load() }

// status describes how the reaper exited, once it has.
func (r *reaper) status() string {
	if r == nil || r.cmd.ProcessState == nil {
		return "unknown status"
	}
	return r.cmd.ProcessState.String()
}

// setDeadline tells the reaper to kill the command's group at deadline
// (reaperClock) unless a later deadline comes first. It is safe to call on
// a nil reaper, and after disarm (then it does nothing).
func (r *reaper) setDeadline(deadline int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if deadline == r.last || r.w == nil {
		return
	}
	var b [9]byte
	b[0] = reaperDeadline
	binary.BigEndian.PutUint64(b[1:], uint64(deadline))
	if _, err := r.w.Write(b[:]); err == nil {
		r.last = deadline
	}
}

// disarm tells the reaper that tenure has the command in hand, and waits
// for it to exit. It is safe to call on a nil reaper and more than once.
func (r *reaper) disarm() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		r.disarmed.Store(true)
		r.mu.Lock()
		_, _ = r.w.Write([]byte{reaperDisarm})
		r.w.Close()
		r.w = nil
		r.mu.Unlock()
		<-r.exited
	})
}

// reaperMain is the reaper process: argv is the process group id. It ignores
// the signals a terminal or a supervisor sends to whole groups, and waits on
// stdin: the disarm byte makes it exit 0; end-of-file means tenure is gone,
// and a deadline that passes without a later one means tenure did not stop
// the command in time: the group then gets SIGKILL (exit 1).
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
	msgs := make(chan int64) // a deadline; 0: disarmed; -1: tenure is gone
	go func() {
		var b [8]byte
		for {
			if _, err := io.ReadFull(stdin, b[:1]); err != nil {
				msgs <- -1
				return
			}
			switch b[0] {
			case reaperDisarm:
				msgs <- 0
				return
			case reaperDeadline:
				if _, err := io.ReadFull(stdin, b[:]); err != nil {
					msgs <- -1
					return
				}
				msgs <- int64(binary.BigEndian.Uint64(b[:]))
			}
		}
	}()
	// The deadline fires on a timer on reaperClock; where none can be
	// made, the clock is polled every reaperPoll.
	timer, err := newDeadlineTimer()
	var fired <-chan struct{}
	var poll <-chan time.Time
	var tick *time.Ticker
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	pollClock := func() {
		if tick == nil {
			tick = time.NewTicker(reaperPoll)
			poll = tick.C
		}
	}
	if err == nil {
		fired = timer.fired
	} else {
		pollClock()
	}
	var deadline int64
	why := "tenure is gone without stopping the command"
	passed := func() bool { return deadline != 0 && reaperClock() >= deadline }
wait:
	for {
		select {
		case m := <-msgs:
			switch {
			case m == 0:
				return 0
			case m < 0:
				break wait
			default:
				deadline = m
				if timer != nil {
					if err := timer.arm(deadline); err != nil && poll == nil {
						// Without the timer, the clock is polled: the
						// deadline must fire even if tenure is stopped.
						fmt.Fprintf(stderr, "tenure: reaper: cannot arm the deadline timer (polling the clock instead): %v\n", err)
						pollClock()
					}
				}
			}
		case <-fired:
		case <-poll:
		}
		if passed() {
			why = "the lease's deadline passed and tenure did not stop the command (tenure is stopped, frozen or starved of CPU)"
			break wait
		}
	}
	if err := signalGroup(pgid, syscall.SIGKILL); err != nil {
		fmt.Fprintf(stderr, "tenure: reaper: %s; cannot kill the command's process group %d: %v\n", why, pgid, err)
		return 1
	}
	fmt.Fprintf(stderr, "tenure: reaper: %s; killed its process group %d\n", why, pgid)
	return 1
}
