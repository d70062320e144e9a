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

// SemaphoreConfig configures the semaphore phase: Clients contenders, each
// with a Locker of its own, on one Semaphore of Slots slots, each trying in
// a loop: TryAcquire, and when granted, keep the slot for Hold and release
// it.
type SemaphoreConfig struct {
	Slots    int           // default 3
	Clients  int           // default 8
	Duration time.Duration // measured time (default 6 s)
	TTL      time.Duration // default 10 s
	Hold     time.Duration // how long a slot is kept (0: released at once; then the holder count covers only an instant)
	Prefix   string
}

// SemaphoreResult is what the semaphore phase measured on one store.
type SemaphoreResult struct {
	Store     string  `json:"store"`
	Slots     int     `json:"slots"`
	Clients   int     `json:"clients"`
	DurationS float64 `json:"duration_s"`
	TTLS      float64 `json:"ttl_s"`
	HoldMs    float64 `json:"hold_ms"`
	// Attempts are the TryAcquire calls; Ops the latency of a granted
	// attempt ("acquire"), of one that found every slot held
	// ("acquire-held") and of the release.
	Attempts int64                `json:"attempts"`
	Ops      map[string]*OpResult `json:"ops"`
	// Wins are the grants of each client; Fairness is Jain's index of them
	// (1: equal; 1/Clients: one client got everything), MinMax the fewest
	// over the most.
	Wins     []int64 `json:"wins"`
	Fairness float64 `json:"fairness"`
	MinMax   float64 `json:"min_over_max"`
	// MaxHolders is the most clients that held a slot at once; Overlaps
	// counts the grants made while Slots other clients held one (0 for a
	// correct semaphore).
	MaxHolders int64 `json:"max_holders"`
	Overlaps   int64 `json:"overlaps"`
	// Requests counted over the measured time, and per attempt (the
	// meter's primary kind).
	Requests   Counts  `json:"requests,omitempty"`
	Unit       string  `json:"unit,omitempty"`
	PerAttempt float64 `json:"requests_per_attempt,omitempty"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
}

// RunSemaphore runs the semaphore phase on target.
func RunSemaphore(ctx context.Context, target *Target, cfg SemaphoreConfig) (*SemaphoreResult, error) {
	if cfg.Slots <= 0 {
		cfg.Slots = 3
	}
	if cfg.Clients <= 0 {
		cfg.Clients = 8
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 6 * time.Second
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 10 * time.Second
	}
	resource := fmt.Sprintf("%s/%s/semaphore", cfg.Prefix, target.Name)
	sems := make([]*tenure.Semaphore, cfg.Clients)
	for i := range sems {
		lk, err := tenure.New(target.Store, tenure.WithOwnerID(fmt.Sprintf("bench-sem-%d", i)))
		if err != nil {
			return nil, err
		}
		defer closeLocker(lk)
		if sems[i], err = lk.Semaphore(resource, cfg.Slots); err != nil {
			return nil, err
		}
	}
	res := &SemaphoreResult{
		Store: target.Name, Slots: cfg.Slots, Clients: cfg.Clients, TTLS: cfg.TTL.Seconds(), HoldMs: ms(cfg.Hold),
		Ops: map[string]*OpResult{}, Wins: make([]int64, cfg.Clients), Unit: target.Meter.Primary(),
	}
	var (
		holders, maxHolders, overlaps atomic.Int64
		mu                            sync.Mutex
		samples                       = map[string][]time.Duration{}
		attempts, errs                int64
		firstErr                      string
	)
	run := func(d time.Duration, measure bool) {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, s := range sems {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := map[string][]time.Duration{}
				var n, e, wins int64
				var fe string
				fail := func(err error) {
					e++
					if fe == "" {
						fe = err.Error()
					}
				}
				<-start
				deadline := time.Now().Add(d)
				for time.Now().Before(deadline) && ctx.Err() == nil {
					n++
					actx, cancel := context.WithTimeout(ctx, 30*time.Second)
					t0 := time.Now()
					sl, err := s.TryAcquire(actx, cfg.TTL)
					took := time.Since(t0)
					cancel()
					if errors.Is(err, tenure.ErrHeld) {
						local["acquire-held"] = append(local["acquire-held"], took)
						continue
					}
					if err != nil {
						fail(err)
						continue
					}
					local[OpAcquire] = append(local[OpAcquire], took)
					wins++
					h := holders.Add(1)
					if h > int64(cfg.Slots) {
						overlaps.Add(1)
					}
					for m := maxHolders.Load(); h > m && !maxHolders.CompareAndSwap(m, h); m = maxHolders.Load() {
					}
					if cfg.Hold > 0 {
						time.Sleep(cfg.Hold)
					}
					holders.Add(-1)
					rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
					t0 = time.Now()
					err = sl.Release(rctx)
					took = time.Since(t0)
					rcancel()
					if err != nil {
						fail(fmt.Errorf("release: %w", err))
						continue
					}
					local[OpRelease] = append(local[OpRelease], took)
				}
				if !measure {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for k, v := range local {
					samples[k] = append(samples[k], v...)
				}
				attempts += n
				errs += e
				res.Wins[i] += wins
				if firstErr == "" {
					firstErr = fe
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	run(min(cfg.Duration/5, time.Second), false) // warm-up
	before := target.Meter.Snapshot()
	t0 := time.Now()
	run(cfg.Duration, true)
	elapsed := time.Since(t0)
	res.DurationS = round3(elapsed.Seconds())
	res.Requests = target.Meter.Snapshot().Sub(before)
	res.Attempts, res.Errors, res.FirstError = attempts, errs, firstErr
	res.MaxHolders, res.Overlaps = maxHolders.Load(), overlaps.Load()
	for k, v := range samples {
		res.Ops[k] = &OpResult{Summary: Summarize(v), PerS: round3(float64(len(v)) / elapsed.Seconds())}
	}
	var sum, sq float64
	lo, hi := res.Wins[0], res.Wins[0]
	for _, w := range res.Wins {
		sum += float64(w)
		sq += float64(w) * float64(w)
		lo, hi = min(lo, w), max(hi, w)
	}
	if sq > 0 {
		res.Fairness = round3(sum * sum / (float64(len(res.Wins)) * sq))
	}
	if hi > 0 {
		res.MinMax = round3(float64(lo) / float64(hi))
	}
	if attempts > 0 && res.Requests != nil {
		res.PerAttempt = round3(float64(res.Requests[res.Unit]) / float64(attempts))
	}
	return res, ctx.Err()
}
