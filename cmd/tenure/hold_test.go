//go:build linux

package main

// --hold-at-least: a job that cron starts on several hosts runs once per
// tick, even when the hosts' clocks differ by a few seconds.

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// cronHost is a host whose cron daemon starts "tenure run" at each tick of
// the host's own clock, which is skew ahead of the true time.
type cronHost struct {
	name string
	skew time.Duration
}

// runCron plays cron on every host for ticks ticks of period: at each tick
// k (true time base+k·period), host h starts tenure with args (then the
// job) when its own clock reads that time, that is skew earlier. The job
// records its start and end, tagged "tick-K/HOST". It returns the tenure
// processes, which have all exited.
//
// Only the start times depend on the hosts' clocks: tenure itself measures
// durations with the monotonic clock (the store decides expiry), so a skew
// is exactly a difference in when cron starts it.
func runCron(t *testing.T, e *env, hosts []cronHost, base time.Time, period time.Duration, ticks int, out string, args ...string) []*proc {
	t.Helper()
	var mu sync.Mutex
	var procs []*proc
	var wg sync.WaitGroup
	for k := 1; k <= ticks; k++ {
		for _, h := range hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Until(base.Add(time.Duration(k)*period - h.skew)))
				tag := fmt.Sprintf("tick-%d/%s", k, h.name)
				p := e.start(fmt.Sprintf("%s-tick-%d", h.name, k), startOpt{},
					"run", "--owner", h.name, append(args, helper("-out", out, "-tag", tag, "-hold", "200ms")...))
				mu.Lock()
				procs = append(procs, p)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	for _, p := range procs {
		p.wait(30 * time.Second)
	}
	return procs
}

// jobsPerTick counts the jobs that started, by tick.
func jobsPerTick(t *testing.T, out string) map[string][]string {
	runs := map[string][]string{}
	for _, ev := range filter(readEvents(t, out), "start") {
		tick, host, _ := strings.Cut(ev.tag, "/")
		runs[tick] = append(runs[tick], host)
	}
	return runs
}

// Two hosts run the same cron job every 10s; host a's clock is 1s ahead of
// host b's. With --hold-at-least 5s, each tick runs the job exactly once:
// b, starting it 1s after a for the same tick, finds the lease held (75),
// while the next tick finds it free. Without it, b runs the job again for
// the same tick. The margins leave 4 s either way for a process that is
// slow to start on a loaded machine (with 4 s ticks and a 2 s hold, a b
// started 1 s late but granted 2 s after a ran the job again in CI).
func TestHoldAtLeastRunsOncePerTick(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	hosts := []cronHost{{"a", time.Second}, {"b", 0}}
	const period, hold, ticks = 10 * time.Second, 5 * time.Second, 3

	out := e.path("held.events")
	base := time.Now().Add(time.Second)
	procs := runCron(t, e, hosts, base, period, ticks, out, "--no-wait", "--hold-at-least", hold.String(), "--ttl", "10s", "daily-job", "--")
	runs := jobsPerTick(t, out)
	for k := 1; k <= ticks; k++ {
		tick := fmt.Sprintf("tick-%d", k)
		if len(runs[tick]) != 1 {
			t.Errorf("%s: the job ran on %v, want exactly once", tick, runs[tick])
		}
	}
	for _, p := range procs {
		if p.code != 0 && p.code != exitNotAcquired {
			t.Errorf("%s exited %d:\n%s", p.name, p.code, p.stderr())
		}
		if p.code == exitNotAcquired && !strings.Contains(p.stderr(), "is held by") {
			t.Errorf("%s: exit 75 without naming the holder:\n%s", p.name, p.stderr())
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("with --hold-at-least %v: one run per tick: %v", hold, runs)

	// The lease is kept for the rest of the hold after the job, then expires.
	p := e.start("after", startOpt{}, "run", "--hold-at-least", "20s", "kept", "--", "true")
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.stderr())
	}
	if code, stdout, _ := e.run("status", "kept"); code != 0 {
		t.Fatalf("the lease is not kept after a job shorter than --hold-at-least:\n%s", stdout)
	}

	// Without --hold-at-least: the late host runs the job again.
	out = e.path("plain.events")
	base = time.Now().Add(time.Second)
	runCron(t, e, hosts, base, period, 1, out, "--no-wait", "--ttl", "10s", "daily-job", "--")
	if runs := jobsPerTick(t, out); len(runs["tick-1"]) != 2 {
		t.Logf("without --hold-at-least the job ran on %v for one tick (expected twice; the host was too slow to show it)", runs["tick-1"])
	} else {
		t.Logf("without --hold-at-least the job ran twice for one tick: %v", runs["tick-1"])
	}
}

// A --hold-at-least the store cannot keep is refused before anything runs,
// in a sentence that says why.
func TestHoldAtLeastBeyondTheStore(t *testing.T) {
	e := newEnv(t)
	code, _, errOut := e.run("run", "--hold-at-least", "2562047h", "demo", "--", "true")
	if code != exitUsage || !strings.Contains(errOut, "cannot keep this one: ") || !strings.Contains(errOut, "maximum") {
		t.Fatalf("exit %d, stderr %q; want 64 and the store's maximum", code, errOut)
	}
	if _, err := os.Stat(e.db); err == nil {
		t.Fatal("the refused run created the store's file")
	}
}
