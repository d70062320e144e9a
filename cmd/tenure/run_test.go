//go:build linux

package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// Two "tenure run --no-wait" on one resource started together: exactly one
// runs its command, the other exits 75 and names the holder.
func TestRunNoWaitExcludes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	checkNoWaitExcludes(t, e, "job")
}

// checkNoWaitExcludes starts two "tenure run --no-wait" on resource at
// once: exactly one runs its command; the other exits 75 naming the holder.
func checkNoWaitExcludes(t *testing.T, e *env, resource string) {
	t.Helper()
	ran := e.path("ran")
	start := func(name string) *proc {
		return e.start(name, startOpt{stdinPipe: true}, "run", "--no-wait", "--owner", name, resource, "--",
			helper("-out", ran, "-ready", e.path(name+".ready"), "-hold", "stdin"))
	}
	a, b := start("alpha"), start("beta")

	var winner, loser *proc
	select {
	case <-a.done:
		loser, winner = a, b
	case <-b.done:
		loser, winner = b, a
	case <-time.After(30 * time.Second):
		t.Fatalf("neither exited; stderr:\n%s\n%s", a.stderr(), b.stderr())
	}
	if loser.code != exitNotAcquired {
		t.Fatalf("%s exited %d, want %d; stderr:\n%s", loser.name, loser.code, exitNotAcquired, loser.stderr())
	}
	// The winner's command is running; it holds the lease.
	info := waitReady(t, e.path(winner.name+".ready"), 10*time.Second)
	if !strings.HasPrefix(info.owner, winner.name+"#") {
		t.Fatalf("winner's TENURE_OWNER = %q, want %s#NONCE", info.owner, winner.name)
	}
	msg := loser.stderr()
	if !strings.HasPrefix(msg, "tenure: ") || !strings.Contains(msg, info.owner) || !strings.Contains(msg, "token "+strconv.FormatUint(info.token, 10)) {
		t.Fatalf("loser's stderr should name the holder %s and its token %d:\n%s", info.owner, info.token, msg)
	}
	if _, err := os.Stat(e.path(loser.name + ".ready")); err == nil {
		t.Fatalf("the loser's command ran too")
	}

	winner.stdin.Close()
	if code := winner.wait(30 * time.Second); code != 0 {
		t.Fatalf("winner exited %d; stderr:\n%s", code, winner.stderr())
	}
	if n := len(filter(readEvents(t, ran), "start")); n != 1 {
		t.Fatalf("%d commands ran, want exactly 1", n)
	}
}

// Ten "tenure run --wait 60s" on one resource: all run, one at a time, with
// increasing fencing tokens.
func TestRunWaitSerializes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	checkWaitSerializes(t, e, "job", 10)
}

// checkWaitSerializes starts n "tenure run --wait 60s" on resource at once:
// all run, one at a time, with fencing tokens increasing in start order.
func checkWaitSerializes(t *testing.T, e *env, resource string, n int) {
	t.Helper()
	out := e.path("events")
	var procs []*proc
	for i := range n {
		procs = append(procs, e.start("p"+strconv.Itoa(i), startOpt{}, "run", "--wait", "60s", "--ttl", "5s", resource, "--",
			helper("-out", out, "-hold", "30ms")))
	}
	for _, p := range procs {
		if code := p.wait(60 * time.Second); code != 0 {
			t.Fatalf("%s exited %d; stderr:\n%s", p.name, code, p.stderr())
		}
	}
	evs := readEvents(t, out)
	starts, ends := filter(evs, "start"), filter(evs, "end")
	if len(starts) != n || len(ends) != n {
		t.Fatalf("%d starts and %d ends, want %d each", len(starts), len(ends), n)
	}
	endOf := map[uint64]int64{}
	for _, e := range ends {
		endOf[e.token] = e.mono
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].mono < starts[j].mono })
	for i, s := range starts {
		end, ok := endOf[s.token]
		if !ok || end < s.mono {
			t.Fatalf("token %d: no end after its start", s.token)
		}
		if i == 0 {
			continue
		}
		prev := starts[i-1]
		if s.token <= prev.token {
			t.Fatalf("tokens do not increase in start order: %d then %d", prev.token, s.token)
		}
		if endOf[prev.token] >= s.mono {
			t.Fatalf("token %d started %v before token %d ended", s.token, time.Duration(endOf[prev.token]-s.mono), prev.token)
		}
	}
	span := time.Duration(endOf[starts[n-1].token] - starts[0].mono)
	t.Logf("%d commands ran one at a time in %v", n, span.Round(time.Millisecond))
}

// tenure killed with SIGKILL while its command runs: nobody renews the
// lease any more, so the command must not run on (another host runs its
// copy once the TTL has passed). The reaper kills the command's whole
// process group, a grandchild included, as soon as tenure is gone.
func TestRunSIGKILLOfTenureStopsTheCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	child, grandchild := e.path("child.ready"), e.path("grandchild.ready")
	script := strings.Join(helper("-ready", grandchild, "-hold", "1h"), " ") + " & exec " +
		strings.Join(helper("-ready", child, "-hold", "1h"), " ")
	a := e.start("alpha", startOpt{}, "run", "--ttl", "30s", "--owner", "alpha", "job", "--", "sh", "-c", script)
	ci := waitReady(t, child, 10*time.Second)
	gi := waitReady(t, grandchild, 10*time.Second)

	syscall.Kill(a.pid(), syscall.SIGKILL) // tenure only, not its command's group
	waitFor(t, 10*time.Second, "the command and its child to be killed", func() bool {
		return processGone(ci.pid) && processGone(gi.pid)
	})
	if code := a.wait(10 * time.Second); code != -1 {
		t.Fatalf("tenure exited %d; want killed by SIGKILL", code)
	}
	waitFor(t, 10*time.Second, "the reaper's message", func() bool {
		return strings.Contains(a.stderr(), "reaper: tenure is gone")
	})
}

// A holder killed with SIGKILL (tenure and its command): a waiting process
// gets the lease once the store expires it, within TTL plus one retry
// interval, and not before the dead holder's lease ran out.
func TestRunTakeoverAfterSIGKILL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ttl = 2 * time.Second
	const retry = time.Second // tenure.DefaultRetryInterval
	a := e.start("alpha", startOpt{}, "run", "--ttl", ttl.String(), "--owner", "alpha", "job", "--",
		helper("-ready", e.path("alpha.ready"), "-hold", "1h"))
	ai := waitReady(t, e.path("alpha.ready"), 10*time.Second)

	out := e.path("beta.events")
	b := e.start("beta", startOpt{}, "--log-level", "info", "run", "--ttl", ttl.String(), "--wait", "30s", "--owner", "beta", "job", "--",
		helper("-out", out))
	waitFor(t, 10*time.Second, "beta to wait", func() bool { return strings.Contains(b.stderr(), "resource is held; waiting") })

	killed := mono()
	syscall.Kill(-a.pid(), syscall.SIGKILL)
	syscall.Kill(-ai.pid, syscall.SIGKILL)
	if code := b.wait(30 * time.Second); code != 0 {
		t.Fatalf("beta exited %d; stderr:\n%s", code, b.stderr())
	}
	starts := filter(readEvents(t, out), "start")
	if len(starts) != 1 {
		t.Fatalf("beta's command started %d times", len(starts))
	}
	takeover := time.Duration(starts[0].mono - killed)
	t.Logf("SIGKILL to takeover: %v (TTL %v, retry interval %v)", takeover.Round(time.Millisecond), ttl, retry)
	// The store kept the lease for at least 2/3 of the TTL (the holder renewed
	// every TTL/3), and the waiter retries at least once per retry interval.
	if takeover < ttl/2 {
		t.Fatalf("beta got the lease %v after the holder died: before the holder's lease expired", takeover)
	}
	if limit := ttl + retry + schedSlack; takeover > limit {
		t.Fatalf("beta got the lease %v after the holder died, more than %v", takeover, limit)
	}
	if starts[0].token <= ai.token {
		t.Fatalf("beta's token %d is not above alpha's %d", starts[0].token, ai.token)
	}
}

// A holder's process groups (tenure and its command) stopped with SIGSTOP for
// twice the TTL, then resumed: meanwhile another process got the lease with
// a larger token; the reaper (in a group of its own) killed the stopped
// command at the lease's deadline, and the resumed tenure exits 79.
func TestRunStoppedHolderLosesLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ttl = time.Second
	aOut := e.path("alpha.events")
	a := e.start("alpha", startOpt{}, "run", "--ttl", ttl.String(), "--grace", "5s", "--owner", "alpha", "job", "--",
		helper("-out", aOut, "-ready", e.path("alpha.ready"), "-hold", "1h", "-beat"))
	ai := waitReady(t, e.path("alpha.ready"), 10*time.Second)

	bOut := e.path("beta.events")
	b := e.start("beta", startOpt{stdinPipe: true}, "--log-level", "info", "run", "--ttl", ttl.String(), "--wait", "30s", "--owner", "beta", "job", "--",
		helper("-out", bOut, "-hold", "stdin"))
	waitFor(t, 10*time.Second, "beta to wait", func() bool { return strings.Contains(b.stderr(), "resource is held; waiting") })

	// Stop the holder, but not in the middle of a write to the store: a
	// SQLite writer stopped inside its transaction keeps the database's write
	// lock, and nobody could take the lease until it resumes.
	var stopped int64
	for try := 0; ; try++ {
		stopped = mono()
		syscall.Kill(-a.pid(), syscall.SIGSTOP)
		syscall.Kill(-ai.pid, syscall.SIGSTOP)
		waitFor(t, 10*time.Second, "alpha to stop", func() bool { return processState(a.pid()) == "T" })
		if !holdsWriteLock(a.pid(), e.db) && !holdsWriteLock(a.pid(), e.db+"-shm") {
			break
		}
		if try == 100 {
			t.Fatalf("alpha always holds the store's write lock")
		}
		syscall.Kill(-a.pid(), syscall.SIGCONT)
		syscall.Kill(-ai.pid, syscall.SIGCONT)
		time.Sleep(20 * time.Millisecond)
	}
	var bStart event
	waitFor(t, 15*time.Second, "beta's command to start", func() bool {
		s := filter(readEvents(t, bOut), "start")
		if len(s) > 0 {
			bStart = s[0]
		}
		return len(s) > 0
	})
	if bStart.token <= ai.token {
		t.Fatalf("beta's token %d is not above alpha's %d", bStart.token, ai.token)
	}
	// The fault: the holder stays stopped for twice its TTL.
	if d := time.Duration(stopped + int64(2*ttl) - mono()); d > 0 {
		time.Sleep(d)
	}
	resumed := mono()
	syscall.Kill(-a.pid(), syscall.SIGCONT)
	syscall.Kill(-ai.pid, syscall.SIGCONT)

	if code := a.wait(10 * time.Second); code != exitLost {
		t.Fatalf("alpha exited %d, want %d; stderr:\n%s", code, exitLost, a.stderr())
	}
	if msg := a.stderr(); !strings.Contains(msg, "lost") || !strings.Contains(msg, "reaper") {
		t.Fatalf("alpha's stderr should say the lease was lost and the reaper killed the command:\n%s", msg)
	}
	waitFor(t, 5*time.Second, "alpha's command to be gone", func() bool { return processGone(ai.pid) })
	evs := readEvents(t, aOut)
	if len(filter(evs, "end")) != 0 {
		t.Fatalf("alpha's command ran to its end")
	}
	var last int64
	for _, ev := range filter(evs, "beat") {
		last = max(last, ev.mono)
	}
	ranOn := time.Duration(last - resumed)
	t.Logf("alpha's command: last beat %v after SIGCONT; beta got token %d (alpha had %d) %v after SIGSTOP",
		ranOn.Round(time.Millisecond), bStart.token, ai.token, time.Duration(bStart.mono-stopped).Round(time.Millisecond))
	if ranOn > 500*time.Millisecond {
		t.Fatalf("alpha's command ran on for %v after it resumed", ranOn)
	}

	b.stdin.Close()
	if code := b.wait(10 * time.Second); code != 0 {
		t.Fatalf("beta exited %d; stderr:\n%s", code, b.stderr())
	}
}

// The lease freed under a running command by "tenure release --force": the
// command, which ignores SIGTERM, gets SIGTERM, then SIGKILL after --grace;
// tenure exits 79.
func TestRunLostLeaseGraceThenKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const grace = time.Second
	out := e.path("alpha.events")
	a := e.start("alpha", startOpt{}, "run", "--ttl", "3s", "--grace", grace.String(), "--owner", "alpha", "job", "--",
		helper("-out", out, "-ready", e.path("alpha.ready"), "-hold", "1h", "-beat", "-signals", "ignore"))
	ai := waitReady(t, e.path("alpha.ready"), 10*time.Second)

	code, stdout, stderr := e.run("release", "--force", "job")
	if code != 0 || !strings.Contains(stdout, "released") {
		t.Fatalf("release --force: exit %d\n%s%s", code, stdout, stderr)
	}
	if code := a.wait(15 * time.Second); code != exitLost {
		t.Fatalf("alpha exited %d, want %d; stderr:\n%s", code, exitLost, a.stderr())
	}
	if msg := a.stderr(); !strings.Contains(msg, "lost") || !strings.Contains(msg, "SIGKILL") {
		t.Fatalf("alpha's stderr should report the loss and the SIGKILL:\n%s", msg)
	}
	// Once: tenure's sentence, not also the library's "lease lost" warning
	// (a new user saw both, one after the other).
	if msg := a.stderr(); strings.Count(msg, "lost while the command ran") != 1 || strings.Contains(msg, `msg="lease lost"`) {
		t.Fatalf("alpha's stderr should report the loss once:\n%s", msg)
	}
	waitFor(t, 5*time.Second, "alpha's command to be gone", func() bool { return processGone(ai.pid) })

	evs := readEvents(t, out)
	sigs := filter(evs, "signal")
	if len(sigs) != 1 || sigs[0].sig != "SIGTERM" {
		t.Fatalf("the command got signals %+v, want one SIGTERM", sigs)
	}
	var last int64
	for _, ev := range filter(evs, "beat") {
		last = max(last, ev.mono)
	}
	ranOn := time.Duration(last - sigs[0].mono)
	t.Logf("the command ran %v after SIGTERM (grace %v)", ranOn.Round(time.Millisecond), grace)
	if ranOn < grace-200*time.Millisecond || ranOn > grace+500*time.Millisecond {
		t.Fatalf("the command ran %v after SIGTERM, want about the grace period %v", ranOn, grace)
	}
	if len(filter(evs, "end")) != 0 {
		t.Fatalf("the command ran to its end")
	}
}

// SIGINT, SIGTERM and SIGHUP sent to tenure reach the command; tenure then
// releases the lease and exits with the command's status.
func TestRunForwardsSignals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		name := strings.ToLower(strings.TrimPrefix(sigName(sig), "SIG"))
		out := e.path(name + ".events")
		ready := e.path(name + ".ready")
		p := e.start(name, startOpt{}, "run", "--owner", name, "job", "--",
			helper("-out", out, "-ready", ready, "-hold", "1h", "-signals", "exit42"))
		waitReady(t, ready, 10*time.Second)
		if err := syscall.Kill(p.pid(), sig); err != nil { // tenure alone, not its group
			t.Fatal(err)
		}
		if code := p.wait(10 * time.Second); code != 42 {
			t.Fatalf("%s: tenure exited %d, want the command's 42; stderr:\n%s", sigName(sig), code, p.stderr())
		}
		got := filter(readEvents(t, out), "signal")
		if len(got) != 1 || got[0].sig != sigName(sig) {
			t.Fatalf("the command got %+v, want %s", got, sigName(sig))
		}
		if code, stdout, _ := e.run("status", "job"); code != exitFree {
			t.Fatalf("%s: status exit %d after tenure exited, want 1 (free):\n%s", sigName(sig), code, stdout)
		}
	}
}

func sigName(s syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP"}[s]
}

// SIGTERM or SIGINT while waiting for the lease: tenure stops waiting and
// exits 128+N without running the command.
func TestRunSignalWhileWaiting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.start("alpha", startOpt{stdinPipe: true}, "run", "--owner", "alpha", "job", "--",
		helper("-ready", e.path("alpha.ready"), "-hold", "stdin"))
	waitReady(t, e.path("alpha.ready"), 10*time.Second)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		out := e.path("waiter.events")
		w := e.start("waiter-"+sigName(sig), startOpt{}, "--log-level", "info", "run", "--owner", "waiter", "job", "--", helper("-out", out))
		waitFor(t, 10*time.Second, "the waiter to wait", func() bool { return strings.Contains(w.stderr(), "resource is held; waiting") })
		start := time.Now()
		syscall.Kill(w.pid(), sig)
		if code := w.wait(10 * time.Second); code != 128+int(sig) {
			t.Fatalf("waiter exited %d after %s, want %d; stderr:\n%s", code, sigName(sig), 128+int(sig), w.stderr())
		}
		t.Logf("%s: the waiter exited %v after the signal", sigName(sig), time.Since(start).Round(time.Millisecond))
		if !strings.Contains(w.stderr(), "stopped waiting") {
			t.Fatalf("waiter's stderr:\n%s", w.stderr())
		}
		if len(readEvents(t, out)) != 0 {
			t.Fatalf("the waiter's command ran")
		}
	}
	a.stdin.Close()
	if code := a.wait(10 * time.Second); code != 0 {
		t.Fatalf("alpha exited %d; stderr:\n%s", code, a.stderr())
	}
}

// Exit codes of bad arguments, bad stores and commands that cannot run.
func TestRunExitCodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cmd := helper()
	usageCases := []struct {
		name string
		args []string
	}{
		{"empty resource", []string{"run", "", "--", cmd[0]}},
		{"resource not UTF-8", []string{"run", "a\xffb", "--", cmd[0]}},
		{"resource too long", []string{"run", strings.Repeat("r", 257), "--", cmd[0]}},
		{"ttl 0", []string{"run", "--ttl", "0", "job", "--", cmd[0]}},
		{"ttl -1s", []string{"run", "--ttl", "-1s", "job", "--", cmd[0]}},
		{"ttl not a duration", []string{"run", "--ttl", "soon", "job", "--", cmd[0]}},
		{"wait and no-wait", []string{"run", "--wait", "5s", "--no-wait", "job", "--", cmd[0]}},
		{"negative wait", []string{"run", "--wait", "-5s", "job", "--", cmd[0]}},
		{"negative grace", []string{"run", "--grace", "-1s", "job", "--", cmd[0]}},
		{"bad owner", []string{"run", "--owner", "a#b", "job", "--", cmd[0]}},
		{"empty owner", []string{"run", "--owner", "", "job", "--", cmd[0]}},
		{"no command", []string{"run", "job"}},
		{"no command after --", []string{"run", "job", "--"}},
		{"no --", []string{"run", "job", cmd[0]}},
		{"two resources", []string{"run", "a", "b", "--", cmd[0]}},
		{"nothing", []string{"run"}},
		{"unknown flag", []string{"run", "--frobnicate", "job", "--", cmd[0]}},
		{"bad log level", []string{"--log-level", "loud", "run", "job", "--", cmd[0]}},
		{"unknown command", []string{"frobnicate"}},
		{"status without resource", []string{"status"}},
		{"release without owner or force", []string{"release", "job"}},
		{"release with owner and force", []string{"release", "job", "--owner", "x", "--force"}},
		{"list with two prefixes", []string{"list", "a", "b"}},
		{"init with an argument", []string{"init", "x"}},
	}
	for _, c := range usageCases {
		code, _, stderr := e.run(c.args)
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d; stderr:\n%s", c.name, code, exitUsage, stderr)
			continue
		}
		if !strings.HasPrefix(stderr, "tenure: ") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%s: want one line starting with \"tenure: \", got:\n%s", c.name, stderr)
		}
	}
	// Arguments are checked before any I/O: the store was never even opened.
	if _, err := os.Stat(e.db); !os.IsNotExist(err) {
		t.Fatalf("the store file exists after usage errors only (%v)", err)
	}
	// Inspection creates nothing either: a missing store holds no lease.
	if code, stdout, stderr := e.run("list", "--json"); code != 0 || strings.TrimSpace(stdout) != "[]" || stderr != "" {
		t.Fatalf("list of a missing store: exit %d, %s%s; want an empty list", code, stdout, stderr)
	}
	if _, err := os.Stat(e.db); !os.IsNotExist(err) {
		t.Fatalf("list created the store file (%v)", err)
	}

	// An unknown scheme is a usage error that names the known schemes.
	code, _, stderr := e.run("--store", "bogus://x", "run", "job", "--", cmd[0])
	if code != exitUsage || !strings.Contains(stderr, "sqlite") || !strings.Contains(stderr, "bogus") {
		t.Fatalf("--store bogus://x: exit %d, want %d naming sqlite:\n%s", code, exitUsage, stderr)
	}

	// Other stores' URLs: a bad one is 64, an unreachable cluster 69; no
	// password is shown.
	code, _, stderr = e.run("--store", "cassandra://u:secret@127.0.0.1:1,h2/ks", "status", "job")
	if code != exitUsage || !strings.Contains(stderr, "bad store URL: cassandra store: ") || strings.Contains(stderr, "secret") {
		t.Fatalf("bad cassandra URL: exit %d, want %d:\n%s", code, exitUsage, stderr)
	}
	code, _, stderr = e.run("--store", "cassandra://u:secret@127.0.0.1:1/ks?connect_timeout=1s&timeout=1s", "status", "job")
	if code != exitUnavailable || strings.Contains(stderr, "secret") {
		t.Fatalf("unreachable cassandra: exit %d, want %d:\n%s", code, exitUnavailable, stderr)
	}

	code, _, stderr = e.run("--store", "postgres://u:secret@127.0.0.1:1/db?sslmode=frob", "list")
	if code != exitUsage || strings.Contains(stderr, "secret") {
		t.Fatalf("bad postgres URL: exit %d, want %d:\n%s", code, exitUsage, stderr)
	}
	code, _, stderr = e.run("--store", "postgres://u:secret@127.0.0.1:1/db?connect_timeout=1", "init")
	if code != exitUnavailable || strings.Contains(stderr, "secret") {
		t.Fatalf("unreachable postgres: exit %d, want %d:\n%s", code, exitUnavailable, stderr)
	}

	// init of a SQLite store creates the file.
	initDB := e.path("init.db")
	code, stdout, stderr := e.run("--store", "sqlite:"+initDB, "init")
	if _, err := os.Stat(initDB); code != 0 || err != nil || !strings.Contains(stdout, "store ready") {
		t.Fatalf("init: exit %d, file: %v\n%s%s", code, err, stdout, stderr)
	}

	// A store that cannot be opened: 69, quickly.
	start := time.Now()
	code, _, stderr = e.run("--store", "sqlite:/nonexistent-dir/x.db", "run", "job", "--", cmd[0])
	if code != exitUnavailable || !strings.HasPrefix(stderr, "tenure: ") {
		t.Fatalf("unreachable store: exit %d, want %d:\n%s", code, exitUnavailable, stderr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("unreachable store: took %v", d)
	}

	// A command that cannot be run: 127 or 126 (found before the lease is
	// acquired: see TestCommandLookedUpFirst), and the lease is free.
	e.init()
	notExec := e.path("not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd  string
		want int
	}{
		{"tenure-test-no-such-command", exitNotFound},
		{e.path("no-such-file"), exitNotFound},
		{notExec, exitCannotExec},
		{e.dir, exitCannotExec},
	} {
		code, _, stderr := e.run("run", "job", "--", c.cmd)
		if code != c.want || !strings.Contains(stderr, "cannot run") {
			t.Errorf("run %s: exit %d, want %d:\n%s", c.cmd, code, c.want, stderr)
		}
		if code, stdout, _ := e.run("status", "job"); code != exitFree {
			t.Errorf("run %s: the lease was not released: status exit %d\n%s", c.cmd, code, stdout)
		}
	}

	// The command's exit status, and 128+N when a signal killed it.
	if code, _, stderr := e.run("run", "job", "--", helper("-exit", "3")); code != 3 {
		t.Errorf("command exiting 3: tenure exited %d\n%s", code, stderr)
	}
	if code, _, stderr := e.run("run", "job", "--", "/bin/sh", "-c", "kill -KILL $$"); code != 128+9 {
		t.Errorf("command killed by SIGKILL: tenure exited %d, want 137\n%s", code, stderr)
	}
}

// status, list and release, in text and JSON.
func TestStatusListRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	holders := map[string]*proc{}
	infos := map[string]readyInfo{}
	for _, h := range []struct{ owner, resource string }{{"alpha", "jobs/a"}, {"beta", "jobs/b"}, {"gamma", "other/c"}} {
		holders[h.resource] = e.start(h.owner, startOpt{stdinPipe: true}, "run", "--ttl", "3s", "--owner", h.owner, h.resource, "--",
			helper("-ready", e.path(h.owner+".ready"), "-hold", "stdin"))
	}
	for _, o := range []string{"alpha", "beta", "gamma"} {
		infos[o] = waitReady(t, e.path(o+".ready"), 10*time.Second)
	}
	alpha := infos["alpha"]

	// status, text.
	code, stdout, stderr := e.run("status", "jobs/a")
	if code != 0 {
		t.Fatalf("status jobs/a: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"jobs/a", alpha.owner, "token:", strconv.FormatUint(alpha.token, 10), "ttl:", "3s", "left:"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("status jobs/a should show %q:\n%s", want, stdout)
		}
	}
	// status, JSON.
	code, stdout, _ = e.run("status", "jobs/a", "--json")
	var st leaseJSON
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
		t.Fatalf("status --json: exit %d, %v:\n%s", code, err, stdout)
	}
	if !st.Held || st.Resource != "jobs/a" || st.Owner != alpha.owner || st.OwnerID != "alpha" || st.Token != alpha.token ||
		st.TTLMs != 3000 || st.RemainingMs <= 0 || st.RemainingMs > 3000 {
		t.Fatalf("status --json = %+v", st)
	}
	// status of a free resource.
	code, stdout, _ = e.run("status", "jobs/none")
	if code != exitFree || !strings.Contains(stdout, "free") {
		t.Fatalf("status of a free resource: exit %d:\n%s", code, stdout)
	}
	code, stdout, _ = e.run("status", "jobs/none", "--json")
	st = leaseJSON{}
	if err := json.Unmarshal([]byte(stdout), &st); code != exitFree || err != nil || st.Held || st.Resource != "jobs/none" {
		t.Fatalf("status --json of a free resource: exit %d, %+v, %v", code, st, err)
	}

	// list, table.
	code, stdout, _ = e.run("list")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "RESOURCE OWNER TOKEN TTL LEFT" {
		t.Fatalf("list: exit %d:\n%s", code, stdout)
	}
	for i, want := range []string{"jobs/a", "jobs/b", "other/c"} {
		f := strings.Fields(lines[i+1])
		owner := []string{"alpha", "beta", "gamma"}[i]
		if len(f) != 5 || f[0] != want || f[1] != infos[owner].owner || f[2] != strconv.FormatUint(infos[owner].token, 10) || f[3] != "3s" {
			t.Fatalf("list row %d = %q, want %s held by %s", i, lines[i+1], want, infos[owner].owner)
		}
	}
	// list with a prefix, JSON.
	code, stdout, _ = e.run("list", "jobs/", "--json")
	var list []leaseJSON
	if err := json.Unmarshal([]byte(stdout), &list); code != 0 || err != nil {
		t.Fatalf("list --json: exit %d, %v:\n%s", code, err, stdout)
	}
	if len(list) != 2 || list[0].Resource != "jobs/a" || list[1].Resource != "jobs/b" || list[1].Owner != infos["beta"].owner || !list[0].Held {
		t.Fatalf("list jobs/ --json = %+v", list)
	}

	// release with the wrong owner: refused, the lease stays.
	for _, wrong := range []string{"beta", "alpha#0000000000000000", "alph"} {
		code, _, stderr = e.run("release", "jobs/a", "--owner", wrong)
		if code != exitFree || !strings.Contains(stderr, "nothing released") || !strings.Contains(stderr, alpha.owner) {
			t.Fatalf("release --owner %s: exit %d:\n%s", wrong, code, stderr)
		}
	}
	code, stdout, _ = e.run("status", "jobs/a", "--json")
	st = leaseJSON{}
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil || st.Owner != alpha.owner || st.Token != alpha.token {
		t.Fatalf("after refused releases: exit %d, %+v", code, st)
	}

	// release with the readable id, then with the full owner string: the
	// holders' tenure processes notice at their next renewal and exit 79.
	code, stdout, stderr = e.run("release", "jobs/a", "--owner", "alpha")
	if code != 0 || !strings.Contains(stdout, "released") {
		t.Fatalf("release --owner alpha: exit %d:\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = e.run("release", "jobs/b", "--owner", infos["beta"].owner)
	if code != 0 || !strings.Contains(stdout, "released") {
		t.Fatalf("release --owner %s: exit %d:\n%s%s", infos["beta"].owner, code, stdout, stderr)
	}
	for _, r := range []string{"jobs/a", "jobs/b"} {
		if code := holders[r].wait(10 * time.Second); code != exitLost {
			t.Fatalf("the holder of %s exited %d, want %d:\n%s", r, code, exitLost, holders[r].stderr())
		}
	}
	code, _, stderr = e.run("release", "jobs/a", "--owner", "alpha")
	if code != exitFree || !strings.Contains(stderr, "not held") {
		t.Fatalf("release of a free resource: exit %d:\n%s", code, stderr)
	}
	code, stdout, _ = e.run("list", "--json")
	list = nil
	if err := json.Unmarshal([]byte(stdout), &list); code != 0 || err != nil || len(list) != 1 || list[0].Resource != "other/c" {
		t.Fatalf("list after the releases: %+v, %v", list, err)
	}
	holders["other/c"].stdin.Close()
	if code := holders["other/c"].wait(10 * time.Second); code != 0 {
		t.Fatalf("gamma exited %d:\n%s", code, holders["other/c"].stderr())
	}
	if code, _, _ := e.run("status", "other/c"); code != exitFree {
		t.Fatalf("other/c still held after its command ended")
	}
}

// On a terminal: while waiting, a status line updated in place names the
// holder; then the command gets the terminal's foreground, so that it can
// read from it.
func TestRunOnTerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.start("alpha", startOpt{stdinPipe: true}, "run", "--owner", "alpha", "job", "--",
		helper("-ready", e.path("alpha.ready"), "-hold", "stdin"))
	ai := waitReady(t, e.path("alpha.ready"), 10*time.Second)

	master, slave := openPTY(t)
	var screen syncBuffer
	go io.Copy(&screen, master)
	line := e.path("line")
	b := e.start("beta", startOpt{tty: slave}, "run", "--owner", "beta", "job", "--",
		helper("-ready", e.path("beta.ready"), "-readline", line))
	slave.Close() // tenure has it; the master sees EOF-less output until tenure exits

	waitFor(t, 10*time.Second, "the status line", func() bool {
		return strings.Count(screen.String(), "\r\x1b[Ktenure: waiting") >= 2
	})
	if s := screen.String(); !strings.Contains(s, ai.owner) || !strings.Contains(s, "token "+strconv.FormatUint(ai.token, 10)) {
		t.Fatalf("the status line should name the holder %s:\n%q", ai.owner, s)
	}
	a.stdin.Close()
	waitReady(t, e.path("beta.ready"), 10*time.Second)
	if _, err := master.Write([]byte("hello from the terminal\n")); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(10 * time.Second); code != 0 {
		t.Fatalf("beta exited %d; terminal:\n%q", code, screen.String())
	}
	got, err := os.ReadFile(line)
	if err != nil || string(got) != "hello from the terminal\n" {
		t.Fatalf("the command read %q from the terminal (%v); terminal:\n%q", got, err, screen.String())
	}
	if code := a.wait(10 * time.Second); code != 0 {
		t.Fatalf("alpha exited %d", code)
	}
}

// A release that the store does not confirm (here another connection holds
// the database's write lock) prints a warning that the lease will
// expire by its TTL, and tenure still exits with the command's status.
func TestRunReleaseFailureWarns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ttl = 2 * time.Second
	a := e.start("alpha", startOpt{stdinPipe: true}, "run", "--ttl", ttl.String(), "--owner", "alpha", "job", "--",
		helper("-ready", e.path("alpha.ready"), "-hold", "stdin", "-exit", "3"))
	waitReady(t, e.path("alpha.ready"), 10*time.Second)

	lockStore(t, e) // as a stuck writer would

	start := time.Now()
	a.stdin.Close()
	code := a.wait(30 * time.Second)
	took := time.Since(start)
	t.Logf("tenure exited %v after the command's exit; stderr: %s", took.Round(time.Millisecond), a.stderr())
	if code != 3 {
		t.Fatalf("tenure exited %d, want the command's 3; stderr:\n%s", code, a.stderr())
	}
	if msg := a.stderr(); !strings.Contains(msg, "warning") || !strings.Contains(msg, "will expire by its TTL") {
		t.Fatalf("stderr should warn that the lease will expire by its TTL:\n%s", msg)
	}
	if took > ttl+5*time.Second {
		t.Fatalf("the failed release took %v", took)
	}
}

// Every limit and every URL rule is checked before anything is opened,
// created or connected, the same way in every scheme: a TTL the store
// cannot keep, a port outside 1..65535 and an unknown parameter are usage
// errors (64), never a store file or a connection attempt (69); secrets in
// the URL's query are not shown.
func TestLimitsCheckedBeforeIO(t *testing.T) {
	e := newEnv(t)
	cmd := []string{"true"}
	for _, c := range []struct {
		name  string
		args  []string
		shows string
	}{
		{"sqlite ttl above the maximum", []string{"run", "--ttl", "1300000h", "job", "--", cmd[0]}, "maximum"},
		{"sqlite elect ttl above the maximum", []string{"elect", "--ttl", "1300000h", "job", "--", cmd[0]}, "maximum"},
		{"etcd ttl below a second", []string{"--store", "etcd://127.0.0.1:1", "run", "--ttl", "500ms", "job", "--", cmd[0]}, "at least 1s"},
		{"etcd elect ttl below a second", []string{"--store", "etcd://127.0.0.1:1", "elect", "--ttl", "500ms", "job", "--", cmd[0]}, "at least 1s"},
		{"etcd hold below a second", []string{"--store", "etcd://127.0.0.1:1", "run", "--hold-at-least", "500ms", "job", "--", cmd[0]}, "minimum"},
		{"cassandra ttl below a second", []string{"--store", "cassandra://127.0.0.1:1/ks", "run", "--ttl", "500ms", "job", "--", cmd[0]}, "at least 1s"},
		{"cassandra hold below a second", []string{"--store", "cassandra://127.0.0.1:1/ks", "run", "--hold-at-least", "900ms", "job", "--", cmd[0]}, "minimum"},
		{"cassandra ttl above the maximum", []string{"--store", "cassandra://127.0.0.1:1/ks", "run", "--ttl", "1300000h", "job", "--", cmd[0]}, "maximum"},
		{"etcd elect ttl above the maximum", []string{"--store", "etcd://127.0.0.1:1", "elect", "--ttl", "2560000h", "job", "--", cmd[0]}, "maximum"},
		{"sqlite hold above the maximum", []string{"run", "--hold-at-least", "1300000h", "job", "--", cmd[0]}, "maximum"},
		{"redis elect ttl above the maximum", []string{"--store", "redis://127.0.0.1:1", "elect", "--ttl", "1300000h", "job", "--", cmd[0]}, "maximum"},
		{"postgres elect ttl above the maximum", []string{"--store", "postgres://u:s3cret@127.0.0.1:1/db", "elect", "--ttl", "1300000h", "job", "--", cmd[0]}, "maximum"},
		{"redis ttl above the maximum", []string{"--store", "redis://127.0.0.1:1", "run", "--ttl", "1300000h", "job", "--", cmd[0]}, "maximum"},
		{"redis port out of range", []string{"--store", "redis://127.0.0.1:99999", "list"}, "65535"},
		{"etcd port out of range", []string{"--store", "etcd://127.0.0.1:70000", "list"}, "65535"},
		{"postgres port out of range", []string{"--store", "postgres://u@127.0.0.1:70000/db", "list"}, "65535"},
		{"postgres unknown parameter", []string{"--store", "postgres://u:pw-s3cret@127.0.0.1:1/db?frobnicate=1&password=pw-s3cret", "list"}, "frobnicate"},
		{"redis unknown parameter", []string{"--store", "redis://127.0.0.1:1?frobnicate=1", "list"}, "frobnicate"},
		{"scheme forgotten", []string{"--store", "nobody:s3cret@127.0.0.1/x", "run", "job", "--", cmd[0]}, "unknown scheme"},
		{"scheme forgotten, slashes kept", []string{"--store", "//nobody:s3cret@127.0.0.1/x", "list"}, "no scheme"},
	} {
		start := time.Now()
		code, _, stderr := e.run(c.args)
		if code != exitUsage || !strings.Contains(stderr, c.shows) || strings.Contains(stderr, "s3cret") {
			t.Errorf("%s: exit %d, want %d saying %q without secrets:\n%s", c.name, code, exitUsage, c.shows, stderr)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: took %v", c.name, d)
		}
	}
	if _, err := os.Stat(e.db); !os.IsNotExist(err) {
		t.Fatalf("the SQLite file exists after limit errors only (%v)", err)
	}
}

// holdsWriteLock reports whether process pid holds an exclusive POSIX lock
// on the file path (a SQLite writer in its transaction), from /proc/locks.
func holdsWriteLock(pid int, path string) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return false
	}
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return false
	}
	ino := ":" + strconv.FormatUint(st.Ino, 10)
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		// 1: POSIX  ADVISORY  WRITE 31014 fe:00:9994449 120 120
		if len(f) >= 6 && f[1] == "POSIX" && f[3] == "WRITE" && f[4] == strconv.Itoa(pid) && strings.HasSuffix(f[5], ino) {
			return true
		}
	}
	return false
}

// tenure alone stopped (SIGSTOP; its command, in a process group of its own,
// runs on): nobody renews the lease, and another host takes it after the
// TTL. The reaper kills the command's group at the lease's deadline, before
// the other host's command starts (found by an adversarial review: the
// command ran on beside the next holder's for as long as tenure stayed
// stopped). Resumed, tenure exits 79.
func TestRunStoppedTenureReaperKillsAtDeadline(t *testing.T) {
	if !canReap {
		t.Skip("no reaper on this system")
	}
	t.Parallel()
	e := newEnv(t)
	const ttl = time.Second
	aOut := e.path("alpha.events")
	a := e.start("alpha", startOpt{}, "run", "--ttl", ttl.String(), "--grace", "30s", "--owner", "alpha", "job", "--",
		helper("-out", aOut, "-ready", e.path("alpha.ready"), "-hold", "1h", "-beat", "-signals", "ignore"))
	ai := waitReady(t, e.path("alpha.ready"), 10*time.Second)
	// Stop tenure, but not inside a write (see TestRunStoppedHolderLosesLease).
	for try := 0; ; try++ {
		syscall.Kill(a.pid(), syscall.SIGSTOP)
		waitFor(t, 10*time.Second, "alpha to stop", func() bool { return processState(a.pid()) == "T" })
		if !holdsWriteLock(a.pid(), e.db) && !holdsWriteLock(a.pid(), e.db+"-shm") {
			break
		}
		if try == 100 {
			t.Fatalf("alpha always holds the store's write lock")
		}
		syscall.Kill(a.pid(), syscall.SIGCONT)
		time.Sleep(20 * time.Millisecond)
	}
	defer syscall.Kill(a.pid(), syscall.SIGCONT)
	stopped := mono()
	waitFor(t, 10*time.Second, "alpha's command to be killed", func() bool { return processGone(ai.pid) })
	killed := mono()
	bOut := e.path("beta.events")
	if code, _, stderr := e.run("run", "--ttl", ttl.String(), "--wait", "30s", "--owner", "beta", "job", "--", helper("-out", bOut)); code != 0 {
		t.Fatalf("beta exited %d:\n%s", code, stderr)
	}
	bStart := filter(readEvents(t, bOut), "start")
	var last int64
	for _, ev := range filter(readEvents(t, aOut), "beat") {
		last = max(last, ev.mono)
	}
	t.Logf("alpha's command killed %v after tenure was stopped (TTL %v); its last beat %v before beta's start",
		time.Duration(killed-stopped).Round(time.Millisecond), ttl, time.Duration(bStart[0].mono-last).Round(time.Millisecond))
	if len(bStart) != 1 || last >= bStart[0].mono {
		t.Fatalf("alpha's command beat at %d, after beta's command started at %+v", last, bStart)
	}
	syscall.Kill(a.pid(), syscall.SIGCONT)
	if code := a.wait(10 * time.Second); code != exitLost {
		t.Fatalf("alpha exited %d, want %d; stderr:\n%s", code, exitLost, a.stderr())
	}
	if msg := a.stderr(); !strings.Contains(msg, "reaper") || !strings.Contains(msg, "deadline passed") {
		t.Fatalf("alpha's stderr should say that the reaper killed the command at the deadline:\n%s", msg)
	}
}

// Renewals that cannot get through (another connection holds the
// database's write lock) end a command that ignores SIGTERM by the lease's
// deadline, not a grace period later: SIGTERM once the time left falls
// below the grace period (at most a third of the TTL), SIGKILL when the
// lease is lost at its deadline. tenure exits 79.
func TestRunFailingRenewalsStopTheCommandByTheDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ttl = 2 * time.Second
	out := e.path("alpha.events")
	a := e.start("alpha", startOpt{}, "run", "--ttl", ttl.String(), "--grace", "30s", "--owner", "alpha", "job", "--",
		helper("-out", out, "-ready", e.path("alpha.ready"), "-hold", "1h", "-beat", "-signals", "ignore"))
	ai := waitReady(t, e.path("alpha.ready"), 10*time.Second)

	lockStore(t, e)
	locked := mono()

	if code := a.wait(20 * time.Second); code != exitLost {
		t.Fatalf("alpha exited %d, want %d; stderr:\n%s", code, exitLost, a.stderr())
	}
	if !processGone(ai.pid) {
		t.Fatal("the command outlived tenure")
	}
	evs := readEvents(t, out)
	var last int64
	for _, ev := range filter(evs, "beat") {
		last = max(last, ev.mono)
	}
	ranOn := time.Duration(last - locked)
	t.Logf("the command ran %v after the store was locked (TTL %v, grace 30s); stderr:\n%s", ranOn.Round(time.Millisecond), ttl, a.stderr())
	if ranOn > ttl+500*time.Millisecond {
		t.Fatalf("the command ran %v after renewals stopped getting through; want it gone by the lease's deadline (TTL %v)", ranOn, ttl)
	}
	if sigs := filter(evs, "signal"); len(sigs) == 0 || sigs[0].sig != "SIGTERM" {
		t.Fatalf("the command got signals %+v; want SIGTERM before the deadline", sigs)
	}
	if msg := a.stderr(); !strings.Contains(msg, "before the lease's deadline") || !strings.Contains(msg, "SIGKILL") {
		t.Fatalf("stderr should say the command was stopped before the deadline, then killed:\n%s", msg)
	}
}

// A command that tenure stops because renewals are not confirmed, and that
// traps SIGTERM and exits 0, makes tenure exit 79, not 0: tenure cut it
// short for the lease's sake, so its status does not say that its work was
// done (a new user's cron wrapper saw success).
func TestRunStoppedForUnconfirmedRenewalsExits79(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ttl = 2 * time.Second
	a := e.start("alpha", startOpt{}, "run", "--ttl", ttl.String(), "--grace", "30s", "--owner", "alpha", "job", "--",
		helper("-ready", e.path("alpha.ready"), "-hold", "1h", "-signals", "exit0"))
	waitReady(t, e.path("alpha.ready"), 10*time.Second)
	lockStore(t, e)
	if code := a.wait(20 * time.Second); code != exitLost {
		t.Fatalf("alpha exited %d, want %d; stderr:\n%s", code, exitLost, a.stderr())
	}
	if msg := a.stderr(); !strings.Contains(msg, "tenure stopped the command (renewals were not confirmed") || !strings.Contains(msg, "instead of the command's 0") {
		t.Fatalf("stderr should say that tenure stopped the command, and why:\n%s", msg)
	}
}

// tenure stopped right after it started the command's process, before the
// reaper had the lease's deadline (failpoint stop-after-start): the command
// has not run, and does not run while another process holds the lease;
// resumed, tenure finds the lease lost and exits 79 without running it
// (found by a second adversarial review: the command ran, unguarded, for
// as long as tenure stayed stopped).
func TestRunStoppedBeforeTheReaperIsArmed(t *testing.T) {
	if !canReap {
		t.Skip("no reaper on this system")
	}
	t.Parallel()
	e := newEnv(t)
	const ttl = time.Second
	aOut := e.path("alpha.events")
	a := e.start("alpha", startOpt{extraEnv: []string{failpointEnv + "=stop-after-start"}}, "run", "--ttl", ttl.String(), "--owner", "alpha", "job", "--",
		helper("-out", aOut, "-hold", "1h", "-beat"))
	waitFor(t, 20*time.Second, "alpha to stop itself after starting the command", func() bool { return processState(a.pid()) == "T" })
	defer syscall.Kill(a.pid(), syscall.SIGCONT)
	bOut := e.path("beta.events")
	if code, _, stderr := e.run("run", "--ttl", "5s", "--wait", "30s", "--owner", "beta", "job", "--", helper("-out", bOut, "-hold", "300ms")); code != 0 {
		t.Fatalf("beta exited %d:\n%s", code, stderr)
	}
	if evs, err := os.ReadFile(aOut); err == nil && len(evs) > 0 {
		t.Fatalf("alpha's command ran while alpha was stopped and beta held the lease:\n%s", evs)
	}
	syscall.Kill(a.pid(), syscall.SIGCONT)
	if code := a.wait(10 * time.Second); code != exitLost {
		t.Fatalf("alpha exited %d, want %d; stderr:\n%s", code, exitLost, a.stderr())
	}
	if evs, err := os.ReadFile(aOut); err == nil && len(evs) > 0 {
		t.Fatalf("alpha's command ran on a lost lease:\n%s", evs)
	}
}

// lockStore holds the write lock of e's SQLite file until the end of the
// test (another connection's exclusive transaction), so that no write of
// tenure's gets through.
func lockStore(t *testing.T, e *env) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+e.db+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.ExecContext(ctx, "ROLLBACK")
		conn.Close()
		db.Close()
	})
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
}

// A command whose reaper cannot be started does not run: it would run with
// nothing to stop it if tenure were stopped or killed (found by an
// adversarial review: a fork refused under a limit on open files started
// it with a warning). tenure exits 71 and frees the lease.
func TestRunReaperCannotStart(t *testing.T) {
	if !canReap {
		t.Skip("no reaper on this system")
	}
	t.Parallel()
	e := newEnv(t)
	out := e.path("alpha.events")
	a := e.start("alpha", startOpt{extraEnv: []string{failpointEnv + "=reaper-start-fails"}}, "run", "--ttl", "2s", "--owner", "alpha", "job", "--",
		helper("-out", out, "-hold", "300ms"))
	if code := a.wait(20 * time.Second); code != exitOSErr {
		t.Fatalf("tenure exited %d, want %d; stderr:\n%s", code, exitOSErr, a.stderr())
	}
	if !strings.Contains(a.stderr(), "the command did not run") {
		t.Errorf("stderr does not say the command did not run:\n%s", a.stderr())
	}
	if evs, err := os.ReadFile(out); err == nil && len(evs) > 0 {
		t.Fatalf("the command ran without its reaper:\n%s", evs)
	}
	if code, _, stderr := e.run("run", "--ttl", "2s", "--no-wait", "--owner", "beta", "job", "--", "true"); code != 0 {
		t.Fatalf("the lease was not freed: beta exited %d:\n%s", code, stderr)
	}
}

// reaperOf returns the pid of the reaper process that tenure process pid
// started, waiting for it.
func reaperOf(t *testing.T, pid int) int {
	t.Helper()
	var found int
	waitFor(t, 20*time.Second, "the reaper to start", func() bool {
		ents, _ := os.ReadDir("/proc")
		for _, d := range ents {
			child, err := strconv.Atoi(d.Name())
			if err != nil {
				continue
			}
			cl, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
			if err != nil || !strings.Contains(string(cl), reaperArg) {
				continue
			}
			if f := procStat(child); len(f) > 1 && f[1] == strconv.Itoa(pid) {
				found = child
				return true
			}
		}
		return false
	})
	return found
}

// A reaper that dies while the command runs leaves the command unguarded:
// tenure stops it with SIGKILL and exits 79 instead of letting it run on
// with nothing to stop it if tenure were then stopped or killed (found by
// an adversarial review).
func TestRunReaperDiesCommandStopped(t *testing.T) {
	if !canReap {
		t.Skip("no reaper on this system")
	}
	t.Parallel()
	e := newEnv(t)
	out := e.path("alpha.events")
	a := e.start("alpha", startOpt{}, "run", "--ttl", "2s", "--owner", "alpha", "job", "--",
		helper("-out", out, "-hold", "1h", "-beat"))
	waitFor(t, 20*time.Second, "the command to start", func() bool {
		b, _ := os.ReadFile(out)
		return len(b) > 0
	})
	if err := syscall.Kill(reaperOf(t, a.pid()), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(20 * time.Second); code != exitLost {
		t.Fatalf("tenure exited %d, want %d; stderr:\n%s", code, exitLost, a.stderr())
	}
	if !strings.Contains(a.stderr(), "reaper") {
		t.Errorf("stderr does not say the reaper exited:\n%s", a.stderr())
	}
}
