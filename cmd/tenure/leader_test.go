//go:build linux

package main

import (
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// electValueArgs returns the arguments of a "tenure elect" candidate named
// name that publishes value.
func electValueArgs(name, value string, cmd []string) []any {
	return []any{"--log-level", "info", "elect", "--ttl", "2s", "--retry", "200ms", "--grace", "2s", "--owner", name, "--value", value, "job", "--", cmd}
}

// watchLine is a line of "tenure leader --watch --json".
type watchLine struct {
	Resource string `json:"resource"`
	Held     bool   `json:"held"`
	OwnerID  string `json:"owner_id"`
	Value    string `json:"value"`
	Token    uint64 `json:"token"`
	Time     string `json:"time"`
}

func readWatch(t *testing.T, p *proc) []watchLine {
	t.Helper()
	var out []watchLine
	for _, line := range strings.Split(strings.TrimSpace(p.stdout()), "\n") {
		if line == "" {
			continue
		}
		var w watchLine
		if err := json.Unmarshal([]byte(line), &w); err != nil {
			t.Fatalf("%s: bad line %q: %v", p.name, line, err)
		}
		if w.Time == "" {
			t.Fatalf("%s: line without time: %q", p.name, line)
		}
		out = append(out, w)
	}
	return out
}

// tenure leader prints the leader and its published value; with --watch
// (another process) every change of a run with a SIGTERM hand-over, a
// release by an operator (tenure release --owner, matching the id of a
// candidate that publishes a value) and a SIGKILL, in order; status shows
// the value too.
func TestLeaderCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	if code, stdout, stderr := e.run("leader", "job"); code != exitFree || stdout != "\"job\" has no leader\n" {
		t.Fatalf("leader of a free election: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, _ := e.run("leader", "--json", "job"); code != exitFree || strings.TrimSpace(stdout) != `{"resource":"job","held":false}` {
		t.Fatalf("leader --json of a free election: exit %d\n%s", code, stdout)
	}
	watch := e.start("watch", startOpt{}, "leader", "--watch", "--json", "--interval", "100ms", "job")
	waitFor(t, 20*time.Second, "the watcher's first line", func() bool { return len(readWatch(t, watch)) == 1 })

	out := e.path("events")
	values := map[string]string{"alpha": "http://10.0.0.1:8080/#a%", "beta": "10.0.0.2:8080/b|c"}
	elect := func(name string) *proc {
		return e.start(name, startOpt{}, electValueArgs(name, values[name],
			helper("-out", out, "-ready", e.path(name+".ready"), "-hold", "1h", "-beat"))...)
	}
	alpha := elect("alpha")
	ai := waitReady(t, e.path("alpha.ready"), 20*time.Second)
	code, stdout, _ := e.run("leader", "job")
	if want := `"job" is led by alpha (value http://10.0.0.1:8080/#a%, token `; code != 0 || !strings.HasPrefix(stdout, want) {
		t.Fatalf("leader: exit %d %q; want %q...", code, stdout, want)
	}
	code, stdout, _ = e.run("status", "job")
	if code != 0 || !strings.Contains(stdout, "value:     http://10.0.0.1:8080/#a%\n") {
		t.Fatalf("status: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = e.run("status", "--json", "job")
	var st leaseJSON
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil || st.OwnerID != "alpha" || st.Value != values["alpha"] || st.Token != ai.token {
		t.Fatalf("status --json: exit %d %+v (%v)\n%s", code, st, err, stdout)
	}

	beta := elect("beta")
	waitObserved(t, beta, "alpha")
	syscall.Kill(alpha.pid(), syscall.SIGTERM)
	bi := waitReady(t, e.path("beta.ready"), 20*time.Second)
	alpha.wait(20 * time.Second)
	waitFor(t, 20*time.Second, "the watcher to see beta", func() bool {
		w := readWatch(t, watch)
		return w[len(w)-1].Token == bi.token
	})
	// An operator frees beta's lease by its id; beta, alone, leads again.
	if code, stdout, stderr := e.run("release", "--owner", "beta", "job"); code != 0 {
		t.Fatalf("release --owner beta: exit %d\n%s%s", code, stdout, stderr)
	}
	var b2 uint64
	waitFor(t, 20*time.Second, "beta's second term", func() bool {
		for _, ev := range filter(readEvents(t, out), "start") {
			if ev.token > bi.token {
				b2 = ev.token
			}
		}
		return b2 != 0
	})
	waitFor(t, 20*time.Second, "the watcher to see beta's second term", func() bool {
		w := readWatch(t, watch)
		return w[len(w)-1].Token == b2
	})
	// SIGKILL of beta and its command: the lease expires.
	var b2i readyInfo
	waitFor(t, 20*time.Second, "beta's second command", func() bool {
		b2i = waitReady(t, e.path("beta.ready"), 20*time.Second)
		return b2i.token == b2
	})
	syscall.Kill(-beta.pid(), syscall.SIGKILL)
	syscall.Kill(-b2i.pid, syscall.SIGKILL)
	waitFor(t, 20*time.Second, "the watcher to see nobody lead", func() bool {
		w := readWatch(t, watch)
		return !w[len(w)-1].Held
	})
	syscall.Kill(watch.pid(), syscall.SIGTERM)
	if code := watch.wait(10 * time.Second); code != 0 {
		t.Fatalf("leader --watch exited %d after SIGTERM; stderr:\n%s", code, watch.stderr())
	}

	type term struct {
		id, value string
		token     uint64
	}
	want := []term{{"alpha", values["alpha"], ai.token}, {"beta", values["beta"], bi.token}, {"beta", values["beta"], b2}}
	var got []term
	nones := 0
	for _, w := range readWatch(t, watch) {
		if !w.Held {
			nones++
			continue
		}
		got = append(got, term{w.OwnerID, w.Value, w.Token})
	}
	if len(got) != len(want) {
		t.Fatalf("the watcher saw the leaders %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("the watcher saw the leaders %+v; want %+v", got, want)
		}
	}
	if nones < 2 {
		t.Fatalf("the watcher saw nobody leading %d times; want at least at the start and after the SIGKILL", nones)
	}
}

// Bad published values and ids are refused before any I/O: nothing is
// created.
func TestElectValueRefusedBeforeIO(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, args := range [][]any{
		{"elect", "--value", "10.0.0.5:80\x1b[2J", "job", "--", "true"},
		{"elect", "--value", strings.Repeat("v", 129), "job", "--", "true"},
		{"elect", "--value", "a\nb", "job", "--", "true"},
		{"elect", "--value", "\xff", "job", "--", "true"},
		{"elect", "--owner", "web|1", "job", "--", "true"},
		{"elect", "--owner", strings.Repeat("o", 150), "--value", strings.Repeat("v", 60), "job", "--", "true"},
		{"run", "--owner", "web|1", "job", "--", "true"},
		{"leader", "--interval", "0s", "job"},
		{"leader", ""},
	} {
		code, _, stderr := e.run(args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want 64; stderr:\n%s", args, code, stderr)
		}
		if strings.Contains(stderr, "\x1b") || strings.Contains(stderr, "\xff") {
			t.Errorf("%q: stderr holds the raw value: %q", args, stderr)
		}
	}
	if _, err := os.Stat(e.db); !os.IsNotExist(err) {
		t.Fatalf("the store was created: %v", err)
	}
}

// tenure elect keeps the hand-over rule: on SIGTERM, the leader's command
// gets the signal and goes on working for 500 ms before it exits; the lease
// is released only after that, so the other candidate's command starts
// after the first one's last beat.
func TestElectHandOverWaitsForTheCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	out := e.path("events")
	elect := func(name string) *proc {
		return e.start(name, startOpt{}, electArgs(name, 5*time.Second, 100*time.Millisecond,
			helper("-out", out, "-ready", e.path(name+".ready"), "-hold", "1h", "-beat", "-signals", "linger", "-tag", name))...)
	}
	alpha := elect("alpha")
	ai := waitReady(t, e.path("alpha.ready"), 20*time.Second)
	beta := elect("beta")
	waitObserved(t, beta, "alpha")
	syscall.Kill(alpha.pid(), syscall.SIGTERM)
	bi := waitReady(t, e.path("beta.ready"), 20*time.Second)
	if code := alpha.wait(10 * time.Second); code != 0 {
		t.Fatalf("alpha exited %d, want its command's 0; stderr:\n%s", code, alpha.stderr())
	}
	var signaled, alphaEnd int64
	for _, ev := range readEvents(t, out) {
		if ev.token != ai.token {
			continue
		}
		switch ev.kind {
		case "signal":
			signaled = ev.mono
		case "end":
			alphaEnd = ev.mono
		}
	}
	betaStart := startOf(t, out, bi.token).mono
	t.Logf("SIGTERM → alpha's command ends %v later → beta's command starts %v after that",
		time.Duration(alphaEnd-signaled).Round(time.Millisecond), time.Duration(betaStart-alphaEnd).Round(time.Millisecond))
	if signaled == 0 || alphaEnd-signaled < int64(400*time.Millisecond) {
		t.Fatalf("alpha's command did not linger after SIGTERM (signal %d, end %d)", signaled, alphaEnd)
	}
	checkTermsDisjoint(t, out)
	syscall.Kill(beta.pid(), syscall.SIGTERM)
	beta.wait(10 * time.Second)
}

// tenure leader --watch started before the store exists says that there
// is no leader, and follows the election once tenure elect creates the
// store.
func TestLeaderWatchBeforeTheStoreExists(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	watch := e.start("watch", startOpt{}, "leader", "--watch", "--json", "--interval", "100ms", "job")
	waitFor(t, 20*time.Second, "the watcher's first line", func() bool { return len(readWatch(t, watch)) == 1 })
	if w := readWatch(t, watch)[0]; w.Held {
		t.Fatalf("a leader before the store exists: %+v", w)
	}
	alpha := e.start("alpha", startOpt{}, electValueArgs("alpha", "v", helper("-ready", e.path("alpha.ready"), "-hold", "1h"))...)
	waitReady(t, e.path("alpha.ready"), 20*time.Second)
	waitFor(t, 20*time.Second, "the watcher's line for alpha", func() bool { return len(readWatch(t, watch)) == 2 })
	if w := readWatch(t, watch)[1]; !w.Held || w.OwnerID != "alpha" || w.Value != "v" {
		t.Fatalf("the watcher's second line: %+v; want alpha leading", w)
	}
	syscall.Kill(alpha.pid(), syscall.SIGTERM)
	alpha.wait(20 * time.Second)
	syscall.Kill(watch.pid(), syscall.SIGTERM)
	if code := watch.wait(10 * time.Second); code != 0 {
		t.Fatalf("leader --watch exited %d after SIGTERM; stderr:\n%s", code, watch.stderr())
	}
}
