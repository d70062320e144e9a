//go:build linux || darwin

package clock

import (
	"testing"
	"time"
)

// A suspend shows as the wall clock jumping ahead of the monotonic clock; the
// suspended time is then read from CLOCK_BOOTTIME and added to every later
// reading. A wall-clock step alone (NTP, an operator) adds nothing.
func TestSuspendedTimeFollowsBootClock(t *testing.T) {
	saved0, savedS, savedW := bootMinusMono0, suspended.Load(), wallMinusMon.Load()
	t.Cleanup(func() { bootMinusMono0 = saved0; suspended.Store(savedS); wallMinusMon.Store(savedW) })

	bootMinusMono0 = 1000
	suspended.Store(0)
	wallMinusMon.Store(0)
	bootReads := 0
	boot := func(v int64) func() int64 { return func() int64 { bootReads++; return v } }

	// No jump: no system call, nothing suspended.
	if s := suspendedAt(int64(time.Millisecond), boot(1000)); s != 0 || bootReads != 0 {
		t.Fatalf("steady: suspended %d, %d boot reads", s, bootReads)
	}
	// A 10 s suspend: wall and boot both ran 10 s ahead of monotonic.
	ten := int64(10 * time.Second)
	if s := suspendedAt(ten, boot(1000+ten)); s != ten || bootReads != 1 {
		t.Fatalf("after suspend: suspended %v, %d boot reads; want 10s, 1", time.Duration(s), bootReads)
	}
	// Later readings keep it without reading the boot clock again.
	if s := suspendedAt(ten, boot(0)); s != ten || bootReads != 1 {
		t.Fatalf("steady after suspend: %v, %d reads", time.Duration(s), bootReads)
	}
	// The wall clock stepped back an hour: the boot clock did not move, so
	// the suspended time stays, and never goes back.
	if s := suspendedAt(ten-int64(time.Hour), boot(1000+ten)); s != ten || bootReads != 2 {
		t.Fatalf("after a wall step: %v, %d reads", time.Duration(s), bootReads)
	}
}

func TestRealReadsBootClock(t *testing.T) {
	if d := bootMinusMono(); d < 0 {
		t.Fatalf("CLOCK_BOOTTIME behind CLOCK_MONOTONIC by %v", time.Duration(-d))
	}
}

// A process checkpointed and restored (CRIU, podman) runs on in a time
// namespace whose offsets make its CLOCK_BOOTTIME and CLOCK_MONOTONIC go
// on from the checkpoint; the host's boot clock counted the hour it was
// away, so the reading does too.
func TestRestoreIntoTimeNamespaceCountsAsSuspended(t *testing.T) {
	saved0, savedS, savedW, savedOff := bootMinusMono0, suspended.Load(), wallMinusMon.Load(), hostOffset
	t.Cleanup(func() {
		bootMinusMono0 = saved0
		suspended.Store(savedS)
		wallMinusMon.Store(savedW)
		hostOffset = savedOff
	})
	hostOffset = func() time.Duration { return 0 }
	bootMinusMono0 = bootMinusMono()
	suspended.Store(0)
	wallMinusMon.Store(0)
	// Restored an hour later: the namespace's clocks are an hour behind
	// the host's (a negative offset); the wall clock jumped an hour.
	hostOffset = func() time.Duration { return -time.Hour }
	s := time.Duration(suspendedAt(int64(time.Hour), bootMinusMono))
	if s < time.Hour-time.Millisecond || s > time.Hour+time.Second {
		t.Fatalf("after a restore an hour later: suspended %v; want an hour", s)
	}
}
