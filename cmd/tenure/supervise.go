package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/tenure-go/tenure"
)

// outcome is how a command that supervise ran ended.
type outcome struct {
	// code is the exit code that the command's end calls for: its exit
	// status, or 128+N when signal N killed it (see exitCode).
	code int
	// lost is the cause of the lease's loss when the lease was lost while
	// the command ran, or was found lost when it exited. The command was
	// then stopped (SIGTERM, SIGKILL after the grace period), and whatever
	// was left of its process group was killed.
	lost error
	// signal is the first signal that was passed on to the command, if any.
	signal os.Signal
}

// supervise runs argv while lease is held, for tenure run and tenure elect
// (name is the subcommand, for messages):
// the command runs in its own process group (in the terminal's foreground
// when tenure has it), with the lease's variables in its environment (see
// commandEnv); signals from sigCh are passed on to its group; Ctrl-Z stops
// tenure with it; when the lease is lost, the group gets SIGTERM, then
// SIGKILL after grace. supervise returns when the command has exited (and,
// after a loss, when its group was killed). It neither releases the lease
// nor exits: the caller does, according to the outcome. A command that
// cannot be started returns an exit error (126 or 127), the lease untouched.
func (a *app) supervise(name string, lease *tenure.Lease, argv []string, grace time.Duration, sigCh <-chan os.Signal) (outcome, error) {
	resource := lease.Resource()
	cmd := exec.Command(argv[0], argv[1:]...)
	if errors.Is(cmd.Err, exec.ErrDot) {
		cmd.Err = nil // found through a relative $PATH entry, as a shell would run it
	}
	cmd.Env = commandEnv(os.Environ(), lease)
	if a.stdin != nil {
		cmd.Stdin = a.stdin
	}
	cmd.Stdout, cmd.Stderr = a.stdout, a.stderr
	ttyFD := foregroundTTY(a.stdin)
	cmd.SysProcAttr = procAttr(ttyFD)
	if err := cmd.Start(); err != nil {
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		return outcome{}, fail(code, "%s: cannot run %s: %s", name, argv[0], errText(err))
	}
	pgid := cmd.Process.Pid
	a.log.Debug("command started", "pid", pgid, "command", argv[0], "foreground", ttyFD >= 0, "token", lease.Token())
	// If tenure dies (SIGKILL, a crash), the reaper kills the command's
	// group: nobody renews the lease any more, so the command must not run
	// on. It is disarmed before the command is reaped.
	var rp *reaper
	if canReap {
		var err error
		if rp, err = startReaper(pgid); err != nil {
			a.errorf("warning: cannot start the reaper that stops the command if tenure dies: %s", errText(err))
		}
	}
	defer rp.disarm()

	// Wait for the command's exit without reaping it (see waitExited), so that
	// its process group id stays reserved while tenure may still signal it.
	exited := make(chan struct{})
	var stops chan struct{} // Ctrl-Z of a command in the terminal's foreground
	if ttyFD >= 0 {
		stops = make(chan struct{}, 1)
	}
	var waitErr error
	reaped := false
	go func() {
		if !waitExited(pgid, stops) {
			rp.disarm()
			waitErr = cmd.Wait()
			reaped = true
		}
		close(exited)
	}()

	var out outcome
	lostCh := lease.Done()
	var graceC <-chan time.Time
	stopForLoss := func(cause error) {
		out.lost = cause
		lostCh = nil
		a.errorf("lease on %s (token %d) lost while the command ran: %s", quoteName(resource), lease.Token(), errText(cause))
		if grace == 0 {
			a.errorf("stopping the command: SIGKILL")
			a.signal(pgid, syscall.SIGKILL)
			return
		}
		a.errorf("stopping the command: SIGTERM now, SIGKILL in %s", fmtDur(grace))
		a.signal(pgid, syscall.SIGTERM)
		graceC = time.After(grace)
	}
loop:
	for {
		select {
		case <-exited:
			break loop
		case s := <-sigCh:
			a.log.Info("passing a signal on to the command", "signal", signalName(s), "pgid", pgid)
			if out.signal == nil {
				out.signal = s
			}
			if sig, ok := s.(syscall.Signal); ok {
				a.signal(pgid, sig)
			}
		case <-stops:
			a.log.Debug("the command was stopped; stopping tenure too", "pgid", pgid)
			suspend(ttyFD, pgid)
		case <-lostCh:
			cause := context.Cause(lease.Context())
			if errors.Is(cause, tenure.ErrReleased) {
				lostCh = nil // released by tenure itself: not a loss (tenure releases only after the command)
				continue
			}
			stopForLoss(cause)
		case <-graceC:
			graceC = nil
			a.errorf("the command did not stop within %s of SIGTERM: SIGKILL", fmtDur(grace))
			a.signal(pgid, syscall.SIGKILL)
		}
	}
	reclaimTTY(ttyFD, pgid)

	// A lease found lost when the command exits may have been lost while it
	// ran: report it rather than trust the command's result.
	if out.lost == nil {
		if err := lease.Err(); err != nil {
			out.lost = err
			a.errorf("lease on %s (token %d) lost by the time the command exited: %s", quoteName(resource), lease.Token(), errText(err))
		}
	}
	if out.lost != nil {
		// Whatever the command left in its group must not run on either. The
		// command is not reaped yet, so its group id is still its own.
		if !reaped {
			a.signal(pgid, syscall.SIGKILL)
			rp.disarm()
			waitErr = cmd.Wait()
		}
		out.code = exitCode(cmd, waitErr)
		a.log.Debug("command ended after the lease was lost", "status", describeExit(cmd, waitErr))
		return out, nil
	}
	if !reaped {
		rp.disarm()
		waitErr = cmd.Wait()
	}
	// The group id stays in use, and cannot be reused, while a member is left.
	if groupAlive(pgid) {
		a.errorf("warning: the command exited but left processes running in its process group %d; they do not hold the lease", pgid)
	}
	out.code = exitCode(cmd, waitErr)
	a.log.Debug("command exited", "status", describeExit(cmd, waitErr), "exit_code", out.code)
	return out, nil
}

// errorf prints a message to stderr as one line prefixed "tenure: ".
func (a *app) errorf(format string, args ...any) {
	fmt.Fprintf(a.stderr, "tenure: "+format+"\n", args...)
}
