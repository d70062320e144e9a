package bench

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"time"
)

// Phases.
const (
	PhaseCost      = "cost"
	PhaseOps       = "ops"
	PhaseContended = "contended"
	PhaseScale     = "scale"
	PhaseFailover  = "failover"
	PhasePeers     = "peers"
	PhaseWaiters   = "waiters"
	PhaseSemaphore = "semaphore"
)

// AllPhases lists the phases in the order they run.
var AllPhases = []string{PhaseCost, PhaseOps, PhaseContended, PhasePeers, PhaseWaiters, PhaseSemaphore, PhaseScale, PhaseFailover}

// DefaultPhases are the phases a run makes when none are named: all but
// peers, waiters and semaphore, which have their own flags and pages.
var DefaultPhases = []string{PhaseCost, PhaseOps, PhaseContended, PhaseScale, PhaseFailover}

// RunConfig configures a whole run.
type RunConfig struct {
	// Stores are "memory" and store URLs.
	Stores []string
	Phases []string

	// Operations phases.
	Clients   []int // distinct-resource concurrency levels
	Contended []int // clients on one resource
	Duration  time.Duration
	Rounds    int
	// MaxSamples caps the cycles of one system at one level (over all
	// clients and rounds), so fast stores keep bounded memory.
	MaxSamples int
	TTL        time.Duration
	CostCycles int

	// Scale phase, on the stores whose kind is in ScaleStores: one run per
	// count of ScaleLeases (default: Scale.Leases), in order; with
	// ScaleStopOnLate, the counts after the first run with a late renewal
	// or a lost lease are skipped (to find the largest count held with 0
	// late).
	Scale           ScaleConfig
	ScaleLeases     []int
	ScaleStopOnLate bool
	ScaleStores     []string

	// Failover phase, on the stores whose kind is in FailoverStores.
	Handoffs       int
	Candidates     int
	FailoverTTL    time.Duration
	FailoverRetry  time.Duration
	FailoverStores []string
	// Candidate returns the command that runs one candidate process on
	// storeURL (see RunCandidate).
	Candidate func(storeURL, resource string, ttl, retry time.Duration) *exec.Cmd

	// Peers phase: tenure against the peer libraries on each store that
	// has some (Target.Peers), at PeerClients clients on distinct names and
	// PeerContended clients on one name, with a TTL of PeerTTL; Duration
	// and Rounds as above. Contended clients keep a grant for PeerHold.
	PeerClients   []int
	PeerContended []int
	PeerTTL       time.Duration
	PeerHold      time.Duration

	// Waiters phase, on the stores whose kind is in WaitersStores.
	Waiters       WaitersConfig
	WaitersStores []string

	// Semaphore phase, on the stores whose kind is in SemaphoreStores.
	Semaphore       SemaphoreConfig
	SemaphoreStores []string

	// Prefix starts every resource name.
	Prefix   string
	Progress func(string)
}

func (c RunConfig) has(phase string) bool { return slices.Contains(c.Phases, phase) }

// Run runs every phase on every store and evaluates the targets. Errors of
// one store are recorded in the report, and the run goes on with the next.
func Run(ctx context.Context, cfg RunConfig, r *Report) {
	progress := cfg.Progress
	if progress == nil {
		progress = func(string) {}
	}
	cfg.Scale.Progress = progress
	fail := func(store string, err error) {
		r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", store, err))
		progress(fmt.Sprintf("%s: %v", store, err))
	}
	for _, raw := range cfg.Stores {
		if ctx.Err() != nil {
			break
		}
		octx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		t, err := Open(octx, raw)
		cancel()
		if err != nil {
			fail(Scheme(raw), err)
			continue
		}
		if err := runTarget(ctx, cfg, t, r, progress); err != nil {
			fail(t.Name, err)
		}
		t.Close()
	}
	r.Evaluate()
}

func runTarget(ctx context.Context, cfg RunConfig, t *Target, r *Report, progress func(string)) error {
	systems := t.Systems()
	if cfg.has(PhaseCost) && t.Meter != nil {
		for _, sys := range systems {
			cs, err := RunCost(ctx, t, sys, cfg.Prefix, cfg.TTL, cfg.CostCycles)
			if err != nil {
				return err
			}
			r.Costs = append(r.Costs, cs...)
		}
	}
	ops := func(phase, mode string, systems []System, levels []int, ttl, hold time.Duration) error {
		for _, c := range levels {
			rounds := max(cfg.Rounds, 1)
			oc := OpsConfig{
				Mode: mode, Clients: c, Duration: cfg.Duration / time.Duration(rounds), Rounds: rounds,
				Warmup: min(cfg.Duration/5, time.Second), TTL: ttl, Prefix: cfg.Prefix, Phase: phase, Hold: hold,
			}
			if cfg.MaxSamples > 0 {
				oc.MaxCycles = max(1, cfg.MaxSamples/(c*rounds))
			}
			what := mode
			if phase != "" {
				what = phase + " " + mode
			}
			progress(fmt.Sprintf("%s: %s, %d clients ...", t.Name, what, c))
			res, err := RunOps(ctx, t, systems, oc)
			if err != nil {
				return err
			}
			r.Ops = append(r.Ops, res...)
		}
		return nil
	}
	if cfg.has(PhaseOps) {
		if err := ops("", ModeDistinct, systems, cfg.Clients, cfg.TTL, 0); err != nil {
			return err
		}
	}
	if cfg.has(PhaseContended) {
		if err := ops("", ModeContended, systems, cfg.Contended, cfg.TTL, 0); err != nil {
			return err
		}
	}
	if cfg.has(PhasePeers) && len(t.Peers) > 0 {
		ttl := cfg.PeerTTL
		if ttl <= 0 {
			ttl = 10 * time.Second
		}
		peers := append([]System{t.Tenure()}, t.Peers...)
		if t.Meter != nil {
			for _, sys := range peers {
				progress(fmt.Sprintf("%s: peers, requests of %s ...", t.Name, sys.Name()))
				cs, err := RunCost(ctx, t, sys, cfg.Prefix+"/peers", ttl, cfg.CostCycles)
				if err != nil {
					return err
				}
				for _, c := range cs {
					c.Phase = PhasePeers
				}
				r.Costs = append(r.Costs, cs...)
			}
		}
		if err := ops(PhasePeers, ModeDistinct, peers, cfg.PeerClients, ttl, 0); err != nil {
			return err
		}
		if err := ops(PhasePeers, ModeContended, peers, cfg.PeerContended, ttl, cfg.PeerHold); err != nil {
			return err
		}
	}
	if cfg.has(PhaseWaiters) && slices.Contains(cfg.WaitersStores, t.Name) {
		wc := cfg.Waiters
		wc.Prefix, wc.Progress = cfg.Prefix, progress
		res, err := RunWaiters(ctx, t, wc)
		if res != nil {
			r.Waiters = append(r.Waiters, res)
		}
		if err != nil {
			return err
		}
	}
	if cfg.has(PhaseSemaphore) && slices.Contains(cfg.SemaphoreStores, t.Name) {
		sc := cfg.Semaphore
		sc.Prefix = cfg.Prefix
		progress(fmt.Sprintf("%s: semaphore, %d slots, %d clients ...", t.Name, sc.Slots, sc.Clients))
		res, err := RunSemaphore(ctx, t, sc)
		if err != nil {
			return err
		}
		r.Semaphores = append(r.Semaphores, res)
	}
	if cfg.has(PhaseScale) && slices.Contains(cfg.ScaleStores, t.Name) {
		counts := cfg.ScaleLeases
		if len(counts) == 0 {
			counts = []int{cfg.Scale.Leases}
		}
		for i, n := range counts {
			sc := cfg.Scale
			sc.Leases = n
			sc.Prefix = fmt.Sprintf("%s/%d", cfg.Prefix, i)
			res, err := RunScale(ctx, t, sc)
			if err != nil {
				return err
			}
			r.Scale = append(r.Scale, res)
			if cfg.ScaleStopOnLate && (res.Late > 0 || res.Lost > 0 || res.AcquireErrors > 0) {
				progress(fmt.Sprintf("scale %s: %d leases: %d late, %d lost; larger counts skipped", t.Name, n, res.Late, res.Lost))
				break
			}
		}
	}
	if cfg.has(PhaseFailover) && slices.Contains(cfg.FailoverStores, t.Name) && t.URL != "" && cfg.Candidate != nil {
		for _, kind := range []string{FailoverKill, FailoverRelease} {
			resource := fmt.Sprintf("%s/%s/failover-%s", cfg.Prefix, t.Name, kind)
			progress(fmt.Sprintf("%s: failover (%s), %d handoffs ...", t.Name, kind, cfg.Handoffs))
			res, err := RunFailover(ctx, FailoverConfig{
				Store: t.Name, Kind: kind, Handoffs: cfg.Handoffs, Candidates: cfg.Candidates,
				TTL: cfg.FailoverTTL, RetryPeriod: cfg.FailoverRetry, Resource: resource,
				Command:  func() *exec.Cmd { return cfg.Candidate(t.URL, resource, cfg.FailoverTTL, cfg.FailoverRetry) },
				Progress: progress,
			})
			if err != nil {
				return err
			}
			r.Failover = append(r.Failover, res)
		}
	}
	return nil
}
