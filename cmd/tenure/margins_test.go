package main

import (
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/memory"
)

// The supervisor's margins keep their order for every TTL that run and
// elect accept: the reaper kills after tenure and both before the deadline;
// a lease renewed on schedule is never stopped, and a renewal's retries
// keep half the renew window before SIGTERM.
func TestMarginsOrder(t *testing.T) {
	lk, err := tenure.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []time.Duration{minTTL, 1500 * time.Millisecond, 30 * time.Second, time.Hour} {
		for _, grace := range []time.Duration{0, time.Second, 10 * time.Second, 24 * time.Hour} {
			tm := lk.Timing(ttl)
			m := marginsOf(tm, grace)
			switch {
			case m.reap < 50*time.Millisecond:
				t.Errorf("TTL %v: the reaper's margin %v leaves it less than 50 ms to kill before the deadline", ttl, m.reap)
			case m.kill <= m.reap:
				t.Errorf("TTL %v: tenure's kill margin %v is not before the reaper's %v", ttl, m.kill, m.reap)
			case m.kill >= tm.RenewWindow:
				t.Errorf("TTL %v: the kill margin %v is not below the renew window %v", ttl, m.kill, tm.RenewWindow)
			case m.term > tm.RenewWindow/2 || m.term > grace:
				t.Errorf("TTL %v, grace %v: SIGTERM %v before the deadline, more than half the renew window %v or the grace period", ttl, grace, m.term, tm.RenewWindow)
			case m.watch <= 0 || m.watch > 500*time.Millisecond:
				t.Errorf("TTL %v: the lease is looked at every %v", ttl, m.watch)
			}
		}
	}
}
