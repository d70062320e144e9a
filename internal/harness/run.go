package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenure-go/tenure/internal/netfault"
)

// Config configures one harness run.
type Config struct {
	Store    string        // store URL: sqlite:PATH, cassandra://...
	Workers  int           // contending processes at any time
	Duration time.Duration // how long faults are injected
	TTL      time.Duration // lease TTL
	Retry    time.Duration // the workers' retry interval (largest backoff delay)
	Seed     uint64        // seeds the fault schedule and the workers
	Faults   []string      // fault kinds; nil means every kind that applies to the store
	Unsafe   bool          // run the deliberately unsafe client
	Out      string        // output directory: histories/, logs/, faults.jsonl, report.json
	ExitProb float64       // probability that a worker exits without releasing after a piece of work

	// Exe and ExeArgs run a worker: Exe ExeArgs... worker FLAGS.
	Exe     string
	ExeArgs []string

	// CassandraScript is scripts/cassandra, for node faults.
	CassandraScript string

	// LinearizabilityTimeout bounds porcupine (0: no limit).
	LinearizabilityTimeout time.Duration

	// Log receives progress lines (nil: discarded).
	Log io.Writer
}

// Run runs the harness: it starts the workers, injects faults on the
// seeded schedule for cfg.Duration, stops the workers (they release what
// they hold), and checks the histories. The report's Violations must be 0
// and its Missing empty.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Workers < 2 {
		return nil, errors.New("harness: need at least 2 workers")
	}
	if cfg.TTL <= 0 || cfg.Retry <= 0 || cfg.Duration <= 0 {
		return nil, errors.New("harness: TTL, retry and duration must be positive")
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	for _, d := range []string{"histories", "logs"} {
		if err := os.MkdirAll(filepath.Join(cfg.Out, d), 0o755); err != nil {
			return nil, err
		}
	}
	env, err := setupStore(ctx, cfg.Store)
	if err != nil {
		return nil, err
	}
	defer env.close()
	kinds := cfg.Faults
	if kinds == nil {
		kinds = env.faults
	}
	for _, k := range kinds {
		if !slices.Contains(env.faults, k) {
			return nil, fmt.Errorf("harness: fault %q does not apply to %s stores (they have: %s)", k, env.scheme, strings.Join(env.faults, ","))
		}
	}
	ff, err := os.OpenFile(filepath.Join(cfg.Out, "faults.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer ff.Close()
	o := &orch{
		cfg:      cfg,
		env:      env,
		rng:      rand.New(rand.NewPCG(cfg.Seed, 0x7e17e)),
		targets:  rand.New(rand.NewPCG(cfg.Seed, 0x7a76e7)),
		faultsF:  ff,
		changed:  make(chan struct{}, 1),
		resource: fmt.Sprintf("harness-%d-%d", cfg.Seed, MonoNow()),
	}
	fmt.Fprintf(cfg.Log, "harness: store=%s seed=%d workers=%d ttl=%v duration=%v faults=%s out=%s\n",
		env.scheme, cfg.Seed, cfg.Workers, cfg.TTL, cfg.Duration, strings.Join(kinds, ","), cfg.Out)
	for i := 0; i < cfg.Workers; i++ {
		s := &slot{idx: i}
		o.slots = append(o.slots, s)
		if err := o.start(s); err != nil {
			o.shutdown()
			return nil, err
		}
	}
	runErr := o.inject(ctx, kinds)
	o.shutdown()

	hs, err := ReadHistories(filepath.Join(cfg.Out, "histories"))
	if err != nil {
		return nil, err
	}
	faults, err := ReadFaults(filepath.Join(cfg.Out, "faults.jsonl"))
	if err != nil {
		return nil, err
	}
	rep := Check(hs, faults, Options{
		Profile:                env.profile,
		TTL:                    cfg.TTL,
		RetryInterval:          cfg.Retry,
		LinearizabilityTimeout: cfg.LinearizabilityTimeout,
		VisualPath:             filepath.Join(cfg.Out, "linearizability.html"),
	})
	rep.Store = env.scheme
	if env.scheme == "cassandra" && len(env.nodes) > 1 {
		rep.Store = fmt.Sprintf("cassandra-%dnodes", len(env.nodes))
	}
	rep.Seed, rep.Workers, rep.TTL, rep.Duration, rep.Unsafe = cfg.Seed, cfg.Workers, cfg.TTL.String(), cfg.Duration.String(), cfg.Unsafe
	for _, k := range kinds {
		if rep.Faults[k] == 0 {
			rep.Missing = append(rep.Missing, k)
		}
	}
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.Out, "report.json"), append(b, '\n'), 0o644); err != nil {
		return rep, err
	}
	return rep, runErr
}

type orch struct {
	cfg      Config
	env      *storeEnv
	rng      *rand.Rand // the schedule: kinds, durations, gaps, nodes
	targets  *rand.Rand // workers picked when none holds the lease (timing-dependent, so apart from the schedule)
	faultsF  *os.File
	changed  chan struct{}
	resource string

	mu       sync.Mutex
	slots    []*slot
	stopping bool
	wg       sync.WaitGroup
}

type slot struct {
	idx     int
	gen     int
	pid     int
	proc    *os.Process
	holding bool
	token   uint64
	history string
}

func (o *orch) notify() {
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

// start launches the worker process of slot s, and a goroutine that replaces
// it whenever it ends, until shutdown.
func (o *orch) start(s *slot) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.startLocked(s)
}

func (o *orch) startLocked(s *slot) error {
	name := fmt.Sprintf("w%02d-%03d", s.idx, s.gen)
	hist := filepath.Join(o.cfg.Out, "histories", name+".jsonl")
	args := append(slices.Clone(o.cfg.ExeArgs), "worker",
		"-store", o.env.workerURL,
		"-resource", o.resource,
		"-ttl", o.cfg.TTL.String(),
		"-retry", o.cfg.Retry.String(),
		"-history", hist,
		"-worker", strconv.Itoa(s.idx),
		"-seed", strconv.FormatUint(o.cfg.Seed, 10),
		"-exit-prob", strconv.FormatFloat(o.cfg.ExitProb, 'g', -1, 64))
	if o.env.translate != "" {
		args = append(args, "-translate", o.env.translate)
	}
	if o.cfg.Unsafe {
		args = append(args, "-unsafe")
	}
	logf, err := os.Create(filepath.Join(o.cfg.Out, "logs", name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(o.cfg.Exe, args...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("harness: start worker: %w", err)
	}
	s.pid, s.proc, s.history, s.holding = cmd.Process.Pid, cmd.Process, hist, false
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		defer logf.Close()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			o.mu.Lock()
			switch f[0] {
			case statusGrant:
				s.holding = true
				if len(f) > 1 {
					s.token, _ = strconv.ParseUint(f[1], 10, 64)
				}
			case statusEnd:
				s.holding = false
			}
			o.mu.Unlock()
			o.notify()
		}
		err := cmd.Wait()
		gone := Event{Ev: EvGone, T: MonoNow(), Err: "exited"}
		if err != nil {
			gone.Err = err.Error()
		}
		if err := AppendEvent(hist, gone); err != nil {
			fmt.Fprintf(o.cfg.Log, "harness: %v\n", err)
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		s.holding, s.proc = false, nil
		o.notify()
		if o.stopping {
			return
		}
		s.gen++
		if err := o.startLocked(s); err != nil {
			fmt.Fprintf(o.cfg.Log, "harness: restart worker %d: %v\n", s.idx, err)
		}
	}()
	return nil
}

// shutdown stops every worker with SIGTERM (they release what they hold),
// and SIGKILLs those that have not exited after a while.
func (o *orch) shutdown() {
	o.mu.Lock()
	o.stopping = true
	for _, s := range o.slots {
		if s.proc != nil {
			s.proc.Signal(syscall.SIGCONT)
			s.proc.Signal(syscall.SIGTERM)
		}
	}
	o.mu.Unlock()
	done := make(chan struct{})
	go func() { o.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(3*o.cfg.TTL + 30*time.Second):
	}
	o.mu.Lock()
	for _, s := range o.slots {
		if s.proc != nil {
			s.proc.Kill()
		}
	}
	o.mu.Unlock()
	<-done
}

func (o *orch) between(lo, hi float64) time.Duration {
	return time.Duration((lo + (hi-lo)*o.rng.Float64()) * float64(o.cfg.TTL))
}

// sleep waits for d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (o *orch) record(f Fault) {
	b, _ := json.Marshal(f)
	o.faultsF.Write(append(b, '\n'))
	fmt.Fprintf(o.cfg.Log, "harness: fault %s on %s for %v%s\n", f.Kind, f.Target,
		time.Duration(f.End-f.Start).Round(time.Millisecond), map[bool]string{true: " (holder)", false: ""}[f.Holder])
}

// inject runs the fault schedule: every kind once, in a seeded order, then
// kinds drawn at random until the duration is up, with gaps of one to two
// and a half TTLs in between. Faults never overlap, and each is healed
// before the next. A run lasts at least until every kind was injected once.
func (o *orch) inject(ctx context.Context, kinds []string) error {
	if len(kinds) == 0 {
		sleep(ctx, o.cfg.Duration)
		return ctx.Err()
	}
	end := time.Now().Add(o.cfg.Duration)
	order := o.rng.Perm(len(kinds))
	for i := 0; ; i++ {
		// The run lasts the duration, and at least until every kind was
		// tried once.
		if i >= len(order) && !time.Now().Add(o.cfg.TTL).Before(end) {
			return ctx.Err()
		}
		if !sleep(ctx, o.between(1, 2.5)) {
			return ctx.Err()
		}
		if i >= len(order) && !time.Now().Before(end) {
			return ctx.Err()
		}
		kind := kinds[o.rng.IntN(len(kinds))]
		if i < len(order) {
			kind = kinds[order[i]]
		}
		f, err := o.fault(ctx, kind)
		if errors.Is(err, errNoFault) {
			continue
		}
		if err != nil {
			return fmt.Errorf("harness: fault %s: %w", kind, err)
		}
		o.record(f)
	}
}

// holder waits up to d for a worker that holds the lease; without one it
// returns a random worker.
func (o *orch) holder(ctx context.Context, d time.Duration) *slot {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		o.mu.Lock()
		for _, s := range o.slots {
			if s.holding && s.proc != nil {
				o.mu.Unlock()
				return s
			}
		}
		o.mu.Unlock()
		select {
		case <-o.changed:
			continue
		case <-ctx.Done():
		case <-t.C:
		}
		break
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var live []*slot
	for _, s := range o.slots {
		if s.proc != nil {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[o.targets.IntN(len(live))]
}

func (o *orch) fault(ctx context.Context, kind string) (Fault, error) {
	f := Fault{Kind: kind}
	switch kind {
	case FaultPause, FaultKill:
		s := o.holder(ctx, 3*o.cfg.TTL)
		if s == nil {
			return f, errNoFault
		}
		o.mu.Lock()
		proc, pid := s.proc, s.pid
		f.Holder, f.Token = s.holding, s.token
		o.mu.Unlock()
		if proc == nil {
			return f, errNoFault
		}
		f.Target = fmt.Sprintf("worker %d (pid %d)", s.idx, pid)
		if kind == FaultKill {
			f.Start = MonoNow()
			proc.Kill()
			f.End = f.Start
			return f, nil
		}
		d := o.between(1.5, 3)
		f.Start = MonoNow()
		proc.Signal(syscall.SIGSTOP)
		sleep(ctx, d)
		proc.Signal(syscall.SIGCONT)
		f.End = MonoNow()
		f.Detail = fmt.Sprintf("stopped for %v", d.Round(time.Millisecond))
		return f, nil
	case FaultStuckWriter:
		d := o.between(1.5, 2.5)
		conn, err := o.env.db.Conn(ctx)
		if err != nil {
			return f, err
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return f, err
		}
		f.Start = MonoNow()
		sleep(ctx, d)
		_, err = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		f.End = MonoNow()
		f.Target = "store"
		f.Detail = fmt.Sprintf("BEGIN IMMEDIATE held for %v", d.Round(time.Millisecond))
		return f, err
	case FaultProxyDelay, FaultProxyDrop, FaultProxyBlackhole:
		f.Target = "store network"
		hold := o.between(1, 2.5)
		f.Start = MonoNow()
		switch kind {
		case FaultProxyDelay:
			delay := o.between(0.05, 0.5)
			for _, p := range o.env.proxies {
				p.SetDelay(delay)
			}
			f.Detail = fmt.Sprintf("every chunk delayed %v", delay.Round(time.Millisecond))
		case FaultProxyDrop:
			for _, p := range o.env.proxies {
				p.SetMode(netfault.DropReplies)
			}
		default:
			for _, p := range o.env.proxies {
				p.SetMode(netfault.Blackhole)
			}
		}
		sleep(ctx, hold)
		for _, p := range o.env.proxies {
			p.SetDelay(0)
			p.SetMode(netfault.Pass)
			if kind != FaultProxyDelay {
				// Streams that lost bytes are out of step: cut them, as a
				// real network's broken connections would be.
				p.Reset()
			}
		}
		f.End = MonoNow()
		return f, nil
	case FaultNodeKill, FaultNodePause, FaultCASTimeout:
		return o.nodeFault(ctx, f)
	}
	return f, fmt.Errorf("unknown fault kind %q", kind)
}

func (o *orch) script(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, o.cfg.CassandraScript, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", o.cfg.CassandraScript, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (o *orch) nodeFault(ctx context.Context, f Fault) (Fault, error) {
	nodes := o.env.nodes
	n := nodes[o.rng.IntN(len(nodes))]
	f.Target = fmt.Sprintf("node %d", n)
	bg := context.WithoutCancel(ctx)
	switch f.Kind {
	case FaultNodeKill:
		d := o.between(1.5, 3)
		f.Start = MonoNow()
		if err := o.script(bg, "kill", strconv.Itoa(n)); err != nil {
			return f, err
		}
		sleep(ctx, d)
		err := o.script(bg, "restart", strconv.Itoa(n))
		f.End = MonoNow()
		f.Detail = fmt.Sprintf("down %v before restart", d.Round(time.Millisecond))
		return f, err
	case FaultNodePause:
		d := o.between(1.5, 3)
		f.Start = MonoNow()
		if err := o.script(bg, "pause", strconv.Itoa(n)); err != nil {
			return f, err
		}
		sleep(ctx, d)
		err := o.script(bg, "resume", strconv.Itoa(n))
		f.End = MonoNow()
		f.Detail = fmt.Sprintf("stopped for %v", d.Round(time.Millisecond))
		return f, err
	default: // cas-timeout: two replicas stop while holders renew
		m := nodes[(slices.Index(nodes, n)+1+o.rng.IntN(len(nodes)-1))%len(nodes)]
		f.Target = fmt.Sprintf("nodes %d and %d", n, m)
		// Wait for a holder, so that renewals are in flight.
		o.holder(ctx, 3*o.cfg.TTL)
		d := time.Duration((1 + 2*o.rng.Float64()) * float64(time.Second))
		f.Start = MonoNow()
		err1 := o.script(bg, "pause", strconv.Itoa(n))
		err2 := o.script(bg, "pause", strconv.Itoa(m))
		sleep(ctx, d)
		err3 := o.script(bg, "resume", strconv.Itoa(n))
		err4 := o.script(bg, "resume", strconv.Itoa(m))
		f.End = MonoNow()
		f.Detail = fmt.Sprintf("both stopped for %v", d.Round(time.Millisecond))
		return f, errors.Join(err1, err2, err3, err4)
	}
}
