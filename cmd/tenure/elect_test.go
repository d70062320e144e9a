//go:build linux

package main

import (
	"context"
	"database/sql"
	"io"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// electArgs returns the arguments of a "tenure elect" candidate named name
// (also its --owner) whose command is cmd.
func electArgs(name string, ttl, retry time.Duration, cmd []string) []any {
	return []any{"--log-level", "info", "elect", "--ttl", ttl.String(), "--retry", retry.String(), "--grace", "2s", "--owner", name, "job", "--", cmd}
}

// waitObserved waits until the candidate p has seen leader lead (it logs
// each new leader it observes at level info).
func waitObserved(t *testing.T, p *proc, leader string) {
	t.Helper()
	waitFor(t, 20*time.Second, p.name+" to observe "+leader+" leading", func() bool {
		return strings.Contains(p.stderr(), `msg="new leader observed" prog=tenure election=job leader=`+leader+"\n")
	})
}

// startOf returns the start event of the command whose token is token.
func startOf(t *testing.T, path string, token uint64) event {
	t.Helper()
	for _, ev := range filter(readEvents(t, path), "start") {
		if ev.token == token {
			return ev
		}
	}
	t.Fatalf("no start of token %d in %s", token, path)
	return event{}
}

// checkTermsDisjoint checks that the commands recorded in path ran one at a
// time, in the order of their tokens: each term's first event comes after
// the previous term's last one.
func checkTermsDisjoint(t *testing.T, path string) {
	t.Helper()
	type span struct {
		token      uint64
		first, end int64
	}
	spans := map[uint64]*span{}
	for _, ev := range readEvents(t, path) {
		s := spans[ev.token]
		if s == nil {
			s = &span{token: ev.token, first: ev.mono, end: ev.mono}
			spans[ev.token] = s
		}
		s.first, s.end = min(s.first, ev.mono), max(s.end, ev.mono)
	}
	var list []*span
	for _, s := range spans {
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].first < list[j].first })
	for i := 1; i < len(list); i++ {
		prev, cur := list[i-1], list[i]
		if cur.token <= prev.token {
			t.Fatalf("tokens do not increase in start order: %d then %d", prev.token, cur.token)
		}
		if cur.first <= prev.end {
			t.Fatalf("the command of token %d started %v before the command of token %d ended", cur.token, time.Duration(prev.end-cur.first), prev.token)
		}
	}
}

// Two candidates on one singleton: exactly one runs the command. SIGKILL of
// the leader (tenure and the command's group): the other starts it within
// TTL plus one retry period. SIGTERM to the new leader: the command gets it,
// tenure releases the lease and exits with the command's status, and a third
// candidate starts the command within about one retry period.
func TestElectSingletonTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	const ttl, retry = 2 * time.Second, 500 * time.Millisecond
	out := e.path("events")
	elect := func(name string) *proc {
		return e.start(name, startOpt{}, electArgs(name, ttl, retry,
			helper("-out", out, "-ready", e.path(name+".ready"), "-hold", "1h", "-beat"))...)
	}
	alpha, beta := elect("alpha"), elect("beta")

	// Exactly one leads and runs the command; the other sees it lead.
	var leader, follower *proc
	waitFor(t, 20*time.Second, "a leader's command", func() bool {
		for _, p := range []*proc{alpha, beta} {
			if _, err := os.Stat(e.path(p.name + ".ready")); err == nil {
				leader = p
			}
		}
		return leader != nil
	})
	follower = alpha
	if leader == alpha {
		follower = beta
	}
	li := waitReady(t, e.path(leader.name+".ready"), time.Second)
	waitObserved(t, follower, leader.name)
	if _, err := os.Stat(e.path(follower.name + ".ready")); err == nil {
		t.Fatalf("both candidates run the command")
	}
	if n := len(filter(readEvents(t, out), "start")); n != 1 {
		t.Fatalf("%d commands started, want 1", n)
	}

	// SIGKILL the leader and its command.
	killed := mono()
	syscall.Kill(-leader.pid(), syscall.SIGKILL)
	syscall.Kill(-li.pid, syscall.SIGKILL)
	fi := waitReady(t, e.path(follower.name+".ready"), 20*time.Second)
	if fi.token <= li.token {
		t.Fatalf("the new leader's token %d is not above the old one's %d", fi.token, li.token)
	}
	takeover := time.Duration(startOf(t, out, fi.token).mono - killed)
	t.Logf("SIGKILL of the leader to the command's start on the other candidate: %v (TTL %v, retry %v)", takeover.Round(time.Millisecond), ttl, retry)
	if takeover < ttl/2 {
		t.Fatalf("takeover %v after the leader died: before its lease expired", takeover)
	}
	if limit := ttl + retry + retry/10 + schedSlack; takeover > limit {
		t.Fatalf("takeover %v after SIGKILL, more than %v", takeover, limit)
	}

	// A third candidate follows the new leader; SIGTERM to the leader hands
	// over within about one retry period.
	gamma := elect("gamma")
	waitObserved(t, gamma, follower.name)
	termed := mono()
	if err := syscall.Kill(follower.pid(), syscall.SIGTERM); err != nil { // tenure alone
		t.Fatal(err)
	}
	gi := waitReady(t, e.path("gamma.ready"), 20*time.Second)
	handover := time.Duration(startOf(t, out, gi.token).mono - termed)
	t.Logf("SIGTERM to the leader to the command's start on the other candidate: %v (retry %v)", handover.Round(time.Millisecond), retry)
	if limit := retry + retry/10 + schedSlack; handover > limit {
		t.Fatalf("handover %v after SIGTERM, more than %v", handover, limit)
	}
	if code := follower.wait(10 * time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("%s exited %d after SIGTERM, want 143 (its command's status); stderr:\n%s", follower.name, code, follower.stderr())
	}

	if code := func() int { syscall.Kill(gamma.pid(), syscall.SIGTERM); return gamma.wait(10 * time.Second) }(); code != 143 {
		t.Fatalf("gamma exited %d, want 143; stderr:\n%s", code, gamma.stderr())
	}
	checkTermsDisjoint(t, out)
	if code, stdout, _ := e.run("status", "job"); code != exitFree {
		t.Fatalf("status after every candidate left: exit %d\n%s", code, stdout)
	}
}

// A command that exits by itself on the leader: tenure releases the lease and
// exits with the command's status; the other candidate starts the command.
func TestElectCommandExitHandsOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	out := e.path("events")
	elect := func(name string) *proc {
		return e.start(name, startOpt{stdinPipe: true}, electArgs(name, 5*time.Second, 200*time.Millisecond,
			helper("-out", out, "-ready", e.path(name+".ready"), "-hold", "stdin", "-exit", "3"))...)
	}
	alpha := elect("alpha")
	waitReady(t, e.path("alpha.ready"), 20*time.Second)
	beta := elect("beta")
	waitObserved(t, beta, "alpha")

	alpha.stdin.Close()
	if code := alpha.wait(10 * time.Second); code != 3 {
		t.Fatalf("alpha exited %d, want its command's 3; stderr:\n%s", code, alpha.stderr())
	}
	waitReady(t, e.path("beta.ready"), 10*time.Second)
	beta.stdin.Close()
	if code := beta.wait(10 * time.Second); code != 3 {
		t.Fatalf("beta exited %d, want its command's 3; stderr:\n%s", code, beta.stderr())
	}
	if n := len(filter(readEvents(t, out), "end")); n != 2 {
		t.Fatalf("%d commands ran to their end, want 2", n)
	}
	checkTermsDisjoint(t, out)
	if code, stdout, _ := e.run("status", "job"); code != exitFree {
		t.Fatalf("the lease is still held after both exited: status exit %d\n%s", code, stdout)
	}
}

// Leadership lost under a running command ("tenure release --force"): the
// command gets SIGTERM, tenure campaigns again and, leading again, starts the
// command anew with a larger token once the old one is gone.
func TestElectLossStopsAndCampaignsAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	out := e.path("events")
	a := e.start("alpha", startOpt{}, electArgs("alpha", 1500*time.Millisecond, 200*time.Millisecond,
		helper("-out", out, "-ready", e.path("alpha.ready"), "-hold", "1h", "-beat", "-signals", "exit42"))...)
	first := waitReady(t, e.path("alpha.ready"), 20*time.Second)

	os.Remove(e.path("alpha.ready"))
	if code, stdout, stderr := e.run("release", "--force", "job"); code != 0 {
		t.Fatalf("release --force: exit %d\n%s%s", code, stdout, stderr)
	}
	second := waitReady(t, e.path("alpha.ready"), 20*time.Second)
	if second.token <= first.token {
		t.Fatalf("the new term's token %d is not above %d", second.token, first.token)
	}
	evs := readEvents(t, out)
	sigs := filter(evs, "signal")
	if len(sigs) != 1 || sigs[0].sig != "SIGTERM" || sigs[0].token != first.token {
		t.Fatalf("the first command got signals %+v, want one SIGTERM", sigs)
	}
	msg := a.stderr()
	for _, want := range []string{"lost while the command ran", "SIGTERM now", "campaigning again"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("stderr should say %q:\n%s", want, msg)
		}
	}
	syscall.Kill(a.pid(), syscall.SIGTERM)
	if code := a.wait(10 * time.Second); code != 42 {
		t.Fatalf("tenure exited %d after SIGTERM, want its command's 42; stderr:\n%s", code, a.stderr())
	}
	checkTermsDisjoint(t, out)
}

// A leader whose renewals are not confirmed stops its command before the
// lease's deadline; a command that traps SIGTERM and exits 0 then does not
// end the election with status 0, as if its work were done: tenure gives
// the term up and campaigns again.
func TestElectStoppedForUnconfirmedRenewalsCampaignsAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	out := e.path("events")
	a := e.start("alpha", startOpt{}, electArgs("alpha", 2*time.Second, 200*time.Millisecond,
		helper("-out", out, "-ready", e.path("alpha.ready"), "-hold", "1h", "-signals", "exit0"))...)
	waitReady(t, e.path("alpha.ready"), 20*time.Second)
	lockStore(t, e)
	waitFor(t, 20*time.Second, "alpha to campaign again", func() bool { return strings.Contains(a.stderr(), "campaigning again") })
	if msg := a.stderr(); !strings.Contains(msg, "tenure stopped the command (renewals were not confirmed") {
		t.Fatalf("stderr should say that tenure stopped the command, and why:\n%s", msg)
	}
	if sigs := filter(readEvents(t, out), "signal"); len(sigs) != 1 || sigs[0].sig != "SIGTERM" {
		t.Fatalf("the command got signals %+v, want one SIGTERM", sigs)
	}
	syscall.Kill(a.pid(), syscall.SIGTERM)
	if code := a.wait(20 * time.Second); code != exitSignalBase+int(syscall.SIGTERM) {
		t.Fatalf("tenure exited %d after SIGTERM while campaigning, want %d; stderr:\n%s", code, exitSignalBase+int(syscall.SIGTERM), a.stderr())
	}
}

// A leader whose renewals are still not confirmed just before the deadline
// kills its command (SIGKILL), though the lease is not lost yet; when a
// renewal then comes through before the deadline, the term would go on
// with no command. tenure gives it up and campaigns again, so a command
// runs again somewhere (before, alpha kept the lease, running nothing, and
// beta never led: adversarial review).
func TestElectKilledBeforeTheDeadlineGivesTheTermUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	out := e.path("events")
	const ttl = 10 * time.Second
	a := e.start("alpha", startOpt{}, electArgs("alpha", ttl, 200*time.Millisecond,
		helper("-out", out, "-ready", e.path("alpha.ready"), "-hold", "1h", "-signals", "ignore"))...)
	waitReady(t, e.path("alpha.ready"), 20*time.Second)
	b := e.start("beta", startOpt{}, electArgs("beta", ttl, 200*time.Millisecond,
		helper("-out", out, "-ready", e.path("beta.ready"), "-hold", "1h"))...)
	defer func() {
		syscall.Kill(a.pid(), syscall.SIGTERM)
		syscall.Kill(b.pid(), syscall.SIGTERM)
		a.wait(20 * time.Second)
		b.wait(20 * time.Second)
	}()

	// Hold the SQLite file's write lock until tenure kills the command, then
	// let renewals through again before the lease's deadline.
	db, err := sql.Open("sqlite", "file:"+e.db+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "alpha to SIGKILL its command", func() bool {
		return strings.Contains(a.stderr(), "stopping the command: SIGKILL")
	})
	conn.ExecContext(ctx, "ROLLBACK")
	conn.Close()
	waitFor(t, 30*time.Second, "a command to start again, alpha's or beta's", func() bool {
		return len(filter(readEvents(t, out), "start")) >= 2
	})
	checkTermsDisjoint(t, out)
}

// SIGINT, SIGTERM or SIGHUP to a follower: it exits at once with 128+N.
func TestElectSignalWhileFollowing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	a := e.start("alpha", startOpt{stdinPipe: true}, electArgs("alpha", 5*time.Second, 200*time.Millisecond,
		helper("-ready", e.path("alpha.ready"), "-hold", "stdin"))...)
	waitReady(t, e.path("alpha.ready"), 20*time.Second)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		name := "follower-" + strings.ToLower(sigName(sig))
		ready := e.path(name + ".ready")
		f := e.start(name, startOpt{}, electArgs(name, 5*time.Second, 200*time.Millisecond, helper("-ready", ready))...)
		waitObserved(t, f, "alpha")
		start := time.Now()
		syscall.Kill(f.pid(), sig)
		if code := f.wait(10 * time.Second); code != 128+int(sig) {
			t.Fatalf("%s: exit %d, want %d; stderr:\n%s", sigName(sig), code, 128+int(sig), f.stderr())
		}
		t.Logf("%s: the follower exited %v after the signal", sigName(sig), time.Since(start).Round(time.Millisecond))
		if !strings.Contains(f.stderr(), "stopped campaigning") {
			t.Fatalf("stderr:\n%s", f.stderr())
		}
		if _, err := os.Stat(ready); err == nil {
			t.Fatalf("the follower's command ran")
		}
	}
	a.stdin.Close()
	if code := a.wait(10 * time.Second); code != 0 {
		t.Fatalf("alpha exited %d; stderr:\n%s", code, a.stderr())
	}
}

// Exit codes of bad arguments, stores that cannot be opened, and commands
// that cannot run.
func TestElectExitCodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cmd := helper()
	for _, c := range []struct {
		name string
		args []string
	}{
		{"nothing", []string{"elect"}},
		{"no command", []string{"elect", "job"}},
		{"no --", []string{"elect", "job", cmd[0]}},
		{"two resources", []string{"elect", "a", "b", "--", cmd[0]}},
		{"empty resource", []string{"elect", "", "--", cmd[0]}},
		{"ttl 0", []string{"elect", "--ttl", "0", "job", "--", cmd[0]}},
		{"ttl 1ms", []string{"elect", "--ttl", "1ms", "job", "--", cmd[0]}},
		{"ttl 999ms", []string{"elect", "--ttl", "999ms", "job", "--", cmd[0]}},
		{"retry 0", []string{"elect", "--retry", "0", "job", "--", cmd[0]}},
		{"negative retry", []string{"elect", "--retry", "-1s", "job", "--", cmd[0]}},
		{"negative grace", []string{"elect", "--grace", "-1s", "job", "--", cmd[0]}},
		{"bad owner", []string{"elect", "--owner", "a#b", "job", "--", cmd[0]}},
		{"unknown flag", []string{"elect", "--wait", "1s", "job", "--", cmd[0]}},
	} {
		code, _, stderr := e.run(c.args)
		if code != exitUsage || !strings.HasPrefix(stderr, "tenure: ") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%s: exit %d, want %d with one line; stderr:\n%s", c.name, code, exitUsage, stderr)
		}
	}
	if _, err := os.Stat(e.db); !os.IsNotExist(err) {
		t.Fatalf("the store file exists after usage errors only (%v)", err)
	}
	code, _, stderr := e.run("--store", "sqlite:/nonexistent-dir/x.db", "elect", "job", "--", cmd[0])
	if code != exitUnavailable {
		t.Fatalf("unreachable store: exit %d, want %d:\n%s", code, exitUnavailable, stderr)
	}

	e.init()
	notExec := e.path("not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd  []string
		want int
	}{
		{[]string{"tenure-test-no-such-command"}, exitNotFound},
		{[]string{notExec}, exitCannotExec},
		{helper("-exit", "3"), 3},
		{[]string{"/bin/sh", "-c", "kill -KILL $$"}, 128 + 9},
	} {
		code, _, stderr := e.run("elect", "--retry", "100ms", "job", "--", c.cmd)
		if code != c.want {
			t.Errorf("elect %s: exit %d, want %d:\n%s", c.cmd[0], code, c.want, stderr)
		}
		if code, stdout, _ := e.run("status", "job"); code != exitFree {
			t.Errorf("elect %s: the lease was not released: status exit %d\n%s", c.cmd[0], code, stdout)
		}
	}
}

// On a terminal, a follower shows the current leader on a status line; when
// it leads, its command gets the terminal's foreground.
func TestElectOnTerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	a := e.start("alpha", startOpt{stdinPipe: true}, electArgs("alpha", 5*time.Second, 200*time.Millisecond,
		helper("-ready", e.path("alpha.ready"), "-hold", "stdin"))...)
	waitReady(t, e.path("alpha.ready"), 20*time.Second)

	master, slave := openPTY(t)
	var screen syncBuffer
	go io.Copy(&screen, master)
	line := e.path("line")
	b := e.start("beta", startOpt{tty: slave}, "elect", "--retry", "200ms", "--owner", "beta", "job", "--",
		helper("-ready", e.path("beta.ready"), "-readline", line))
	slave.Close()

	waitFor(t, 20*time.Second, "the status line", func() bool {
		return strings.Count(screen.String(), "\r\x1b[Ktenure: following") >= 2
	})
	if s := screen.String(); !strings.Contains(s, `"job" is led by "alpha"`) {
		t.Fatalf("the status line should name the leader alpha:\n%q", s)
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

// On stores that notify releases, a forced release stops the leader's
// command within a round trip of the notification, not at the next renewal
// (20 s away here): C17 for tenure elect.
func TestElectForcedReleaseStopsTheCommand(t *testing.T) {
	t.Parallel()
	stores := networkStoresOrNone()
	delete(stores, "cassandra") // no release notifications
	if len(stores) == 0 {
		t.Skip("no store with release notifications configured: set TENURE_POSTGRES, TENURE_REDIS or TENURE_ETCD (scripts/test does)")
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.store = url
			e.init()
			res := uniqueResource("c17-elect")
			out := e.path("events")
			a := e.start("alpha", startOpt{}, "elect", "--ttl", "60s", "--owner", "alpha", res, "--",
				helper("-out", out, "-ready", e.path("ready"), "-hold", "1h", "-signals", "exit42"))
			waitReady(t, e.path("ready"), 30*time.Second)
			defer func() {
				syscall.Kill(a.pid(), syscall.SIGTERM)
				a.wait(20 * time.Second)
			}()
			freed := mono()
			if code, stdout, stderr := e.run("release", "--force", res); code != 0 {
				t.Fatalf("release --force: exit %d\n%s%s", code, stdout, stderr)
			}
			deadline := time.Now().Add(15 * time.Second)
			for {
				if sigs := filter(readEvents(t, out), "signal"); len(sigs) > 0 {
					if sigs[0].sig != "SIGTERM" {
						t.Fatalf("the command got %s, want SIGTERM", sigs[0].sig)
					}
					t.Logf("%s: forced release to SIGTERM of the singleton: %v", name, time.Duration(sigs[0].mono-freed).Round(time.Millisecond))
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("the singleton still ran 15 s after its leadership was freed:\n%s", a.stderr())
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
