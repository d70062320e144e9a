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
)

// AllPhases lists the phases in the order they run.
var AllPhases = []string{PhaseCost, PhaseOps, PhaseContended, PhaseScale, PhaseFailover}

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

	// Scale phase, on the stores whose kind is in ScaleStores.
	Scale       ScaleConfig
	ScaleStores []string

	// Failover phase, on the stores whose kind is in FailoverStores.
	Handoffs       int
	Candidates     int
	FailoverTTL    time.Duration
	FailoverRetry  time.Duration
	FailoverStores []string
	// Candidate returns the command that runs one candidate process on
	// storeURL (see RunCandidate).
	Candidate func(storeURL, resource string, ttl, retry time.Duration) *exec.Cmd

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
	ops := func(mode string, levels []int) error {
		for _, c := range levels {
			rounds := max(cfg.Rounds, 1)
			oc := OpsConfig{
				Mode: mode, Clients: c, Duration: cfg.Duration / time.Duration(rounds), Rounds: rounds,
				Warmup: min(cfg.Duration/5, time.Second), TTL: cfg.TTL, Prefix: cfg.Prefix,
			}
			if cfg.MaxSamples > 0 {
				oc.MaxCycles = max(1, cfg.MaxSamples/(c*rounds))
			}
			progress(fmt.Sprintf("%s: %s, %d clients ...", t.Name, mode, c))
			res, err := RunOps(ctx, t, systems, oc)
			if err != nil {
				return err
			}
			r.Ops = append(r.Ops, res...)
		}
		return nil
	}
	if cfg.has(PhaseOps) {
		if err := ops(ModeDistinct, cfg.Clients); err != nil {
			return err
		}
	}
	if cfg.has(PhaseContended) {
		if err := ops(ModeContended, cfg.Contended); err != nil {
			return err
		}
	}
	if cfg.has(PhaseScale) && slices.Contains(cfg.ScaleStores, t.Name) {
		sc := cfg.Scale
		sc.Prefix = cfg.Prefix
		res, err := RunScale(ctx, t, sc)
		if err != nil {
			return err
		}
		r.Scale = append(r.Scale, res)
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
