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
	s := &supervisor{a: a, c: c, lease: lease, sigCh: sigCh, m: marginsOf(lease.Timing(), c.grace)}
	defer s.close()
	if err := s.start(); err != nil {
		return outcome{}, err
	}
	s.follow()
	return s.finish(), nil
}

// supervisor runs one command under a lease, for supervise: start starts
// it, follow handles each event until it exits (one method per event, on*),
// and finish ends what it left and says how it ended. The fields are the
// state the events share.
type supervisor struct {
	a     *app
	c     command
	lease *tenure.Lease
	sigCh <-chan os.Signal
	m     margins

	cmd         *exec.Cmd
	pgid        int      // the command's process group (its pid)
	ttyFD       int      // the terminal whose foreground the command has, or -1
	gate, gateR *os.File // the gate's pipe (see prepare); nil without a reaper
	rp          *reaper  // nil where canReap is false
	w           *leaseWatch
	out         outcome
	waitErr     error // the command's Wait, once reaped
	reaped      bool  // the goroutine of watchExit reaped the command
	warned      bool  // SIGTERM was sent for renewals not confirmed
	killAt      time.Time
	watch       *time.Ticker // look at the lease every m.watch
	near, kill  *time.Timer  // near: m.kill before the deadline; kill: the grace period's end
	exited      chan struct{}
	stops       chan struct{}   // Ctrl-Z of a command in the terminal's foreground
	lost        <-chan struct{} // the lease's end, until a loss was handled
	reaperDied  <-chan struct{} // until the reaper's exit was handled
	killC       <-chan time.Time
}

// margins are how long before the lease's deadline the supervisor acts
// when renewals are not confirmed, and how often it looks at the lease.
// The deadline (Lease.Deadline: the last confirmed renewal's send time
// plus TTL·(1−ρ), docs/design.md) is the earliest time the store may
// expire the lease and grant it to another host, so every kill must land
// before it. They scale with the TTL, whose least value for run and elect
// is minTTL (1 s), and are ordered reap < kill < RenewWindow; each holds
// an invariant:
//
//   - term, min(--grace, RenewWindow/2): SIGTERM once less is left, so that
//     the command has its grace period before the deadline; at most half
//     the renew window (tenure.Timing), so that a lease renewed on
//     schedule, which never has less than the whole window left, is never
//     stopped, and a renewal's retries have the other half.
//   - kill, TTL/10: tenure's SIGKILL once less is left without a confirmed
//     renewal. It is far below the renew window (about two thirds of the
//     TTL), and leaves tenure's own wake-up and the signal's delivery 100
//     ms at the least TTL.
//   - reap, TTL/20: the reaper's SIGKILL, for a tenure that is stopped,
//     frozen or starved and did not kill at kill. It comes after tenure's
//     own, so that the reaper acts only when tenure could not, and leaves
//     the reaper's own wake-up 50 ms at the least TTL (its timer on
//     reaperClock, or its poll every reaperPoll where it has none).
//   - watch, TTL/10 within [10 ms, 500 ms]: how often the lease is looked
//     at, for the SIGTERM of term and to pass a renewed deadline on to the
//     reaper; the kill itself has a timer of its own (near).
type margins struct {
	term, kill, reap, watch time.Duration
}

// marginsOf returns the margins for a lease of timing t and --grace grace.
func marginsOf(t tenure.Timing, grace time.Duration) margins {
	return margins{
		term:  min(grace, t.RenewWindow/2),
		kill:  t.TTL / 10,
		reap:  t.TTL / 20,
		watch: min(max(t.TTL/10, 10*time.Millisecond), 500*time.Millisecond),
	}
}

// start starts the command: behind a gate and guarded by a reaper where
// canReap, the gate opened only once the reaper runs and the lease is
// checked again. An error is an exit error, and the command did not run.
func (s *supervisor) start() error {
	if err := s.prepare(); err != nil {
		return err
	}
	if err := s.cmd.Start(); err != nil {
		code := exitCannotExec
		if errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return fail(code, "%s: cannot run %s: %s", s.c.name, quoteName(s.c.argv[0]), errText(err))
	}
	s.pgid = s.cmd.Process.Pid
	failpoint("stop-after-start")
	s.a.log.Debug("command started", "pid", s.pgid, "command", s.c.argv[0], "foreground", s.ttyFD >= 0, "token", s.lease.Token())
	if err := s.startReaper(); err != nil {
		return err
	}
	s.w = &leaseWatch{lease: s.lease, rp: s.rp, reap: s.m.reap}
	s.w.look()
	if s.gate == nil {
		return nil
	}
	return s.openGate()
}

// prepare makes the command's exec.Cmd. Where a reaper guards the command,
// the process starts as this binary behind a gate (gateMain), which
// executes the command only once the reaper holds its process group and
// the lease's deadline: a tenure stopped or starved at any moment from
// then on cannot leave the command running past the deadline.
func (s *supervisor) prepare() error {
	a, c := s.a, s.c
	cmd := &exec.Cmd{Path: c.path, Args: c.argv}
	cmd.Env = commandEnv(os.Environ(), s.lease, c.resource, c.slot)
	if a.stdin != nil {
		cmd.Stdin = a.stdin
	}
	cmd.Stdout, cmd.Stderr = a.stdout, a.stderr
	if f, ok := a.stdout.(*outWriter); ok {
		cmd.Stdout = f.w // the command writes to the same stdout, not through tenure's
	}
	s.ttyFD = foregroundTTY(a.stdin)
	cmd.SysProcAttr = procAttr(s.ttyFD)
	s.cmd = cmd
	if !canReap {
		return nil
	}
	exe, gr, gw, err := gateCmd()
	if err != nil {
		return fail(exitSoftware, "%s: cannot prepare the command's start: %s", c.name, errText(err))
	}
	cmd.Path, cmd.Args = exe, append([]string{exe, gateArg, c.path}, c.argv...)
	cmd.ExtraFiles = []*os.File{gr}
	s.gate, s.gateR = gw, gr
	return nil
}

// startReaper starts the reaper, where canReap: if tenure dies (SIGKILL, a
// crash), it kills the command's group, as nobody renews the lease any
// more and the command must not run on. It is disarmed before the command
// is reaped. A command without its reaper would run unguarded, so it does
// not run when the reaper cannot start (a fork refused for a limit on open
// files or processes).
func (s *supervisor) startReaper() error {
	if !canReap {
		return nil
	}
	var err error
	if failpointSet("reaper-start-fails") {
		err = errors.New("failpoint reaper-start-fails")
	} else {
		s.rp, err = startReaper(s.pgid)
	}
	if err != nil {
		return s.notStarted(exitOSErr, "%s: cannot start the reaper that stops the command if tenure dies or stalls, so the command did not run: %s", s.c.name, errText(err))
	}
	return nil
}

// openGate lets the gate execute the command, after checking once more the
// reaper, which must still be there, and the lease: a pause since
// usableLease may have used it up.
func (s *supervisor) openGate() error {
	c, lease := s.c, s.lease
	select {
	case <-s.rp.died():
		return s.notStarted(exitOSErr, "%s: the reaper that guards the command exited (%s) before the command could start; the command did not run", c.name, s.rp.status())
	default:
	}
	if err := lease.Err(); err != nil {
		return s.notStarted(exitLost, "%s: the %s was lost before the command could start; the command did not run: %s", c.name, describeLease(lease), describeLoss(err))
	}
	if window := lease.Timing().RenewWindow; lease.Remaining() < window {
		return s.notStarted(exitUnavailable, "%s: the lease on %s had less than its renew window (%s) left when the command was to start (tenure was paused or starved); the command did not run",
			c.name, quoteName(lease.Resource()), fmtDur(window))
	}
	_, err := s.gate.Write([]byte{gateGo})
	s.gate.Close()
	if err != nil {
		return fail(exitSoftware, "%s: cannot start the command: %s", c.name, errText(err))
	}
	return nil
}

// notStarted ends the gate, which never ran the command, and returns why
// the command did not run.
func (s *supervisor) notStarted(code int, format string, args ...any) error {
	signalGroup(s.pgid, syscall.SIGKILL)
	s.rp.disarm()
	_ = s.cmd.Wait()
	return &notStartedError{exitError{code: code, msg: fmt.Sprintf(format, args...)}}
}

// close releases what start and follow hold, on every way out of
// supervise.
func (s *supervisor) close() {
	for _, t := range []*time.Timer{s.kill, s.near} {
		if t != nil {
			t.Stop()
		}
	}
	if s.watch != nil {
		s.watch.Stop()
	}
	s.rp.disarm()
	for _, f := range []*os.File{s.gate, s.gateR} {
		if f != nil {
			f.Close()
		}
	}
}

// follow handles the events of a running command until it exits. The
// lease's deadline bounds the command: the reaper learns every new
// deadline and kills the group when one passes (even while tenure is
// stopped), and tenure sends SIGTERM once less than m.term is left and
// SIGKILL once less than m.kill is (see margins) or the lease is lost.
func (s *supervisor) follow() {
	s.watchExit()
	s.lost = s.lease.Done()
	s.reaperDied = s.rp.died()
	s.watch = time.NewTicker(s.m.watch)
	s.near = time.NewTimer(max(time.Until(s.w.deadlineAt)-s.m.kill, 0))
	for {
		select {
		case <-s.exited:
			return
		case <-s.reaperDied:
			s.onReaperExit()
		case sig := <-s.sigCh:
			s.onSignal(sig)
		case <-s.stops:
			s.onSuspend()
		case <-s.near.C:
			s.onDeadlineNear()
		case <-s.watch.C:
			s.onWatch()
		case <-s.lost:
			s.onLeaseEnd()
		case <-s.killC:
			s.onGraceEnd()
		}
	}
}

// watchExit waits for the command's exit in a goroutine, without reaping
// it (see waitExited), so that its process group id stays reserved while
// tenure may still signal it; exited is closed then.
func (s *supervisor) watchExit() {
	s.exited = make(chan struct{})
	if s.ttyFD >= 0 {
		s.stops = make(chan struct{}, 1)
	}
	exited, stops := s.exited, s.stops
	go func() {
		if !waitExited(s.pgid, stops) {
			s.rp.disarm()
			s.waitErr = s.cmd.Wait()
			s.reaped = true
		}
		close(exited)
	}()
}

// onReaperExit: the reaper exited. Once disarmed, or with the lease already
// lost, that is expected. Otherwise it killed the group at the deadline
// (the lease is then lost, and handled as a loss), or it was killed:
// nothing would stop the command if tenure were now stopped or killed, so
// it is stopped as for a lost lease.
func (s *supervisor) onReaperExit() {
	s.reaperDied = nil
	if !s.rp.unexpected() || s.out.lost != nil {
		return
	}
	if s.lease.Err() != nil {
		if cause := context.Cause(s.lease.Context()); !errors.Is(cause, tenure.ErrReleased) {
			s.onLoss(cause)
			return
		}
	}
	s.out.lost = fmt.Errorf("the reaper that guards the command exited (%s): the command ran unguarded", s.rp.status())
	s.lost = nil
	s.a.errorf("the reaper that stops the command if tenure dies or stalls exited (%s): stopping the command: SIGKILL", s.rp.status())
	s.send(syscall.SIGKILL)
}

// onSignal passes a signal on to the command's group. The first that tells
// tenure to stop (isStopSignal) starts the grace period, after which the
// group gets SIGKILL (at once with --grace 0).
func (s *supervisor) onSignal(sig os.Signal) {
	s.a.log.Info("passing a signal on to the command", "signal", signalName(sig), "pgid", s.pgid)
	if ss, ok := sig.(syscall.Signal); ok {
		s.send(ss)
	}
	if !isStopSignal(sig) || s.out.signal != nil {
		return
	}
	s.out.signal = sig
	if s.c.grace == 0 {
		s.a.errorf("received %s: passed on to the command; --grace is 0: SIGKILL", signalName(sig))
		s.send(syscall.SIGKILL)
		return
	}
	s.a.log.Info("told to stop: the command gets SIGKILL if it has not exited after the grace period", "signal", signalName(sig), "grace", s.c.grace)
	s.startGrace(s.c.grace)
}

// onSuspend: the command in the terminal's foreground was stopped (Ctrl-Z);
// tenure stops too, and gives it the terminal back when continued.
func (s *supervisor) onSuspend() {
	s.a.log.Debug("the command was stopped; stopping tenure too", "pgid", s.pgid)
	suspend(s.ttyFD, s.pgid)
}

// onDeadlineNear: the time left is m.kill, as of the deadline last seen. If
// no renewal moved the deadline since, the command gets SIGKILL, before the
// reaper's margin and before the store can give the lease to anyone else.
func (s *supervisor) onDeadlineNear() {
	left := s.w.look()
	if s.out.lost != nil || left <= 0 {
		return // lost: s.lost has it, or will at once
	}
	if left > s.m.kill {
		s.near.Reset(left - s.m.kill)
		return
	}
	s.out.lost = noRenewalInTime(left, s.lease.TTL())
	s.lost = nil
	s.a.errorf("%s: renewals are not confirmed and the lease's deadline is %s away: stopping the command: SIGKILL", describeLease(s.lease), fmtDur(left))
	s.send(syscall.SIGKILL)
}

// onWatch looks at the lease (which passes a new deadline on to the reaper
// and moves near with it), and sends SIGTERM, once, when less than m.term
// is left without a confirmed renewal.
func (s *supervisor) onWatch() {
	left := s.w.look()
	if left > s.m.kill {
		s.near.Reset(left - s.m.kill)
	}
	if s.warned || s.out.lost != nil || s.out.signal != nil || left <= 0 || left >= s.m.term {
		return
	}
	s.warned = true
	s.out.stopped = fmt.Errorf("renewals were not confirmed and %s was left before the lease's deadline", fmtDur(left))
	s.a.errorf("%s: renewals are not confirmed and %s is left: stopping the command before the lease's deadline: SIGTERM now, SIGKILL if the lease is lost",
		describeLease(s.lease), fmtDur(left))
	s.send(syscall.SIGTERM)
	s.send(syscall.SIGCONT)
}

// onLeaseEnd: the lease ended. Released by tenure itself, it is no loss
// (tenure releases only after the command); otherwise it was lost.
func (s *supervisor) onLeaseEnd() {
	cause := context.Cause(s.lease.Context())
	if errors.Is(cause, tenure.ErrReleased) {
		s.lost = nil
		return
	}
	s.onLoss(cause)
}

// onLoss stops the command for a lost lease. After the deadline the store
// may already have granted the lease to another host: SIGKILL at once. A
// lease the store says is gone (freed by an operator) gives the command
// the grace period, up to the deadline.
func (s *supervisor) onLoss(cause error) {
	s.out.lost = cause
	s.lost = nil
	s.a.errorf("%s lost while the command ran: %s", describeLease(s.lease), describeLoss(cause))
	grace := min(s.c.grace, time.Until(s.w.deadlineAt))
	if errors.Is(cause, tenure.ErrLeaseExpired) || grace <= 0 {
		s.a.errorf("stopping the command: SIGKILL")
		s.send(syscall.SIGKILL)
		return
	}
	s.a.errorf("stopping the command: SIGTERM now, SIGKILL in %s", fmtDur(grace))
	s.send(syscall.SIGTERM)
	s.send(syscall.SIGCONT)
	s.startGrace(grace)
}

// startGrace has the group get SIGKILL d from now, or sooner if a grace
// period that ends sooner already runs.
func (s *supervisor) startGrace(d time.Duration) {
	at := time.Now().Add(d)
	if s.kill != nil {
		if at.Before(s.killAt) {
			s.killAt = at
			s.kill.Reset(d)
		}
		return
	}
	s.killAt = at
	s.kill = time.NewTimer(d)
	s.killC = s.kill.C
}

// onGraceEnd: the grace period after a loss or a stop signal has passed,
// and the command has not exited: SIGKILL.
func (s *supervisor) onGraceEnd() {
	s.killC = nil
	why := "SIGTERM"
	if s.out.lost == nil && s.out.signal != nil {
		why = signalName(s.out.signal)
	}
	s.a.errorf("the command did not exit within %s of %s: SIGKILL", fmtDur(s.c.grace), why)
	s.send(syscall.SIGKILL)
}

// finish runs once the command has exited: it takes the terminal back,
// reports a lease found lost by then (the command's result is then not
// trusted), stops what the command left in its group, reaps the command
// and returns the outcome.
func (s *supervisor) finish() outcome {
	reclaimTTY(s.ttyFD, s.pgid)
	if s.out.lost == nil {
		if err := s.lease.Err(); err != nil {
			s.out.lost = err
			s.a.errorf("%s lost by the time the command exited: %s", describeLease(s.lease), describeLoss(err))
		}
	}
	// Nothing of the command's group may outlive tenure, nor run once the
	// lease is released. The command is not reaped yet (on Linux), so its
	// group id is still its own.
	s.stopLeftovers()
	if !s.reaped {
		s.rp.disarm()
		s.waitErr = s.cmd.Wait()
	}
	s.out.code = exitCode(s.cmd, s.waitErr)
	if s.out.lost != nil {
		s.a.log.Debug("command ended after the lease was lost", "status", describeExit(s.cmd, s.waitErr))
	} else {
		s.a.log.Debug("command exited", "status", describeExit(s.cmd, s.waitErr), "exit_code", s.out.code)
	}
	return s.out
}

// send sends sig to the command's process group.
func (s *supervisor) send(sig syscall.Signal) { s.a.signal(s.pgid, sig) }

// leaseWatch follows the lease while its command runs, for supervise: each
// look reads the time left (which also ends a lease whose deadline passed,
// Lease.Remaining reading the clock) and passes a new deadline on to the
// reaper.
type leaseWatch struct {
	lease      *tenure.Lease
	rp         *reaper
	reap       time.Duration // margins.reap
	sent       time.Time     // the lease's deadline last sent to the reaper
	deadlineAt time.Time     // the deadline on time.Now()'s clock, as of the last look
}

// look returns the time left on the lease (0 once it ended) and tells the
// reaper the deadline when it moved, less the reaper's margin. The
// deadline is read first and the clock before the time left, so that a
// renewal or a stall between the readings makes the reaper's deadline
// earlier, never later.
func (w *leaseWatch) look() time.Duration {
	d := w.lease.Deadline()
	clk := reaperClock()
	left := w.lease.Remaining()
	if left <= 0 {
		return 0
	}
	w.deadlineAt = time.Now().Add(left)
	if !d.Equal(w.sent) {
		w.rp.setDeadline(clk + int64(left-w.reap))
		w.sent = d
	}
	return left
}

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
