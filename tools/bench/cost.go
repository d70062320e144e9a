package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenure-go/tenure"
)

// Cost operations: what one client's operation costs the store, counted
// one operation at a time (nothing else runs meanwhile).
const (
	CostAcquireNew  = "acquire (resource never used)"
	CostAcquire     = "acquire (free, used before)"
	CostRenew       = "renew (held lease)"
	CostAcquireHeld = "acquire (held by another)"
	CostRelease     = "release"
)

// CostResult is the requests one operation sent, counted by the target's
// meter around each call.
type CostResult struct {
	// Phase is "" for the cost phase, "peers" for the peers phase.
	Phase   string `json:"phase,omitempty"`
	Store   string `json:"store"`
	System  string `json:"system"`
	Op      string `json:"op"`
	Samples int    `json:"samples"`
	// Unit is the meter's primary kind; Min, Max and Mean are of that kind.
	Unit string  `json:"unit"`
	Min  int64   `json:"min"`
	Max  int64   `json:"max"`
	Mean float64 `json:"mean"`
	// PerOp is the mean of every kind.
	PerOp map[string]float64 `json:"per_op"`
}

// RunCost runs cycles sequential cycles of sys on target and counts each
// operation's requests: per cycle, acquire, renew, an acquire of the held
// resource by a second client, release. The first acquire is of a resource
// never used before. It needs a meter.
func RunCost(ctx context.Context, target *Target, sys System, prefix string, ttl time.Duration, cycles int) ([]*CostResult, error) {
	if target.Meter == nil {
		return nil, nil
	}
	a, err := sys.NewClient("bench-cost-a")
	if err != nil {
		return nil, err
	}
	defer a.Close()
	b, err := sys.NewClient("bench-cost-b")
	if err != nil {
		return nil, err
	}
	defer b.Close()
	counts := map[string][]Counts{}
	count := func(op string, f func() error) error {
		before := target.Meter.Snapshot()
		err := f()
		d := target.Meter.Snapshot().Sub(before)
		if err != nil {
			return err
		}
		counts[op] = append(counts[op], d)
		return nil
	}
	resource := fmt.Sprintf("%s/%s/%s/cost", prefix, target.Name, sys.Name())
	for i := 0; i < cycles; i++ {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := func() error {
			op := CostAcquire
			if nn, ok := sys.(interface{ newNames() bool }); i == 0 || !supports(sys, OpRelease) || (ok && nn.newNames()) {
				op = CostAcquireNew
			}
			if err := count(op, func() error { return a.Acquire(cctx, resource, ttl) }); err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
			if supports(sys, OpRenew) {
				if err := count(CostRenew, func() error { return a.Renew(cctx) }); err != nil {
					return fmt.Errorf("%s: %w", CostRenew, err)
				}
			}
			if supports(sys, OpRelease) {
				err := count(CostAcquireHeld, func() error {
					err := b.Acquire(cctx, resource, ttl)
					if err == nil {
						return errors.New("granted, but another client holds it")
					}
					if errors.Is(err, tenure.ErrHeld) {
						return nil
					}
					return err
				})
				if err != nil {
					return fmt.Errorf("%s: %w", CostAcquireHeld, err)
				}
				if err := count(CostRelease, func() error { return a.Release(cctx) }); err != nil {
					return fmt.Errorf("%s: %w", CostRelease, err)
				}
			}
			return nil
		}()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("bench: cost of %s on %s: %w", sys.Name(), target.Name, err)
		}
	}
	unit := target.Meter.Primary()
	var out []*CostResult
	for _, op := range []string{CostAcquireNew, CostAcquire, CostAcquireHeld, CostRenew, CostRelease} {
		if _, ok := counts[op]; !ok {
			continue
		}
		cs := counts[op]
		r := &CostResult{Store: target.Name, System: sys.Name(), Op: op, Samples: len(cs), Unit: unit, PerOp: map[string]float64{}}
		r.Min, r.Max = cs[0][unit], cs[0][unit]
		sums := Counts{}
		for _, c := range cs {
			r.Min, r.Max = min(r.Min, c[unit]), max(r.Max, c[unit])
			for k, v := range c {
				sums[k] += v
			}
		}
		for k, v := range sums {
			r.PerOp[k] = round3(float64(v) / float64(len(cs)))
		}
		r.Mean = r.PerOp[unit]
		out = append(out, r)
	}
	return out, nil
}
