package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-go/tenure"
)

// Modes of an operations phase.
const (
	ModeDistinct  = "distinct"  // every client on its own resource
	ModeContended = "contended" // every client on one resource
)

// OpsConfig configures one operations phase (one concurrency level).
type OpsConfig struct {
	Mode    string
	Clients int
	// Duration is the measured time per round; Rounds rounds of each system
	// alternate (A B C A B C ...), so that drift of a shared machine hits
	// every system alike.
	Duration time.Duration
	Rounds   int
	// MaxCycles caps the cycles of one client in one round (0: no cap), so
	// that very fast stores keep a bounded number of samples.
	MaxCycles int
	// Warmup is an unmeasured round before the measured ones.
	Warmup time.Duration
	TTL    time.Duration
	// Prefix starts every resource name.
	Prefix string
	// Timeout bounds each operation (default 30 s).
	Timeout time.Duration
	// Hold is how long a client keeps a grant in contended mode before it
	// releases it (default 0: at once). The overlap count covers that
	// time: with 0 it checks only the instant between the acquire's return
	// and the release's call.
	Hold time.Duration
	// Phase names the phase in the results: "" for the ops and contended
	// phases, PhasePeers for the peers phase.
	Phase string
}

// OpsResult is one system's figures in one phase.
type OpsResult struct {
	// Phase is "" for the ops and contended phases, "peers" for the peers
	// phase.
	Phase    string  `json:"phase,omitempty"`
	TTLS     float64 `json:"ttl_s,omitempty"`
	Store    string  `json:"store"`
	System   string  `json:"system"`
	Mode     string  `json:"mode"`
	Clients  int     `json:"clients"`
	ElapsedS float64 `json:"elapsed_s"`
	// Cycles counts the cycles run: acquire, renew, release (distinct);
	// acquire attempts (contended). Failed operations are in Errors.
	Cycles int64 `json:"cycles"`
	// Ops are the latencies and rates of each operation. In contended mode
	// "acquire" is a granted attempt and "acquire-held" one that found the
	// resource held.
	Ops map[string]*OpResult `json:"ops"`
	// OpsPerS is all operations per second of wall time.
	OpsPerS    float64 `json:"ops_per_s"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	// Overlaps counts, in contended mode, the grants made while another
	// client of the same system believed it held the resource (between
	// its acquire's return and its release's call): 0 for a correct lock.
	Overlaps int64 `json:"overlaps"`
	// HoldMs is the contended mode's hold time.
	HoldMs float64 `json:"hold_ms,omitempty"`
	// Requests are the store requests counted during the measured rounds,
	// by kind, and PerCycle the primary kind per cycle.
	Requests Counts  `json:"requests,omitempty"`
	Unit     string  `json:"unit,omitempty"`
	PerCycle float64 `json:"requests_per_cycle,omitempty"`
	// ClientCPUUsPerOp is the CPU time (user + system, getrusage) that this
	// process spent during the measured rounds, per successful operation:
	// the client's cost, GC included. The systems of a store run one at a
	// time, so it is theirs alone.
	ClientCPUUsPerOp float64 `json:"client_cpu_us_per_op,omitempty"`
}

// OpResult is one operation's latency and rate.
type OpResult struct {
	Summary
	PerS float64 `json:"per_s"`
}

type opsAcc struct {
	mu       sync.Mutex
	samples  map[string][]time.Duration
	elapsed  time.Duration
	cpu      time.Duration
	cycles   int64
	errors   int64
	overlaps int64
	firstErr string
	req      Counts
}

func (a *opsAcc) merge(local map[string][]time.Duration, cycles, errs int64, firstErr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for op, s := range local {
		a.samples[op] = append(a.samples[op], s...)
	}
	a.cycles += cycles
	a.errors += errs
	if a.firstErr == "" {
		a.firstErr = firstErr
	}
}

// RunOps measures systems (all on target's server) in one phase, their
// rounds interleaved. Systems that cannot release are skipped in
// contended mode.
func RunOps(ctx context.Context, target *Target, systems []System, cfg OpsConfig) ([]*OpsResult, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	type entry struct {
		sys     System
		clients []Client
		acc     *opsAcc
	}
	var entries []*entry
	defer func() {
		for _, e := range entries {
			for _, c := range e.clients {
				c.Close()
			}
		}
	}()
	for _, sys := range systems {
		if cfg.Mode == ModeContended && !supports(sys, OpRelease) {
			continue
		}
		if nn, ok := sys.(interface{ newNames() bool }); ok && nn.newNames() && cfg.Mode == ModeContended {
			continue // a new name each time never contends
		}
		e := &entry{sys: sys, acc: &opsAcc{samples: map[string][]time.Duration{}}}
		entries = append(entries, e)
		for i := 0; i < cfg.Clients; i++ {
			c, err := sys.NewClient(fmt.Sprintf("bench-%s-%d", sys.Name(), i))
			if err != nil {
				return nil, err
			}
			e.clients = append(e.clients, c)
		}
	}
	if cfg.Warmup > 0 {
		for _, e := range entries {
			scratch := &opsAcc{samples: map[string][]time.Duration{}}
			wcfg := cfg
			wcfg.Duration, wcfg.MaxCycles = cfg.Warmup, 0
			if err := runRound(ctx, target.Name, e.sys, e.clients, wcfg, scratch); err != nil {
				return nil, err
			}
		}
	}
	for r := 0; r < cfg.Rounds; r++ {
		for _, e := range entries {
			before := target.Meter.Snapshot()
			cpu0 := processCPU()
			if err := runRound(ctx, target.Name, e.sys, e.clients, cfg, e.acc); err != nil {
				return nil, err
			}
			e.acc.cpu += processCPU() - cpu0
			d := target.Meter.Snapshot().Sub(before)
			if e.acc.req == nil {
				e.acc.req = d
			} else {
				for k, v := range d {
					e.acc.req[k] += v
				}
			}
		}
	}
	var out []*OpsResult
	for _, e := range entries {
		a := e.acc
		res := &OpsResult{
			Phase: cfg.Phase, TTLS: cfg.TTL.Seconds(), Overlaps: a.overlaps, HoldMs: ms(cfg.Hold),
			Store: target.Name, System: e.sys.Name(), Mode: cfg.Mode, Clients: cfg.Clients,
			ElapsedS: round3(a.elapsed.Seconds()), Cycles: a.cycles, Ops: map[string]*OpResult{},
			Errors: a.errors, FirstError: a.firstErr, Requests: a.req,
		}
		total := 0
		for op, s := range a.samples {
			total += len(s)
			or := &OpResult{Summary: Summarize(s)}
			if a.elapsed > 0 {
				or.PerS = round3(float64(len(s)) / a.elapsed.Seconds())
			}
			res.Ops[op] = or
		}
		if a.elapsed > 0 {
			res.OpsPerS = round3(float64(total) / a.elapsed.Seconds())
		}
		if total > 0 && a.cpu > 0 {
			res.ClientCPUUsPerOp = round3(float64(a.cpu) / 1e3 / float64(total))
		}
		res.Unit = target.Meter.Primary()
		if a.cycles > 0 && target.Meter != nil {
			res.PerCycle = round3(float64(a.req[target.Meter.Primary()]) / float64(a.cycles))
		}
		out = append(out, res)
	}
	return out, nil
}

func supports(sys System, op string) bool {
	for _, o := range sys.Ops() {
		if o == op {
			return true
		}
	}
	return false
}

// runRound runs every client of sys for cfg.Duration (or cfg.MaxCycles
// cycles each), starting them together.
func runRound(ctx context.Context, store string, sys System, clients []Client, cfg OpsConfig, acc *opsAcc) error {
	start := make(chan struct{})
	var wg sync.WaitGroup
	var endMu sync.Mutex
	var lastEnd time.Time
	var holders atomic.Int64 // contended: clients between a grant and its release
	for i, c := range clients {
		resource := fmt.Sprintf("%s/%s/%s/c%d/%d", cfg.Prefix, store, sys.Name(), cfg.Clients, i)
		if cfg.Mode == ModeContended {
			resource = fmt.Sprintf("%s/%s/%s/contended-c%d", cfg.Prefix, store, sys.Name(), cfg.Clients)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[string][]time.Duration{}
			var cycles, errs int64
			var firstErr string
			fail := func(op string, err error) {
				errs++
				if firstErr == "" {
					firstErr = op + ": " + err.Error()
				}
			}
			timed := func(op string, f func(ctx context.Context) error) error {
				octx, cancel := context.WithTimeout(ctx, cfg.Timeout)
				t0 := time.Now()
				err := f(octx)
				d := time.Since(t0)
				cancel()
				if err == nil {
					local[op] = append(local[op], d)
				} else if cfg.Mode == ModeContended && op == OpAcquire && errors.Is(err, tenure.ErrHeld) {
					local["acquire-held"] = append(local["acquire-held"], d)
				}
				return err
			}
			<-start
			deadline := time.Now().Add(cfg.Duration)
			for n := 0; (cfg.MaxCycles == 0 || n < cfg.MaxCycles) && time.Now().Before(deadline) && ctx.Err() == nil; n++ {
				cycles++
				err := timed(OpAcquire, func(ctx context.Context) error { return c.Acquire(ctx, resource, cfg.TTL) })
				if err != nil {
					if !(cfg.Mode == ModeContended && errors.Is(err, tenure.ErrHeld)) {
						fail(OpAcquire, err)
					}
					continue
				}
				if cfg.Mode == ModeContended {
					if holders.Add(1) > 1 {
						acc.mu.Lock()
						acc.overlaps++
						acc.mu.Unlock()
					}
					if cfg.Hold > 0 {
						time.Sleep(cfg.Hold)
					}
					holders.Add(-1)
				}
				if cfg.Mode == ModeDistinct && supports(sys, OpRenew) {
					if err := timed(OpRenew, c.Renew); err != nil {
						fail(OpRenew, err)
					}
				}
				if supports(sys, OpRelease) {
					if err := timed(OpRelease, c.Release); err != nil {
						fail(OpRelease, err)
					}
				}
			}
			end := time.Now()
			endMu.Lock()
			if end.After(lastEnd) {
				lastEnd = end
			}
			endMu.Unlock()
			acc.merge(local, cycles, errs, firstErr)
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	acc.mu.Lock()
	acc.elapsed += lastEnd.Sub(t0)
	acc.mu.Unlock()
	return ctx.Err()
}
