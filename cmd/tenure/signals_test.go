//go:build linux

package main

// Signals and the command's process group (field case C16): whatever makes
// tenure exit, nothing of the command's group runs on, and the lease is
// free at once.

import (
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// leftover returns a shell command line that starts the helper in the
// background with args, waits until it is ready (its -ready file), and then
// either exits or waits for it ("exit" or "wait").
func leftover(ready, then string, args ...string) []string {
	h := strings.Join(helper(append([]string{"-ready", ready}, args...)...), " ")
	return []string{"sh", "-c", h + " & while [ ! -e " + ready + " ]; do sleep 0.02; done; " + then}
}

// The command exits and leaves a process in its group: the process gets
// SIGTERM before the lease is released (a waiting process gets the lease
// only after it), and tenure exits with the command's status. One that
// ignores SIGTERM gets SIGKILL after --grace. Nothing of the group is left
// when tenure exits.
func TestLeftoversStoppedBeforeRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	out := e.path("events")
	ready := e.path("left.ready")
	a := e.start("alpha", startOpt{}, "run", "--owner", "alpha", "job", "--",
		leftover(ready, "exit 0", "-out", out, "-tag", "left", "-hold", "1h", "-signals", "background"))
	li := waitReady(t, ready, 10*time.Second)
	w := e.start("waiter", startOpt{}, "run", "--wait", "60s", "--owner", "waiter", "job", "--", helper("-out", out, "-tag", "waiter"))
	if code := a.wait(20 * time.Second); code != 0 {
		t.Fatalf("alpha exited %d, want the command's 0:\n%s", code, a.stderr())
	}
	if !processGone(li.pid) {
		t.Fatalf("the process the command left (pid %d) still runs after tenure exited:\n%s", li.pid, a.stderr())
	}
	if code := w.wait(30 * time.Second); code != 0 {
		t.Fatalf("the waiter exited %d:\n%s", code, w.stderr())
	}
	var term, granted int64
	for _, ev := range readEvents(t, out) {
		switch {
		case ev.tag == "left" && ev.kind == "signal" && ev.sig == "SIGTERM":
			term = ev.mono
		case ev.tag == "waiter" && ev.kind == "start":
			granted = ev.mono
		}
	}
	if term == 0 || granted == 0 || granted < term {
		t.Fatalf("the leftover got SIGTERM at %d and the waiter's command started at %d: want SIGTERM first, then the lease released", term, granted)
	}

	// A leftover that ignores SIGTERM: SIGKILL after --grace.
	ready = e.path("stubborn.ready")
	b := e.start("beta", startOpt{}, "run", "--grace", "500ms", "--owner", "beta", "job", "--",
		leftover(ready, "exit 3", "-out", out, "-tag", "stubborn", "-hold", "1h", "-signals", "ignore"))
	bi := waitReady(t, ready, 10*time.Second)
	if code := b.wait(20 * time.Second); code != 3 || !strings.Contains(b.stderr(), "SIGKILL") {
		t.Fatalf("beta exited %d, want the command's 3 after a SIGKILL to the leftover:\n%s", code, b.stderr())
	}
	if !processGone(bi.pid) {
		t.Fatalf("the leftover (pid %d) still runs after tenure exited", bi.pid)
	}
	if code, _, _ := e.run("status", "job"); code != exitFree {
		t.Fatalf("the lease is still held after tenure exited")
	}
}

// SIGINT, SIGTERM or SIGHUP to tenure just after the grant, with a shell
// script whose background job ignores SIGINT (as a non-interactive shell
// makes it): when tenure exits, nothing of the command's group runs, and
// the lease is free at once (field case C16). Also with sleep itself, as in
// the field report.
func TestSignalLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		for i := range 3 {
			name := strings.ToLower(strings.TrimPrefix(sigName(sig), "SIG")) + strconv.Itoa(i)
			ready := e.path(name + ".ready")
			var cmd []string
			if i == 0 {
				cmd = leftover(ready, "wait", "-hold", "1h", "-signals", "background")
			} else {
				pidFile := e.path(name + ".pid")
				cmd = []string{"sh", "-c", "sleep 30 & echo $! > " + pidFile + ".tmp; mv " + pidFile + ".tmp " + pidFile + "; echo \"$! 0 x\" > " + ready + ".tmp; mv " + ready + ".tmp " + ready + "; wait"}
			}
			p := e.start(name, startOpt{}, "run", "--wait", "10s", "--grace", "2s", "--owner", name, "job", "--", cmd)
			info := waitReady(t, ready, 10*time.Second)
			if err := syscall.Kill(p.pid(), sig); err != nil { // tenure alone, as kill(1) would
				t.Fatal(err)
			}
			code := p.wait(20 * time.Second)
			if !processGone(info.pid) {
				t.Fatalf("%s: process %d of the command's group still runs after tenure exited %d:\n%s", name, info.pid, code, p.stderr())
			}
			if code, _, _ := e.run("status", "job"); code != exitFree {
				t.Fatalf("%s: the lease is held after tenure exited", name)
			}
		}
	}
}

// A command that ignores SIGTERM after tenure was told to stop gets SIGKILL
// after --grace; tenure then releases the lease and exits 137.
func TestStopSignalThenSIGKILL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	out := e.path("events")
	p := e.start("alpha", startOpt{}, "run", "--grace", "1s", "--owner", "alpha", "job", "--",
		helper("-out", out, "-ready", e.path("ready"), "-hold", "1h", "-signals", "ignore"))
	info := waitReady(t, e.path("ready"), 10*time.Second)
	syscall.Kill(p.pid(), syscall.SIGTERM)
	if code := p.wait(20 * time.Second); code != 128+int(syscall.SIGKILL) || !strings.Contains(p.stderr(), "SIGKILL") {
		t.Fatalf("tenure exited %d, want %d after SIGKILL to the command:\n%s", code, 128+int(syscall.SIGKILL), p.stderr())
	}
	if !processGone(info.pid) {
		t.Fatalf("the command still runs")
	}
	if sigs := filter(readEvents(t, out), "signal"); len(sigs) != 1 || sigs[0].sig != "SIGTERM" {
		t.Fatalf("the command got %+v, want one SIGTERM", sigs)
	}
	if code, _, _ := e.run("status", "job"); code != exitFree {
		t.Fatalf("the lease is held after tenure exited")
	}
}

// SIGQUIT, SIGUSR1 and SIGUSR2 sent to tenure reach the command, and tenure
// goes on (no goroutine dump, no exit). While tenure waits for the lease,
// SIGUSR1 and SIGUSR2 are ignored and SIGQUIT stops the wait (131).
func TestOtherSignalsPassedOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	out := e.path("events")
	p := e.start("alpha", startOpt{stdinPipe: true}, "run", "--owner", "alpha", "job", "--",
		helper("-out", out, "-ready", e.path("ready"), "-hold", "stdin", "-signals", "ignore"))
	waitReady(t, e.path("ready"), 10*time.Second)
	want := []string{"SIGQUIT", "SIGUSR1", "SIGUSR2"}
	for i, sig := range []syscall.Signal{syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2} {
		syscall.Kill(p.pid(), sig)
		waitFor(t, 10*time.Second, "the command to get "+want[i], func() bool { return len(filter(readEvents(t, out), "signal")) == i+1 || p.exited() })
		if p.exited() {
			t.Fatalf("tenure exited %d on %s:\n%s", p.code, want[i], p.stderr())
		}
	}
	for i, ev := range filter(readEvents(t, out), "signal") {
		if ev.sig != want[i] {
			t.Fatalf("the command got %s, want %s", ev.sig, want[i])
		}
	}

	w := e.start("waiter", startOpt{}, "--log-level", "info", "run", "--owner", "waiter", "job", "--", helper("-out", e.path("waiter.events")))
	waitFor(t, 10*time.Second, "the waiter to wait", func() bool { return strings.Contains(w.stderr(), "resource is held; waiting") })
	syscall.Kill(w.pid(), syscall.SIGUSR1)
	syscall.Kill(w.pid(), syscall.SIGUSR2)
	waitFor(t, 10*time.Second, "the waiter to log the ignored signals", func() bool { return strings.Count(w.stderr(), "ignoring a signal") == 2 || w.exited() })
	syscall.Kill(w.pid(), syscall.SIGQUIT)
	if code := w.wait(10 * time.Second); code != 128+int(syscall.SIGQUIT) {
		t.Fatalf("the waiter exited %d after SIGQUIT, want %d:\n%s", code, 128+int(syscall.SIGQUIT), w.stderr())
	}

	p.stdin.Close()
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("tenure exited %d:\n%s", code, p.stderr())
	}
	for _, q := range []*proc{p, w} {
		if s := q.stderr(); strings.Contains(s, "goroutine ") {
			t.Fatalf("%s printed a goroutine dump:\n%s", q.name, s)
		}
	}
}

// replyGate is a TCP proxy that, once a request that contains a given
// pattern has gone through to the server, holds the server's replies back
// (requests still go through and are applied) until told to pass them: a
// store whose answer is on its way when tenure is stopped.
type replyGate struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	hold    bool
	pattern string
	sent    chan struct{} // closed when the request with the pattern went through
	conns   []net.Conn
}

func startReplyGate(t *testing.T, target string) *replyGate {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &replyGate{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		g.mu.Lock()
		for _, c := range g.conns {
			c.Close()
		}
		g.mu.Unlock()
	})
	return g
}

func (g *replyGate) serve(client net.Conn) {
	server, err := net.Dial("tcp", g.target)
	if err != nil {
		client.Close()
		return
	}
	g.mu.Lock()
	g.conns = append(g.conns, client, server)
	g.mu.Unlock()
	go func() { // requests
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				g.mu.Lock()
				match := g.sent != nil && strings.Contains(string(buf[:n]), g.pattern)
				if match {
					g.hold = true // before the request reaches the server
				}
				g.mu.Unlock()
				if _, err := server.Write(buf[:n]); err != nil {
					break
				}
				if match {
					g.mu.Lock()
					close(g.sent)
					g.sent = nil
					g.mu.Unlock()
				}
			}
			if err != nil {
				break
			}
		}
		server.Close()
	}()
	buf := make([]byte, 32<<10) // replies
	for {
		n, err := server.Read(buf)
		if n > 0 {
			for g.holding() {
				time.Sleep(5 * time.Millisecond)
			}
			if _, err := client.Write(buf[:n]); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	client.Close()
}

func (g *replyGate) holding() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.hold
}

// HoldAfter holds replies back once a request that contains pattern has
// gone through, and returns a channel closed then.
func (g *replyGate) HoldAfter(pattern string) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pattern = pattern
	g.sent = make(chan struct{})
	return g.sent
}

// Pass lets replies through again.
func (g *replyGate) Pass() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold = false
}

// tenure stopped while its acquire is in flight (on PostgreSQL, SIGTERM
// 50 ms after the acquire was sent, its answer held back): tenure resolves
// the outcome and frees what it may have taken before it exits, within a
// few seconds, so the lease is free when it is gone (field case C16), not
// held for the TTL. The command never runs.
func TestSignalDuringAcquireFreesTheLease(t *testing.T) {
	t.Parallel()
	raw := os.Getenv("TENURE_POSTGRES")
	if raw == "" {
		t.Skip("set TENURE_POSTGRES to run this test (scripts/test does)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	gate := startReplyGate(t, u.Host)
	viaGate := *u
	viaGate.Host = gate.ln.Addr().String()
	e := newEnv(t)
	e.store = raw
	e.init()
	for i := range 3 {
		res := uniqueResource("in-flight")
		gate.Pass()
		sent := gate.HoldAfter(res) // the acquire's request names the resource
		p := e.start("alpha"+strconv.Itoa(i), startOpt{}, "--store", viaGate.String(), "--log-level", "debug", "run", "--no-wait", "--ttl", "30s", res, "--",
			helper("-out", e.path("events")))
		select {
		case <-sent:
		case <-time.After(30 * time.Second):
			t.Fatalf("no acquire request went through:\n%s", p.stderr())
		}
		time.Sleep(50 * time.Millisecond)
		stopped := time.Now()
		syscall.Kill(p.pid(), syscall.SIGTERM)
		time.Sleep(300 * time.Millisecond) // the answers come late, but they come
		gate.Pass()
		code := p.wait(30 * time.Second)
		t.Logf("SIGTERM during the acquire: tenure exited %d after %v", code, p.ended.Sub(stopped).Round(time.Millisecond))
		if code != 128+int(syscall.SIGTERM) {
			t.Fatalf("tenure exited %d, want %d:\n%s", code, 128+int(syscall.SIGTERM), p.stderr())
		}
		if code, stdout, stderr := e.run("status", res); code != exitFree {
			t.Fatalf("the lease is held after tenure exited (status exit %d):\n%s%s\ntenure's stderr:\n%s", code, stdout, stderr, p.stderr())
		}
	}
	if evs := readEvents(t, e.path("events")); len(evs) != 0 {
		t.Fatalf("the command ran: %+v", evs)
	}
}
