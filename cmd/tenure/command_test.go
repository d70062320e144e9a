//go:build linux

package main

// The command runs only under a live lease, and tenure's exit says what
// happened to the lease.

import (
	"database/sql"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A TTL below the smallest usable one is a usage error that says why, before
// anything is opened: the command never runs (its output is never printed)
// and elect does not campaign in a loop.
func TestMinimumTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, args := range [][]string{
		{"run", "--ttl", "1ms", "job", "--", "echo", "command-output"},
		{"run", "--ttl", "999ms", "--no-wait", "job", "--", "echo", "command-output"},
		{"run", "--ttl", "500ms", "--slots", "2", "job", "--", "echo", "command-output"},
		{"elect", "--ttl", "1ms", "job", "--", "echo", "command-output"},
		{"elect", "--ttl", "10ms", "--retry", "1ms", "job", "--", "echo", "command-output"},
	} {
		p := e.start("p", startOpt{}, args)
		code := p.wait(15 * time.Second) // elect --ttl 1ms used to campaign for ever
		stdout, stderr := p.stdout(), p.stderr()
		if code != exitUsage || !strings.Contains(stderr, "at least 1s") || !strings.Contains(stderr, "renewed every TTL/3") {
			t.Errorf("%q: exit %d, want %d saying why the TTL must be at least 1s:\n%s", args, code, exitUsage, stderr)
		}
		if strings.Contains(stdout, "command-output") {
			t.Errorf("%q: the command ran:\n%s", args, stdout)
		}
	}
	if _, err := os.Stat(e.db); !os.IsNotExist(err) {
		t.Fatalf("the store file exists after TTL errors only (%v)", err)
	}
}

// processState returns the state letter of /proc/PID/stat ("T" when
// stopped), or "" when the process is gone.
func processState(pid int) string {
	if f := procStat(pid); len(f) > 0 {
		return f[0]
	}
	return ""
}

// pauseBeforeStart starts tenure with the failpoint that stops it between
// the grant and the check before the command starts, waits until it is
// stopped, keeps it stopped for twice the TTL (so its lease is lost), and
// continues it.
func pauseBeforeStart(t *testing.T, e *env, name string, ttl time.Duration, parts ...any) *proc {
	t.Helper()
	p := e.start(name, startOpt{extraEnv: []string{failpointEnv + "=stop-before-start"}}, parts...)
	waitFor(t, 20*time.Second, name+" to stop itself after the grant", func() bool { return processState(p.pid()) == "T" })
	time.Sleep(2 * ttl) // the fault: a pause longer than the TTL
	if err := syscall.Kill(p.pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	return p
}

// tenure paused between the grant and the command's start for longer than
// the TTL: the lease is checked right before the start, so the command
// never runs on the lost lease. run exits 79 saying the command did not
// run; elect campaigns again and starts the command in a later term.
func TestCommandStartsOnlyOnALiveLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	const ttl = time.Second
	out := e.path("run.events")
	p := pauseBeforeStart(t, e, "run", ttl, "run", "--ttl", ttl.String(), "job", "--", helper("-out", out))
	if code := p.wait(20 * time.Second); code != exitLost || !strings.Contains(p.stderr(), "before the command could start") || !strings.Contains(p.stderr(), "did not run") {
		t.Fatalf("run: exit %d, want %d saying that the lease was lost before the command could start:\n%s", code, exitLost, p.stderr())
	}
	if evs := readEvents(t, out); len(evs) != 0 {
		t.Fatalf("run started the command on a lost lease: %+v", evs)
	}

	out = e.path("elect.events")
	p = pauseBeforeStart(t, e, "elect", ttl, "elect", "--ttl", ttl.String(), "--retry", "100ms", "vote", "--",
		helper("-out", out, "-ready", e.path("elect.ready"), "-hold", "100ms"))
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("elect: exit %d, want 0; stderr:\n%s", code, p.stderr())
	}
	starts := filter(readEvents(t, out), "start")
	if len(starts) != 1 || starts[0].token < 2 {
		t.Fatalf("elect's command started %+v; want once, in a later term than the lost one (token 1)", starts)
	}
	if !strings.Contains(p.stderr(), "campaigning again") {
		t.Fatalf("elect's stderr should say that it gave the term up:\n%s", p.stderr())
	}
}

// A lease that was freed (tenure release --force) or taken while the
// command ran is exit 79, also when the command finishes before the next
// renewal, when only the release finds the lease gone (field case C17), on
// every store.
func TestLossFoundAtRelease(t *testing.T) {
	t.Parallel()
	stores := map[string]string{"sqlite": ""}
	for name, url := range networkStoresOrNone() {
		stores[name] = url
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if url != "" {
				e.store = url
			}
			e.init()
			res := uniqueResource("c17")
			for _, taken := range []bool{false, true} {
				ready, out := e.path("alpha.ready"), e.path("alpha.events")
				os.Remove(ready)
				a := e.start("alpha", startOpt{stdinPipe: true}, "run", "--ttl", "30s", "--owner", "alpha", res, "--",
					helper("-ready", ready, "-out", out, "-hold", "stdin"))
				info := waitReady(t, ready, 30*time.Second)
				if code, stdout, stderr := e.run("release", "--force", res); code != 0 {
					t.Fatalf("release --force: exit %d\n%s%s", code, stdout, stderr)
				}
				var b *proc
				if taken {
					b = e.start("beta", startOpt{stdinPipe: true}, "run", "--no-wait", "--owner", "beta", res, "--",
						helper("-ready", e.path("beta.ready"), "-hold", "stdin"))
					waitReady(t, e.path("beta.ready"), 30*time.Second)
				}
				a.stdin.Close() // the command ends well before the next renewal (10s)
				code := a.wait(30 * time.Second)
				if code != exitLost || !strings.Contains(a.stderr(), "lost") {
					t.Fatalf("taken=%v: alpha exited %d, want %d saying that the lease was lost:\n%s", taken, code, exitLost, a.stderr())
				}
				t.Logf("taken=%v: alpha (token %d): %s", taken, info.token, strings.TrimSpace(a.stderr()))
				if b != nil {
					b.stdin.Close()
					if code := b.wait(30 * time.Second); code != 0 {
						t.Fatalf("beta exited %d:\n%s", code, b.stderr())
					}
					os.Remove(e.path("beta.ready"))
				}
			}
		})
	}
}

// On stores that announce releases (PostgreSQL, Redis, etcd), the holder
// learns of a forced release at once and stops its command, long before
// its next renewal (TTL/3 = 20s here), and exits 79 (field case C17).
func TestForcedReleaseStopsTheCommand(t *testing.T) {
	t.Parallel()
	stores := networkStoresOrNone()
	delete(stores, "cassandra") // no release notifications: the next renewal finds it
	if len(stores) == 0 {
		t.Skip("no store with release notifications configured: set TENURE_POSTGRES, TENURE_REDIS or TENURE_ETCD (scripts/test does)")
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.store = url
			e.init()
			res := uniqueResource("c17-notify")
			out := e.path("events")
			a := e.start("alpha", startOpt{}, "run", "--ttl", "60s", "--grace", "5s", "--owner", "alpha", res, "--",
				helper("-ready", e.path("ready"), "-out", out, "-hold", "40s", "-signals", "exit42"))
			waitReady(t, e.path("ready"), 30*time.Second)
			freed := mono()
			if code, stdout, stderr := e.run("release", "--force", res); code != 0 {
				t.Fatalf("release --force: exit %d\n%s%s", code, stdout, stderr)
			}
			// The next renewal is 20s after the grant: exiting within 15s
			// means that the release notification ended the lease.
			if code := a.wait(15 * time.Second); code != exitLost {
				t.Fatalf("alpha exited %d, want %d:\n%s", code, exitLost, a.stderr())
			}
			evs := readEvents(t, out)
			sigs := filter(evs, "signal")
			if len(sigs) != 1 || sigs[0].sig != "SIGTERM" || len(filter(evs, "end")) != 0 {
				t.Fatalf("the command should have been stopped with SIGTERM before its end: %+v", evs)
			}
			t.Logf("%s: forced release to SIGTERM of the command: %v", name, time.Duration(sigs[0].mono-freed).Round(time.Millisecond))
		})
	}
}

// A command that does not exist or cannot be executed is found out before
// the lease is acquired: exit 127 or 126 at once, without waiting for a
// held lease and without spending a fencing token.
func TestCommandLookedUpFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	a := e.start("alpha", startOpt{stdinPipe: true}, "run", "--owner", "alpha", "job", "--",
		helper("-ready", e.path("alpha.ready"), "-hold", "stdin"))
	ai := waitReady(t, e.path("alpha.ready"), 10*time.Second)
	notExec := e.path("not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Tokens follow the clock (max(last + 1, microseconds since the
	// epoch)), so the next grant's token cannot tell whether tokens were
	// spent: the file's counter of the last token granted can.
	if got := lastToken(t, e.db); got != ai.token {
		t.Fatalf("the file's last token is %d, alpha holds %d", got, ai.token)
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"run", "job", "--", "tenure-test-no-such-command"}, exitNotFound},
		{[]string{"run", "--wait", "60s", "job", "--", e.path("no-such-file")}, exitNotFound},
		{[]string{"run", "job", "--", notExec}, exitCannotExec},
		{[]string{"run", "--slots", "1", "job", "--", e.dir}, exitCannotExec},
		{[]string{"elect", "job", "--", "tenure-test-no-such-command"}, exitNotFound},
	} {
		p := e.start("p", startOpt{}, c.args)
		code := p.wait(15 * time.Second) // the lease is held: waiting for it would take for ever
		if code != c.want || !strings.Contains(p.stderr(), "cannot run") {
			t.Errorf("%q: exit %d, want %d:\n%s", c.args, code, c.want, p.stderr())
		}
	}
	if got := lastToken(t, e.db); got != ai.token {
		t.Fatalf("the file's last token is %d after alpha's %d: tokens were spent on commands that could not run", got, ai.token)
	}
	a.stdin.Close()
	if code := a.wait(10 * time.Second); code != 0 {
		t.Fatalf("alpha exited %d:\n%s", code, a.stderr())
	}
	b := e.start("beta", startOpt{}, "run", "job", "--", helper("-ready", e.path("beta.ready")))
	bi := waitReady(t, e.path("beta.ready"), 10*time.Second)
	b.wait(10 * time.Second)
	if bi.token <= ai.token {
		t.Fatalf("the next grant has token %d after %d", bi.token, ai.token)
	}
}

// lastToken reads the last fencing token granted in the SQLite file at
// path: the counter of store/sqlite's schema (tenure_meta).
func lastToken(t *testing.T, path string) uint64 {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v uint64
	if err := db.QueryRow(`SELECT value FROM tenure_meta WHERE name = 'token'`).Scan(&v); err != nil {
		t.Fatalf("reading the token counter of %s: %v", path, err)
	}
	return v
}

// TestVersion: "tenure version" prints one line naming tenure and the Go
// toolchain, and exits 0 without a store.
func TestVersion(t *testing.T) {
	e := newEnv(t)
	e.store = "postgres://nobody@127.0.0.1:1/none" // never opened
	code, stdout, stderr := e.run("version")
	if code != 0 || !strings.HasPrefix(stdout, "tenure ") || !strings.Contains(stdout, " go1.") || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("tenure version: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// "tenure run -- NAME" may mean a resource without a command as well as a
// command without a resource: the usage error names both readings.
func TestSplitCommandArgsNamesBothReadings(t *testing.T) {
	_, _, err := splitCommandArgs("run", []string{"--", "demo"}, 0)
	if err == nil || !strings.Contains(err.Error(), "missing RESOURCE before --") || !strings.Contains(err.Error(), `if "demo" is the resource, the COMMAND after it`) {
		t.Fatalf("run -- demo: %v", err)
	}
	// `tenure run -- f`, as cobra hands it over (the -- taken): f is the
	// resource of the -- form, and the COMMAND is what is missing.
	if _, _, err := splitCommandArgs("run", []string{"f"}, 0); err == nil || !strings.Contains(err.Error(), `missing COMMAND after RESOURCE "f" (or the RESOURCE before --)`) {
		t.Fatalf("run -- f: %v", err)
	}
	if _, _, err := splitCommandArgs("run", []string{"--", "./job", "x"}, 0); err == nil || strings.Contains(err.Error(), "is the resource") {
		t.Fatalf("run -- ./job x: %v; want only the missing resource", err)
	}
}

// An unknown flag that most likely belongs after -- says so: the
// command's own flag after run's RESOURCE, a RESOURCE that begins with -,
// and a flag written after -- (new-user review: "unknown shorthand flag:
// 'l' in -l" alone, while "run demo echo hi" explained --).
func TestFlagErrorsPointToTheDoubleDash(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "demo", "ls", "-l"}, "put -- between RESOURCE and COMMAND"},
		{[]string{"elect", "demo", "sh", "-c", "true"}, "put -- between RESOURCE and COMMAND"},
		{[]string{"status", "-odd"}, "begins with - goes after --"},
		{[]string{"release", "-odd", "--force"}, "begins with - goes after --"},
		{[]string{"release", "--", "-odd", "--force"}, `"--force" after -- is an argument`},
	} {
		code, _, errOut := e.run(c.args)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("tenure %v: exit %d, stderr %q; want 64 and %q", c.args, code, errOut, c.want)
		}
	}
	// A flag unknown before any argument gets no guess.
	if code, _, errOut := e.run("run", "--bogus", "demo", "--", "true"); code != exitUsage || strings.Contains(errOut, "put --") {
		t.Errorf("run --bogus: exit %d, stderr %q", code, errOut)
	}
}
