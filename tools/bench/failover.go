package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/election"
)

// Failover kinds.
const (
	FailoverKill    = "kill"    // the leader is killed with SIGKILL
	FailoverRelease = "release" // the leader is sent SIGTERM: it resigns, releasing its lease
)

// CandidateConfig configures a candidate process (tenure-bench candidate).
type CandidateConfig struct {
	Resource    string
	Identity    string
	TTL         time.Duration
	RetryPeriod time.Duration
}

// RunCandidate campaigns with election.Candidate until ctx ends, then
// resigns (releasing the lease if it leads). It writes one line per event
// to out, times read from CLOCK_MONOTONIC, which every process of the host
// shares:
//
//	ready PID MONO_NS          campaigning
//	lead PID MONO_NS TOKEN     started leading
//	stopped PID MONO_NS        the term ended
//	exit PID MONO_NS           Run returned
func RunCandidate(ctx context.Context, store driver.Store, cfg CandidateConfig, pid int, out io.Writer) error {
	var mu sync.Mutex
	emit := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	var c *election.Candidate
	c, err := election.New(store, election.Config{
		Resource:    cfg.Resource,
		Identity:    cfg.Identity,
		TTL:         cfg.TTL,
		RetryPeriod: cfg.RetryPeriod,
		OnStartedLeading: func(context.Context) {
			t := Mono()
			var token uint64
			if l := c.Lease(); l != nil {
				token = l.Token()
			}
			emit("lead %d %d %d", pid, t, token)
		},
		OnStoppedLeading: func() { emit("stopped %d %d", pid, Mono()) },
	})
	if err != nil {
		return err
	}
	emit("ready %d %d", pid, Mono())
	err = c.Run(ctx)
	emit("exit %d %d", pid, Mono())
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// FailoverConfig configures the failover phase.
type FailoverConfig struct {
	Store       string
	Kind        string // FailoverKill or FailoverRelease
	Handoffs    int
	Candidates  int
	TTL         time.Duration
	RetryPeriod time.Duration
	Resource    string
	// Command returns the command that starts one candidate process (which
	// runs RunCandidate and writes its lines to stdout).
	Command func() *exec.Cmd
	// Wait bounds the wait for each handoff (default 2·TTL + 10 retry
	// periods + 30 s).
	Wait     time.Duration
	Progress func(string)
}

// FailoverResult is the distribution of handoff times: from the moment the
// benchmark signalled the leader (SIGKILL or SIGTERM) to the moment another
// candidate started leading, both on CLOCK_MONOTONIC.
type FailoverResult struct {
	Store      string  `json:"store"`
	Kind       string  `json:"kind"`
	Candidates int     `json:"candidates"`
	TTLS       float64 `json:"ttl_s"`
	RetryS     float64 `json:"retry_period_s"`
	Handoff    Summary `json:"handoff"`
	// TokenErrors counts new leaders whose fencing token was not above the
	// previous leader's.
	TokenErrors int `json:"token_errors"`
}

type candEvent struct {
	p     *candProc
	kind  string // ready, lead, stopped, exit, gone (process ended)
	mono  int64
	token uint64
}

type candProc struct {
	cmd   *exec.Cmd
	ready bool
	gone  bool
	// signalled: the bench sent it SIGKILL or SIGTERM. It no longer counts
	// as a campaigning candidate even before its exit is seen, so the next
	// handoff starts with cfg.Candidates candidates that will stay.
	signalled bool
	stderr    *tailBuffer
}

// RunFailover runs cfg.Handoffs handoffs between real candidate processes.
func RunFailover(ctx context.Context, cfg FailoverConfig) (*FailoverResult, error) {
	if cfg.Candidates < 2 {
		cfg.Candidates = 2
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 2*cfg.TTL + 10*cfg.RetryPeriod + 30*time.Second
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string) {}
	}
	var sig func(p *candProc) error
	switch cfg.Kind {
	case FailoverKill:
		sig = func(p *candProc) error { return p.cmd.Process.Kill() }
	case FailoverRelease:
		sig = func(p *candProc) error { return p.cmd.Process.Signal(sigTerm) }
	default:
		return nil, fmt.Errorf("bench: failover kind %q", cfg.Kind)
	}
	events := make(chan candEvent, 64)
	var (
		procs []*candProc
		wg    sync.WaitGroup
	)
	alive := func() (n int, ready bool) {
		ready = true
		for _, p := range procs {
			if !p.gone && !p.signalled {
				n++
				ready = ready && p.ready
			}
		}
		return n, ready
	}
	spawn := func() error {
		cmd := cfg.Command()
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		p := &candProc{cmd: cmd, stderr: &tailBuffer{max: 4096}}
		cmd.Stderr = p.stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("bench: start candidate: %w", err)
		}
		procs = append(procs, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) < 3 {
					continue
				}
				e := candEvent{p: p, kind: f[0]}
				e.mono, _ = strconv.ParseInt(f[2], 10, 64)
				if len(f) > 3 {
					e.token, _ = strconv.ParseUint(f[3], 10, 64)
				}
				events <- e
			}
			_ = cmd.Wait()
			events <- candEvent{p: p, kind: "gone", mono: Mono()}
		}()
		return nil
	}
	defer func() {
		for _, p := range procs {
			if !p.gone {
				_ = p.cmd.Process.Signal(sigTerm)
			}
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for {
			select {
			case <-events:
				continue
			case <-done:
				return
			case <-time.After(30 * time.Second):
				for _, p := range procs {
					_ = p.cmd.Process.Kill()
				}
			}
		}
	}()

	var leader *candProc
	var lastToken uint64
	handle := func(e candEvent) error {
		switch e.kind {
		case "ready":
			e.p.ready = true
		case "lead":
			leader = e.p
		case "gone":
			e.p.gone = true
			if e.p == leader {
				leader = nil
			}
		case "exit":
			if e.p == leader {
				leader = nil
			}
		}
		return nil
	}
	next := func(deadline time.Time) (candEvent, error) {
		select {
		case e := <-events:
			return e, handle(e)
		case <-ctx.Done():
			return candEvent{}, ctx.Err()
		case <-time.After(time.Until(deadline)):
			return candEvent{}, errors.New("timed out")
		}
	}
	lastErr := func() string {
		for i := len(procs) - 1; i >= 0; i-- {
			if s := strings.TrimSpace(procs[i].stderr.String()); s != "" {
				return ": a candidate said: " + s
			}
		}
		return ""
	}
	var samples []time.Duration
	res := &FailoverResult{Store: cfg.Store, Kind: cfg.Kind, Candidates: cfg.Candidates, TTLS: cfg.TTL.Seconds(), RetryS: cfg.RetryPeriod.Seconds()}
	for len(samples) < cfg.Handoffs {
		// K candidates, all campaigning, one of them leading.
		for {
			n, _ := alive()
			if n >= cfg.Candidates {
				break
			}
			if err := spawn(); err != nil {
				return nil, err
			}
		}
		deadline := time.Now().Add(cfg.Wait)
		for {
			_, ready := alive()
			if ready && leader != nil && !leader.gone && !leader.signalled {
				break
			}
			if _, err := next(deadline); err != nil {
				return nil, fmt.Errorf("bench: failover on %s: waiting for candidates and a leader: %w%s", cfg.Store, err, lastErr())
			}
		}
		// A random moment within the renewal interval, so that kills hit
		// every phase of the renewal cycle.
		pause := time.Now().Add(time.Duration(rand.Int64N(int64(cfg.TTL/3) + 1)))
		for time.Now().Before(pause) {
			if _, err := next(pause); err != nil && ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
		if leader == nil || leader.gone {
			continue // it went away by itself; start over
		}
		old := leader
		old.signalled = true
		t0 := Mono()
		if err := sig(old); err != nil {
			return nil, fmt.Errorf("bench: signal the leader: %w", err)
		}
		deadline = time.Now().Add(cfg.Wait)
		for {
			e, err := next(deadline)
			if err != nil {
				return nil, fmt.Errorf("bench: failover on %s: waiting for a new leader after handoff %d: %w%s", cfg.Store, len(samples)+1, err, lastErr())
			}
			if e.kind == "lead" && e.p != old {
				samples = append(samples, time.Duration(e.mono-t0))
				if e.token != 0 && e.token <= lastToken {
					res.TokenErrors++
				}
				lastToken = e.token
				break
			}
			if e.kind == "lead" && e.p == old {
				lastToken = e.token
			}
		}
		if len(samples)%10 == 0 {
			s := append([]time.Duration(nil), samples...)
			sum := Summarize(s)
			progress(fmt.Sprintf("failover %s %s: %d/%d handoffs, p50 %.0f ms, max %.0f ms", cfg.Store, cfg.Kind, len(samples), cfg.Handoffs, sum.P50Ms, sum.MaxMs))
		}
	}
	res.Handoff = Summarize(samples)
	return res, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
