package kubernetes_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-go/tenure/store/kubernetes"
)

// Settings of the interoperability run: client-go's LeaseDuration,
// RenewDeadline and RetryPeriod, and tenure's TTL (renewed every TTL/3)
// and retry interval. They meet the rule in docs/store-kubernetes.md:
// RetryPeriod + RenewDeadline < LeaseDuration, RetryPeriod at least 1 s.
const (
	interopLeaseDuration = 5 * time.Second
	interopRenewDeadline = 3 * time.Second
	interopRetryPeriod   = 1 * time.Second
	interopTTL           = 5 * time.Second
	interopRetry         = 250 * time.Millisecond
)

// candidate is one running candidate process.
type candidate struct {
	role, id, events string
	cmd              *exec.Cmd
	done             chan struct{}
	endedAt          atomic.Int64 // when it was killed or exited (CLOCK_MONOTONIC)
}

type interopRun struct {
	t          *testing.T
	dir, lease string
	kubeconfig string
	seq        int
	all        []*candidate
}

func (r *interopRun) start(role string) *candidate { return r.startWith(role, r.kubeconfig) }

// startWith starts a candidate that reaches the API server through
// kubeconfig.
func (r *interopRun) startWith(role, kubeconfig string) *candidate {
	r.t.Helper()
	r.seq++
	c := &candidate{role: role, id: fmt.Sprintf("%s-%d", role, r.seq), done: make(chan struct{})}
	c.events = filepath.Join(r.dir, c.id+".jsonl")
	args, _ := json.Marshal(helperArgs{
		Kubeconfig: kubeconfig, Namespace: testNamespace, Lease: r.lease, ID: c.id, Events: c.events,
		TTL: interopTTL, Retry: interopRetry,
		LeaseDuration: interopLeaseDuration, RenewDeadline: interopRenewDeadline, RetryPeriod: interopRetryPeriod,
	})
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), helperEnv+"="+role, helperArgsEnv+"="+string(args))
	logf, err := os.Create(filepath.Join(r.dir, c.id+".log"))
	if err != nil {
		r.t.Fatal(err)
	}
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	if err := c.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		_ = c.cmd.Wait()
		c.endedAt.CompareAndSwap(0, mono())
		logf.Close()
		close(c.done)
	}()
	r.all = append(r.all, c)
	return c
}

func readEvents(t *testing.T, file string) []event {
	t.Helper()
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // a line cut by SIGKILL
		}
		evs = append(evs, ev)
	}
	return evs
}

// leaderOf returns the candidate that leads now (a start without an end),
// or nil.
func (r *interopRun) leader() *candidate {
	for _, c := range r.all {
		select {
		case <-c.done:
			continue
		default:
		}
		evs := readEvents(r.t, c.events)
		leading := false
		for _, ev := range evs {
			switch ev.Ev {
			case "start":
				leading = true
			case "end":
				leading = false
			}
		}
		if leading {
			return c
		}
	}
	return nil
}

// interval is a time a candidate led: from its start event to its end
// event, or to when it was killed.
type interval struct {
	id         string
	start, end int64
}

func (r *interopRun) intervals() []interval {
	var out []interval
	for _, c := range r.all {
		var cur *interval
		for _, ev := range readEvents(r.t, c.events) {
			switch ev.Ev {
			case "start":
				cur = &interval{id: c.id, start: ev.T}
			case "end":
				if cur != nil {
					cur.end = ev.T
					out = append(out, *cur)
					cur = nil
				}
			}
		}
		if cur != nil {
			end := c.endedAt.Load()
			if end == 0 {
				end = mono()
			}
			cur.end = end
			out = append(out, *cur)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}

// TestClientGoInterop runs tenure candidates and client-go leader election
// candidates (resourcelock.LeaseLock) on the same Lease, each in a process
// of its own, for interopDuration (TENURE_K8S_INTEROP_DURATION for longer
// runs), and stops the leader again and again: by SIGKILL and by SIGTERM
// (a graceful stop, which releases the Lease), alternating, a fresh
// candidate of the same kind replacing it once another leads. One candidate
// of each kind runs at a time besides the replacement, so each take-over
// goes to the other kind: tenure to client-go and back. It checks that no
// two candidates ever led at once (on CLOCK_MONOTONIC, which all processes
// share: a candidate leads from its start event to its end event, or to
// its SIGKILL) and that each take-over came within the bound that
// docs/store-kubernetes.md gives, plus 3 s for a loaded machine.
func TestClientGoInterop(t *testing.T) {
	storeURL(t)
	cfg, err := kubernetes.ParseURL(os.Getenv("TENURE_KUBERNETES"))
	if err != nil {
		t.Fatal(err)
	}
	admin(t)
	duration := 100 * time.Second
	if v := os.Getenv("TENURE_K8S_INTEROP_DURATION"); v != "" {
		if duration, err = time.ParseDuration(v); err != nil {
			t.Fatalf("TENURE_K8S_INTEROP_DURATION=%q: %v", v, err)
		}
	}
	if testing.Short() {
		t.Skip("runs candidate processes for minutes")
	}
	r := &interopRun{t: t, dir: t.TempDir(), lease: "tenure-interop-" + randSuffix(), kubeconfig: cfg.Kubeconfig}
	t.Cleanup(func() {
		for _, c := range r.all {
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	r.start(roleTenure)
	r.start(roleClientGo)

	type takeover struct {
		how, from, to string
		d             time.Duration
		bound         time.Duration
	}
	var takeovers []takeover
	end := time.Now().Add(duration)
	actions := []string{"kill", "kill", "stop", "stop"}
	for i := 0; time.Now().Before(end); i++ {
		// Wait for a leader, let it lead a while.
		var l *candidate
		for deadline := time.Now().Add(30 * time.Second); l == nil; {
			if time.Now().After(deadline) {
				t.Fatalf("no leader for 30 s; candidates' logs in %s", r.dir)
			}
			time.Sleep(100 * time.Millisecond)
			l = r.leader()
		}
		time.Sleep(time.Duration(3+i%3) * time.Second)
		if l = r.leader(); l == nil {
			continue
		}
		how := actions[i%len(actions)]
		var at int64
		switch how {
		case "kill":
			_ = l.cmd.Process.Signal(syscall.SIGKILL)
			at = mono()
			l.endedAt.CompareAndSwap(0, at)
		case "stop":
			at = mono()
			_ = l.cmd.Process.Signal(syscall.SIGTERM)
		}
		// The next leader, then a replacement of the stopped kind.
		var next *candidate
		for deadline := time.Now().Add(60 * time.Second); next == nil || next == l; {
			if time.Now().After(deadline) {
				t.Fatalf("no take-over within 60 s of the %s of %s; logs in %s", how, l.id, r.dir)
			}
			time.Sleep(50 * time.Millisecond)
			next = r.leader()
		}
		<-l.done
		var startT int64
		for _, ev := range readEvents(t, next.events) {
			if ev.Ev == "start" && ev.T > at {
				startT = ev.T
			}
		}
		d := time.Duration(startT - at)
		takeovers = append(takeovers, takeover{how: how, from: l.role, to: next.role, d: d, bound: takeoverBound(how, next.role)})
		r.start(l.role)
	}

	ivs := r.intervals()
	for i := 1; i < len(ivs); i++ {
		for j := 0; j < i; j++ {
			if ivs[j].end > ivs[i].start {
				t.Errorf("two leaders at once: %s led until %v after %s started", ivs[j].id, time.Duration(ivs[j].end-ivs[i].start), ivs[i].id)
			}
		}
	}
	counts := map[string]int{}
	var lines []string
	for _, to := range takeovers {
		key := to.how + " " + to.from + " -> " + to.to
		counts[key]++
		lines = append(lines, fmt.Sprintf("%s: %v (bound %v)", key, to.d.Round(time.Millisecond), to.bound))
		if to.d > to.bound+3*time.Second {
			t.Errorf("%s: take-over after %v; the documented bound is %v", key, to.d, to.bound)
		}
	}
	t.Logf("%d leader terms without overlap in %v; take-overs:\n  %s", len(ivs), duration, strings.Join(lines, "\n  "))
	for _, key := range []string{"kill tenure -> client-go", "kill client-go -> tenure", "stop tenure -> client-go", "stop client-go -> tenure"} {
		if counts[key] == 0 && duration >= 90*time.Second {
			t.Errorf("no take-over %q in the run", key)
		}
	}
}

// takeoverBound is the documented bound of a take-over by a candidate of
// kind to after the leader was killed or stopped (docs/store-kubernetes.md):
// after a kill, the lease's duration after the leader's last renewal, plus
// how often the new leader looks (client-go: RetryPeriod with its jitter of
// 1.2, twice: once to see the last renewal, once to find it expired;
// tenure: its watch shows the renewal, and it looks at the expiry, plus a
// retry interval); after a graceful stop, client-go's next look or
// tenure's release notification.
func takeoverBound(how, to string) time.Duration {
	dur := max(interopLeaseDuration, interopTTL)
	look := time.Duration(2 * 1.2 * float64(interopRetryPeriod))
	if to == roleTenure {
		look = interopRetry
	}
	if how == "stop" {
		if to == roleTenure {
			return interopRetry
		}
		return time.Duration(1.2 * float64(interopRetryPeriod))
	}
	return dur + look
}
