package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/sqlite"
)

// command is what tenure run and tenure elect run under a lease.
type command struct {
	name     string // the subcommand, "run" or "elect", for messages
	resource string // the resource the user named (TENURE_RESOURCE)
	slot     int    // the slot held (TENURE_SLOT), 0 without --slots
	path     string // the executable, as lookCommand found it
	argv     []string
	grace    time.Duration
}

// outcome is how a command that supervise ran ended.
type outcome struct {
	// code is the exit code that the command's end calls for: its exit
	// status, or 128+N when signal N killed it (see exitCode).
	code int
	// lost is the cause of the lease's loss when the lease was lost while
	// the command or what it left in its process group ran, or was found
	// lost when it exited. The command was then stopped (SIGTERM, SIGKILL
	// after the grace period), and whatever was left of its process group
	// was killed.
	lost error
	// signal is the first signal that told tenure to stop (SIGINT, SIGTERM,
	// SIGHUP) and that was passed on to the command, if any.
	signal os.Signal
	// stopped says why tenure stopped the command for the lease's sake
	// while the lease was still trusted (renewals not confirmed as its
	// deadline neared), if it did: the command did not end on its own, and
	// its status does not say whether its work was done.
	stopped error
}

// notStartedError is returned by supervise when the lease was not live with
// a usable margin right before the command would have started: the command
// did not run.
type notStartedError struct{ exitError }

// Unwrap returns the exit error, for Main.
func (e *notStartedError) Unwrap() error { return &e.exitError }

// leftoverPoll is how often supervise looks for processes left in the
// command's group after the command exited.
const leftoverPoll = 20 * time.Millisecond

// killWait bounds the wait for a process group to be gone after SIGKILL (a
// process in uninterruptible sleep dies when its I/O ends).
const killWait = 5 * time.Second

// usableLease checks, right before the command starts, that the lease is
// live and has at least its renew window left (tenure.Timing), the least
// time a lease renewed on schedule has, just before a renewal. A lease with
// less (its acquire was answered slowly, or tenure was paused since) is
// renewed first, up to three times. A lease that is lost is exit code 79
// and one that the store cannot renew with that margin 69; the command does
// not start in either case.
func (a *app) usableLease(c command, lease *tenure.Lease) error {
	need := lease.Timing().RenewWindow
	for attempt := 0; ; attempt++ {
		if err := lease.Err(); err != nil {
			return &notStartedError{exitError{code: exitLost, msg: fmt.Sprintf(
				"%s: the %s was lost before the command could start; the command did not run: %s",
				c.name, describeLease(lease), describeLoss(err))}}
		}
		left := lease.Remaining()
		if left >= need {
			return nil
		}
		if attempt == 3 {
			return &notStartedError{exitError{code: exitUnavailable, msg: fmt.Sprintf(
				"%s: the store does not renew the lease on %s fast enough for --ttl %v (%s left after three renewals, and the command needs %s, what a lease renewed on schedule keeps, to start); the command did not run; use a longer --ttl",
				c.name, quoteName(lease.Resource()), lease.TTL(), fmtDur(left), fmtDur(need))}}
		}
		a.log.Info("the lease has less than its renew window left; renewing it before the command starts", "resource", lease.Resource(), "left", left, "renew_window", need)
		ctx, cancel := context.WithTimeout(context.Background(), left)
		if err := lease.Renew(ctx); err != nil {
			a.log.Info("renewal before the command starts failed", "resource", lease.Resource(), "err", err)
		}
		cancel()
	}
}

// supervise runs the command while lease is held, for tenure run and tenure
// elect: it checks right before starting it that the lease is live with a
// usable margin (usableLease; otherwise a *notStartedError); the command
// runs in its own process group (in the terminal's foreground when tenure
// has it), with the lease's variables in its environment (see commandEnv);
// signals from sigCh are passed on to its group, and after SIGINT, SIGTERM
// or SIGHUP the group gets SIGKILL once the grace period has passed; Ctrl-Z
// stops tenure with it; when the lease is lost, the group gets SIGTERM,
// then SIGKILL after the grace period. When the command has exited, the
// processes it left in its group get SIGTERM, then SIGKILL after the grace
// period (at once when the lease was lost), and supervise returns when none
// is left. It neither releases the lease nor exits: the caller does,
// according to the outcome. A command that cannot be started returns an
// exit error (126 or 127), the lease untouched.
func (a *app) supervise(c command, lease *tenure.Lease, sigCh <-chan os.Signal) (outcome, error) {
	failpoint("stop-before-start")
	if err := a.usableLease(c, lease); err != nil {
		return outcome{}, err
	}
	cmd := &exec.Cmd{Path: c.path, Args: c.argv}
	cmd.Env = commandEnv(os.Environ(), lease, c.resource, c.slot)
	if a.stdin != nil {
		cmd.Stdin = a.stdin
	}
	cmd.Stdout, cmd.Stderr = a.stdout, a.stderr
	if f, ok := a.stdout.(*outWriter); ok {
		cmd.Stdout = f.w // the command writes to the same stdout, not through tenure's
	}
	ttyFD := foregroundTTY(a.stdin)
	cmd.SysProcAttr = procAttr(ttyFD)
	// Where a reaper guards the command, the process starts as this binary
	// behind a gate (gateMain), which executes the command only once the
	// reaper holds its process group and the lease's deadline: a tenure
	// stopped or starved at any moment from here on cannot leave the
	// command running past the deadline.
	var gate *os.File
	if canReap {
		exe, gr, gw, err := gateCmd()
		if err != nil {
			return outcome{}, fail(exitSoftware, "%s: cannot prepare the command's start: %s", c.name, errText(err))
		}
		cmd.Path, cmd.Args = exe, append([]string{exe, gateArg, c.path}, c.argv...)
		cmd.ExtraFiles = []*os.File{gr}
		defer gr.Close()
		gate = gw
		defer gate.Close()
	}
	if err := cmd.Start(); err != nil {
		code := exitCannotExec
		if errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return outcome{}, fail(code, "%s: cannot run %s: %s", c.name, quoteName(c.argv[0]), errText(err))
	}
	pgid := cmd.Process.Pid
	failpoint("stop-after-start")
	a.log.Debug("command started", "pid", pgid, "command", c.argv[0], "foreground", ttyFD >= 0, "token", lease.Token())
	// If tenure dies (SIGKILL, a crash), the reaper kills the command's
	// group: nobody renews the lease any more, so the command must not run
	// on. It is disarmed before the command is reaped. Without its reaper
	// the command would run unguarded, so it does not run (found by an
	// adversarial review: a fork refused for a limit on open files or
	// processes started it with only a warning).
	var rp *reaper
	// notStarted ends the gate, which never ran the command, and returns
	// why the command did not run.
	notStarted := func(code int, format string, args ...any) (outcome, error) {
		signalGroup(pgid, syscall.SIGKILL)
		rp.disarm()
		_ = cmd.Wait()
		return outcome{}, &notStartedError{exitError{code: code, msg: fmt.Sprintf(format, args...)}}
	}
	if canReap {
		var err error
		if failpointSet("reaper-start-fails") {
			err = errors.New("failpoint reaper-start-fails")
		} else {
			rp, err = startReaper(pgid)
		}
		if err != nil {
			return notStarted(exitOSErr, "%s: cannot start the reaper that stops the command if tenure dies or stalls, so the command did not run: %s", c.name, errText(err))
		}
	}
	defer rp.disarm()
	w := &leaseWatch{lease: lease, rp: rp}
	w.look()
	if gate != nil {
		// The reaper, which must still be there, and the lease, once more,
		// right before the command runs: a pause since usableLease may have
		// used it up.
		select {
		case <-rp.died():
			return notStarted(exitOSErr, "%s: the reaper that guards the command exited (%s) before the command could start; the command did not run", c.name, rp.status())
		default:
		}
		if err := lease.Err(); err != nil {
			return notStarted(exitLost, "%s: the %s was lost before the command could start; the command did not run: %s", c.name, describeLease(lease), describeLoss(err))
		}
		if lease.Remaining() < lease.Timing().RenewWindow {
			return notStarted(exitUnavailable, "%s: the lease on %s had less than its renew window (%s) left when the command was to start (tenure was paused or starved); the command did not run",
				c.name, quoteName(lease.Resource()), fmtDur(lease.Timing().RenewWindow))
		}
		_, err := gate.Write([]byte{gateGo})
		gate.Close()
		if err != nil {
			return outcome{}, fail(exitSoftware, "%s: cannot start the command: %s", c.name, errText(err))
		}
	}

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
	// The lease's deadline bounds the command: the reaper learns every new
	// deadline and kills the group when one passes (even while tenure is
	// stopped); tenure sends SIGTERM once the time left falls below the
	// grace period, and SIGKILL when the lease is lost. The grace period
	// counts here for at most half the renew window (tenure.Timing): a lease
	// renewed on schedule never has less than the whole window left, and
	// the other half is for the renewal's retries.
	watch := time.NewTicker(watchEvery(lease.TTL()))
	defer watch.Stop()
	warnBelow := min(c.grace, lease.Timing().RenewWindow/2)
	warned := false
	// near fires killMargin before the deadline as last seen: if no renewal
	// moved it by then, the command gets SIGKILL, before the reaper's
	// margin and before the store can give the lease to anyone else.
	killMargin := stopMargin(lease.TTL())
	near := time.NewTimer(max(time.Until(w.deadlineAt)-killMargin, 0))
	defer near.Stop()
	// kill fires when the grace period after a loss or a stop signal has
	// passed: the group then gets SIGKILL.
	var kill *time.Timer
	var killC <-chan time.Time
	var killAt time.Time
	startGrace := func(d time.Duration) {
		at := time.Now().Add(d)
		if kill != nil {
			if at.Before(killAt) {
				killAt = at
				kill.Reset(d)
			}
			return
		}
		killAt = at
		kill = time.NewTimer(d)
		killC = kill.C
	}
	defer func() {
		if kill != nil {
			kill.Stop()
		}
	}()
	stopForLoss := func(cause error) {
		out.lost = cause
		lostCh = nil
		a.errorf("%s lost while the command ran: %s", describeLease(lease), describeLoss(cause))
		// After the deadline the store may already have granted the lease
		// to another host: SIGKILL at once. A lease the store says is gone
		// (freed by an operator) gives the command the grace period, up to
		// the deadline.
		grace := min(c.grace, time.Until(w.deadlineAt))
		if errors.Is(cause, tenure.ErrLeaseExpired) || grace <= 0 {
			a.errorf("stopping the command: SIGKILL")
			a.signal(pgid, syscall.SIGKILL)
			return
		}
		a.errorf("stopping the command: SIGTERM now, SIGKILL in %s", fmtDur(grace))
		a.signal(pgid, syscall.SIGTERM)
		a.signal(pgid, syscall.SIGCONT)
		startGrace(grace)
	}
	reaperDied := rp.died()
loop:
	for {
		select {
		case <-exited:
			break loop
		case <-reaperDied:
			reaperDied = nil
			if !rp.unexpected() || out.lost != nil {
				continue
			}
			if lease.Err() != nil {
				// The reaper killed the group at the deadline (tenure was
				// stopped or starved): the lease is lost, and said so.
				if cause := context.Cause(lease.Context()); !errors.Is(cause, tenure.ErrReleased) {
					stopForLoss(cause)
					continue
				}
			}
			// Nothing would stop the command if tenure were now stopped or
			// killed: stop it, as for a lost lease.
			out.lost = fmt.Errorf("the reaper that guards the command exited (%s): the command ran unguarded", rp.status())
			lostCh = nil
			a.errorf("the reaper that stops the command if tenure dies or stalls exited (%s): stopping the command: SIGKILL", rp.status())
			a.signal(pgid, syscall.SIGKILL)
		case s := <-sigCh:
			a.log.Info("passing a signal on to the command", "signal", signalName(s), "pgid", pgid)
			if sig, ok := s.(syscall.Signal); ok {
				a.signal(pgid, sig)
			}
			if !isStopSignal(s) || out.signal != nil {
				continue
			}
			out.signal = s
			if c.grace == 0 {
				a.errorf("received %s: passed on to the command; --grace is 0: SIGKILL", signalName(s))
				a.signal(pgid, syscall.SIGKILL)
				continue
			}
			a.log.Info("told to stop: the command gets SIGKILL if it has not exited after the grace period", "signal", signalName(s), "grace", c.grace)
			startGrace(c.grace)
		case <-stops:
			a.log.Debug("the command was stopped; stopping tenure too", "pgid", pgid)
			suspend(ttyFD, pgid)
		case <-near.C:
			left := w.look()
			if out.lost != nil || left <= 0 {
				continue // lost: lostCh has it, or will at once
			}
			if left > killMargin {
				near.Reset(left - killMargin)
				continue
			}
			out.lost = noRenewalInTime(left, lease.TTL())
			lostCh = nil
			a.errorf("%s: renewals are not confirmed and the lease's deadline is %s away: stopping the command: SIGKILL", describeLease(lease), fmtDur(left))
			a.signal(pgid, syscall.SIGKILL)
		case <-watch.C:
			left := w.look()
			if left > killMargin {
				near.Reset(left - killMargin)
			}
			if warned || out.lost != nil || out.signal != nil || left <= 0 || left >= warnBelow {
				continue
			}
			warned = true
			out.stopped = fmt.Errorf("renewals were not confirmed and %s was left before the lease's deadline", fmtDur(left))
			a.errorf("%s: renewals are not confirmed and %s is left: stopping the command before the lease's deadline: SIGTERM now, SIGKILL if the lease is lost",
				describeLease(lease), fmtDur(left))
			a.signal(pgid, syscall.SIGTERM)
			a.signal(pgid, syscall.SIGCONT)
		case <-lostCh:
			cause := context.Cause(lease.Context())
			if errors.Is(cause, tenure.ErrReleased) {
				lostCh = nil // released by tenure itself: not a loss (tenure releases only after the command)
				continue
			}
			stopForLoss(cause)
		case <-killC:
			killC = nil
			why := "SIGTERM"
			if out.lost == nil && out.signal != nil {
				why = signalName(out.signal)
			}
			a.errorf("the command did not exit within %s of %s: SIGKILL", fmtDur(c.grace), why)
			a.signal(pgid, syscall.SIGKILL)
		}
	}
	reclaimTTY(ttyFD, pgid)

	// A lease found lost when the command exits may have been lost while it
	// ran: report it rather than trust the command's result.
	if out.lost == nil {
		if err := lease.Err(); err != nil {
			out.lost = err
			a.errorf("%s lost by the time the command exited: %s", describeLease(lease), describeLoss(err))
		}
	}
	// Nothing of the command's group may outlive tenure, nor run once the
	// lease is released. The command is not reaped yet (on Linux), so its
	// group id is still its own.
	a.stopLeftovers(c, pgid, &out, w, sigCh, killAt)
	if !reaped {
		rp.disarm()
		waitErr = cmd.Wait()
	}
	out.code = exitCode(cmd, waitErr)
	if out.lost != nil {
		a.log.Debug("command ended after the lease was lost", "status", describeExit(cmd, waitErr))
	} else {
		a.log.Debug("command exited", "status", describeExit(cmd, waitErr), "exit_code", out.code)
	}
	return out, nil
}

// stopLeftovers ends the processes that the command left in its process
// group after it exited (background jobs of a shell script, which ignore
// SIGINT; children that ignore the signal passed on to the command): they
// get SIGTERM, then SIGKILL at killAt (when a grace period is already
// running) or after the grace period, at once when the lease was lost or
// when tenure is told to stop meanwhile. It returns when none is left (or
// killWait after SIGKILL). Processes that left the group (setsid, daemons)
// are not found: see the help text.
func (a *app) stopLeftovers(c command, pgid int, out *outcome, w *leaseWatch, sigCh <-chan os.Signal, killAt time.Time) {
	if !groupRunning(pgid) {
		return
	}
	lease := w.lease
	killed := false
	killNow := func(why string) {
		if !killed {
			a.errorf("%s: SIGKILL to the processes left in the command's process group %d", why, pgid)
			a.signal(pgid, syscall.SIGKILL)
			killed = true
		}
	}
	var deadline time.Time
	switch {
	case out.lost != nil:
		killNow("the lease was lost")
		deadline = time.Now().Add(killWait)
	default:
		if killAt.IsZero() {
			killAt = time.Now().Add(c.grace)
		}
		a.errorf("the command exited, but processes of its process group %d are still running; stopping them before the lease is released: SIGTERM now, SIGKILL in %s",
			pgid, fmtDur(max(0, time.Until(killAt))))
		a.signal(pgid, syscall.SIGTERM)
		a.signal(pgid, syscall.SIGCONT)
		deadline = killAt
	}
	lostCh := lease.Done()
	reaperDied := w.rp.died()
	tick := time.NewTicker(leftoverPoll)
	defer tick.Stop()
	for groupRunning(pgid) {
		if !time.Now().Before(deadline) {
			if killed {
				a.errorf("warning: processes of the command's process group %d are still there %s after SIGKILL", pgid, fmtDur(killWait))
				return
			}
			killNow(fmt.Sprintf("they did not exit within %s of SIGTERM", fmtDur(c.grace)))
			deadline = time.Now().Add(killWait)
		}
		select {
		case <-tick.C:
			if left := w.look(); left > 0 && left < stopMargin(lease.TTL()) && out.lost == nil {
				out.lost = noRenewalInTime(left, lease.TTL())
				killNow("renewals are not confirmed and the lease's deadline is near")
				deadline = time.Now().Add(killWait)
			}
		case s := <-sigCh:
			if isStopSignal(s) {
				killNow("received " + signalName(s))
				deadline = time.Now().Add(killWait)
			}
		case <-reaperDied:
			reaperDied = nil
			if w.rp.unexpected() {
				if out.lost == nil {
					out.lost = fmt.Errorf("the reaper that guards the command exited (%s): the command's processes ran unguarded", w.rp.status())
				}
				killNow("the reaper exited")
				deadline = time.Now().Add(killWait)
			}
		case <-lostCh:
			lostCh = nil
			if cause := context.Cause(lease.Context()); !errors.Is(cause, tenure.ErrReleased) {
				out.lost = cause
				a.errorf("%s lost while processes of the command's group ran: %s", describeLease(lease), describeLoss(cause))
				killNow("the lease was lost")
				deadline = time.Now().Add(killWait)
			}
		}
	}
}

// leaseWatch follows the lease while its command runs, for supervise: each
// look reads the time left (which also ends a lease whose deadline passed,
// Lease.Remaining reading the clock) and passes a new deadline on to the
// reaper.
type leaseWatch struct {
	lease      *tenure.Lease
	rp         *reaper
	sent       time.Time // the lease's deadline last sent to the reaper
	deadlineAt time.Time // the deadline on time.Now()'s clock, as of the last look
}

// watchEvery is how often supervise looks at a lease of ttl: a tenth of the
// TTL (a renewal's new deadline reaches the reaper long before the old one
// passes), from 10 ms to 500 ms.
func watchEvery(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 10*time.Millisecond), 500*time.Millisecond)
}

// look returns the time left on the lease (0 once it ended) and tells the
// reaper the deadline when it moved, less reapMargin. The deadline is read
// first and the clock before the time left, so that a renewal or a stall
// between the readings makes the reaper's deadline earlier, never later.
func (w *leaseWatch) look() time.Duration {
	d := w.lease.Deadline()
	clk := reaperClock()
	left := w.lease.Remaining()
	if left <= 0 {
		return 0
	}
	w.deadlineAt = time.Now().Add(left)
	if !d.Equal(w.sent) {
		w.rp.setDeadline(clk + int64(left-reapMargin(w.lease.TTL())))
		w.sent = d
	}
	return left
}

// stopMargin is how long before the lease's deadline tenure kills a
// command whose lease renewals are not getting through (a tenth of the
// TTL), and reapMargin when the reaper does, if tenure did not (a
// twentieth): the store expires the lease only ρ·TTL (1%) after the
// deadline, and the kill must land before another host can be granted it,
// whatever the reaper's or tenure's own scheduling delay.
func stopMargin(ttl time.Duration) time.Duration { return ttl / 10 }

func reapMargin(ttl time.Duration) time.Duration { return ttl / 20 }

// noRenewalInTime is why tenure stopped a command whose lease had only
// left before its deadline without a confirmed renewal.
func noRenewalInTime(left, ttl time.Duration) error {
	return fmt.Errorf("no renewal was confirmed in time: %s was left before the lease's deadline (TTL %s)", fmtDur(left), fmtDur(ttl))
}

// describeLease names a lease for messages: `lease on "R" (token N)`.
func describeLease(lease *tenure.Lease) string {
	return fmt.Sprintf("lease on %s (token %d)", quoteName(lease.Resource()), lease.Token())
}

// describeLoss says why a lease was lost, naming the new holder when the
// store said who it is; the holder's name is quoted.
func describeLoss(cause error) string {
	var le *tenure.LostError
	if !errors.As(cause, &le) {
		return errText(cause)
	}
	var s string
	switch {
	case errors.Is(le.Err, sqlite.ErrFileReplaced):
		// Not something another holder or an operator did to the lease: the
		// store's file itself is gone, and the store's error says which.
		return "the store's SQLite file was deleted or replaced while tenure held the lease: " + errText(le.Err)
	case errors.Is(le.Reason, tenure.ErrNotHolder):
		s = "the store says this grant no longer holds it (freed by an operator, expired in the store, or taken)"
	default:
		s = fmt.Sprintf("no renewal was confirmed in time (the last confirmed one was sent %s before; TTL %s)", fmtDur(le.SinceConfirmed), fmtDur(le.TTL))
	}
	var held *tenure.HeldError
	switch {
	case errors.As(le.Err, &held) && held.Holder.Owner != "":
		s += fmt.Sprintf("; now held by %s (token %d)", quoteName(held.Holder.Owner), held.Holder.Token)
	case le.Err != nil && !errors.Is(le.Reason, tenure.ErrNotHolder):
		s += ": " + errText(le.Err)
	}
	return s
}

// commandEnv returns env with the lease's variables set: TENURE_RESOURCE
// (the resource the user named), TENURE_OWNER, TENURE_TOKEN, and
// TENURE_SLOT when slot > 0.
func commandEnv(env []string, lease *tenure.Lease, resource string, slot int) []string {
	out := make([]string, 0, len(env)+4)
	for _, kv := range env {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "TENURE_RESOURCE", "TENURE_OWNER", "TENURE_TOKEN", "TENURE_SLOT", failpointEnv:
			continue
		}
		out = append(out, kv)
	}
	out = append(out,
		"TENURE_RESOURCE="+resource,
		"TENURE_OWNER="+lease.Owner(),
		"TENURE_TOKEN="+strconv.FormatUint(lease.Token(), 10),
	)
	if slot > 0 {
		out = append(out, "TENURE_SLOT="+strconv.Itoa(slot))
	}
	return out
}

func (a *app) signal(pgid int, sig syscall.Signal) {
	if err := signalGroup(pgid, sig); err != nil {
		a.errorf("warning: cannot send %s to the command's process group %d: %v", signalName(sig), pgid, err)
	}
}

// exitCode returns the command's exit status, or 128+N when signal N killed
// it.
func exitCode(cmd *exec.Cmd, waitErr error) int {
	ps := cmd.ProcessState
	if ps == nil {
		return exitSoftware
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	if c := ps.ExitCode(); c >= 0 {
		return c
	}
	return exitSoftware
}

func describeExit(cmd *exec.Cmd, waitErr error) string {
	if cmd.ProcessState != nil {
		return cmd.ProcessState.String()
	}
	if waitErr != nil {
		return waitErr.Error()
	}
	return "unknown"
}

// errorf prints a message to stderr as one line prefixed "tenure: ".
func (a *app) errorf(format string, args ...any) {
	fmt.Fprintf(a.stderr, "tenure: %s\n", oneLine(fmt.Sprintf(format, args...)))
}
