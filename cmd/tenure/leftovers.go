package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/tenure-go/tenure"
)

// leftoverPoll is how often the supervisor looks for processes left in the
// command's group after the command exited.
const leftoverPoll = 20 * time.Millisecond

// killWait bounds the wait for a process group to be gone after SIGKILL (a
// process in uninterruptible sleep dies when its I/O ends).
const killWait = 5 * time.Second

// leftovers ends the processes that the command left in its process group
// after it exited (see stopLeftovers). Each on* method handles one event.
type leftovers struct {
	s          *supervisor
	killed     bool      // SIGKILL was sent
	deadline   time.Time // SIGKILL then, or, once killed, give up then
	lost       <-chan struct{}
	reaperDied <-chan struct{}
}

// stopLeftovers ends the processes that the command left in its process
// group after it exited (background jobs of a shell script, which ignore
// SIGINT; children that ignore the signal passed on to the command): they
// get SIGTERM, then SIGKILL when the grace period that runs ends (killAt)
// or after a grace period of their own, at once when the lease was lost or
// when tenure is told to stop meanwhile. It returns when none is left (or
// killWait after SIGKILL). Processes that left the group (setsid, daemons)
// are not found: see the help text.
func (s *supervisor) stopLeftovers() {
	if !groupRunning(s.pgid) {
		return
	}
	l := &leftovers{s: s, lost: s.lease.Done(), reaperDied: s.rp.died()}
	if s.out.lost != nil {
		l.kill("the lease was lost")
	} else {
		l.term()
	}
	tick := time.NewTicker(leftoverPoll)
	defer tick.Stop()
	for groupRunning(s.pgid) {
		if !time.Now().Before(l.deadline) {
			if l.killed {
				s.a.errorf("warning: processes of the command's process group %d are still there %s after SIGKILL", s.pgid, fmtDur(killWait))
				return
			}
			l.kill(fmt.Sprintf("they did not exit within %s of SIGTERM", fmtDur(s.c.grace)))
		}
		select {
		case <-tick.C:
			l.onTick()
		case sig := <-s.sigCh:
			l.onSignal(sig)
		case <-l.reaperDied:
			l.onReaperExit()
		case <-l.lost:
			l.onLeaseEnd()
		}
	}
}

// term sends the group SIGTERM, with SIGKILL due at the end of the grace
// period that runs, or after a grace period from now.
func (l *leftovers) term() {
	s := l.s
	if s.killAt.IsZero() {
		s.killAt = time.Now().Add(s.c.grace)
	}
	s.a.errorf("the command exited, but processes of its process group %d are still running; stopping them before the lease is released: SIGTERM now, SIGKILL in %s",
		s.pgid, fmtDur(max(0, time.Until(s.killAt))))
	s.send(syscall.SIGTERM)
	s.send(syscall.SIGCONT)
	l.deadline = s.killAt
}

// kill sends the group SIGKILL, once, saying why, and waits for it to be
// gone at most killWait from now.
func (l *leftovers) kill(why string) {
	if !l.killed {
		l.s.a.errorf("%s: SIGKILL to the processes left in the command's process group %d", why, l.s.pgid)
		l.s.send(syscall.SIGKILL)
		l.killed = true
	}
	l.deadline = time.Now().Add(killWait)
}

// onTick: the deadline is near without a confirmed renewal (margins.kill):
// the lease is as good as lost.
func (l *leftovers) onTick() {
	s := l.s
	if left := s.w.look(); left > 0 && left < s.m.kill && s.out.lost == nil {
		s.out.lost = noRenewalInTime(left, s.lease.TTL())
		l.kill("renewals are not confirmed and the lease's deadline is near")
	}
}

// onSignal: tenure is told to stop; what is left gets SIGKILL.
func (l *leftovers) onSignal(sig os.Signal) {
	if isStopSignal(sig) {
		l.kill("received " + signalName(sig))
	}
}

// onReaperExit: the reaper exited unasked; the processes run unguarded.
func (l *leftovers) onReaperExit() {
	s := l.s
	l.reaperDied = nil
	if !s.rp.unexpected() {
		return
	}
	if s.out.lost == nil {
		s.out.lost = fmt.Errorf("the reaper that guards the command exited (%s): the command's processes ran unguarded", s.rp.status())
	}
	l.kill("the reaper exited")
}

// onLeaseEnd: the lease ended; unless tenure released it, it was lost.
func (l *leftovers) onLeaseEnd() {
	s := l.s
	l.lost = nil
	cause := context.Cause(s.lease.Context())
	if errors.Is(cause, tenure.ErrReleased) {
		return
	}
	s.out.lost = cause
	s.a.errorf("%s lost while processes of the command's group ran: %s", describeLease(s.lease), describeLoss(cause))
	l.kill("the lease was lost")
}
