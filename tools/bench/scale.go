package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// ScaleConfig configures the scale phase: one Locker holding many leases,
// renewed in the background for a while.
type ScaleConfig struct {
	Leases   int
	TTL      time.Duration
	Duration time.Duration
	// Slack: a renewal is late when it was confirmed more than
	// interval + Slack after the send of the previous confirmed one.
	Slack time.Duration
	// AcquireConcurrency is how many acquires run at once while the leases
	// are taken (and released at the end). Default 64.
	AcquireConcurrency int
	// AcquireRate, when positive, paces the acquires to at most this many
	// a second. The first renewals come due at the pace the leases were
	// taken: leases taken faster than the store serves renewals make a
	// first round of renewals the store cannot serve on time (Cassandra:
	// one LWT each, at the node's capacity). Leases/interval (1,000 a
	// second for 10,000 leases renewed every 10 s) keeps the first round
	// at the steady rate.
	AcquireRate float64
	// MaxConcurrentRenewals is passed to tenure.WithMaxConcurrentRenewals
	// when positive.
	MaxConcurrentRenewals int
	Prefix                string
	// Progress, when set, receives a line every ProgressEvery.
	Progress      func(string)
	ProgressEvery time.Duration
}

// ScaleResult is what the scale phase measured.
type ScaleResult struct {
	Store      string  `json:"store"`
	Leases     int     `json:"leases"`
	TTLS       float64 `json:"ttl_s"`
	IntervalS  float64 `json:"renew_interval_s"`
	DurationS  float64 `json:"duration_s"`
	SlackMs    float64 `json:"late_slack_ms"`
	MaxRenewal int     `json:"max_concurrent_renewals"`
	// AcquireRate is ScaleConfig.AcquireRate (0: unpaced).
	AcquireRate float64 `json:"acquire_rate_per_s,omitempty"`

	AcquireS      float64 `json:"acquire_all_s"`
	AcquireErrors int     `json:"acquire_errors"`
	ReleaseS      float64 `json:"release_all_s"`
	ReleaseErrors int     `json:"release_errors"`

	// Lost counts leases lost (WithOnLost calls) while held.
	Lost int64 `json:"lost"`
	// Renewals counts confirmed background renewals, RenewErrors failed
	// attempts, Late the confirmed renewals that were late.
	Renewals    int64 `json:"renewals"`
	RenewErrors int64 `json:"renew_errors"`
	Late        int64 `json:"late"`
	// RenewCalls counts the renewal calls the Locker made to the store
	// (one per batch, or one per lease), acquisition to release.
	RenewCalls int64 `json:"renew_calls"`
	// SendLag is each renewal's send time minus its schedule (the send of
	// the previous confirmed renewal + interval); ConfirmGap is its
	// confirmation time minus the send of the previous confirmed one;
	// RenewLatency is the store call.
	SendLag      Summary `json:"send_lag"`
	ConfirmGap   Summary `json:"confirm_gap"`
	RenewLatency Summary `json:"renew_latency"`

	// Goroutines: before the leases were taken, right after, and the peak
	// while they were held (sampled every 10 ms).
	GoroutinesBase int `json:"goroutines_base"`
	GoroutinesHeld int `json:"goroutines_held"`
	GoroutinesPeak int `json:"goroutines_peak"`
	// Heap (runtime.MemStats.HeapAlloc after two GCs): before the leases
	// were taken, right after, at the end of the hold, and after releasing
	// them all.
	HeapBase    uint64 `json:"heap_base_bytes"`
	HeapWith    uint64 `json:"heap_with_bytes"`
	HeapWithEnd uint64 `json:"heap_with_end_bytes"`
	HeapAfter   uint64 `json:"heap_after_bytes"`
	// HeapPerLease is (HeapWith − HeapBase)/Leases; HeapPerLeaseEnd is
	// (HeapWithEnd − HeapAfter)/Leases.
	HeapPerLease    float64 `json:"heap_per_lease_bytes"`
	HeapPerLeaseEnd float64 `json:"heap_per_lease_end_bytes"`

	// Requests counted while the leases were held, and per second.
	Requests  Counts             `json:"requests"`
	PerSecond map[string]float64 `json:"requests_per_s"`
	// BatchCalls counts the RenewBatch calls while the leases were held,
	// when the store renews in batches (driver.BatchRenewer); 0 otherwise.
	BatchCalls int64 `json:"batch_calls,omitempty"`
	// Batched tells whether the store renewed in batches.
	Batched bool `json:"batched"`
	// FirstRenewError is the error of the first renewal that failed while
	// the leases were held.
	FirstRenewError string `json:"first_renew_error,omitempty"`
}

// scaleStore wraps the target's store to time every renewal of the scale
// leases. Its memory is allocated before the baseline is measured.
type scaleStore struct {
	driver.Store
	base     time.Time
	interval time.Duration
	slack    time.Duration

	calls atomic.Int64 // renewal calls to the store: one per lease, or one per batch

	mu            sync.Mutex
	last          []time.Duration // per lease: send of the last confirmed acquire or renewal, since base
	lag, gap, lat []time.Duration
	late, errs    int64
	firstErr      string
}

func (s *scaleStore) index(resource string) int {
	i := strings.LastIndexByte(resource, '/')
	n, err := strconv.Atoi(resource[i+1:])
	if err != nil || n < 0 || n >= len(s.last) {
		return -1
	}
	return n
}

func (s *scaleStore) CheckTTL(ttl time.Duration) error {
	if c, ok := s.Store.(driver.TTLChecker); ok {
		return c.CheckTTL(ttl)
	}
	return nil
}

func (s *scaleStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (tenure.Record, error) {
	t0 := time.Since(s.base)
	rec, err := s.Store.Acquire(ctx, resource, owner, ttl)
	if i := s.index(resource); err == nil && i >= 0 {
		s.mu.Lock()
		s.last[i] = t0
		s.mu.Unlock()
	}
	return rec, err
}

func (s *scaleStore) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	t0 := time.Since(s.base)
	err := s.Store.Renew(ctx, resource, owner, token, ttl)
	t1 := time.Since(s.base)
	s.calls.Add(1)
	s.mu.Lock()
	s.record(resource, t0, t1, err)
	s.mu.Unlock()
	return err
}

// record notes one renewal of resource, sent at t0 and answered at t1.
func (s *scaleStore) record(resource string, t0, t1 time.Duration, err error) {
	i := s.index(resource)
	if i < 0 {
		return
	}
	if err != nil {
		s.errs++
		if s.firstErr == "" {
			s.firstErr = err.Error()
		}
		return
	}
	prev := s.last[i]
	s.lag = append(s.lag, t0-(prev+s.interval))
	gap := t1 - prev
	s.gap = append(s.gap, gap)
	s.lat = append(s.lat, t1-t0)
	if gap > s.interval+s.slack {
		s.late++
	}
	s.last[i] = t0
}

// scaleBatchStore is a scaleStore on a store that renews many leases in
// one call (driver.BatchRenewer): the Locker sees the batch interface, and
// each lease of a batch is timed by the batch's call. Calls counts the
// batch calls.
type scaleBatchStore struct {
	*scaleStore
	batch driver.BatchRenewer
	calls atomic.Int64
}

func (s *scaleBatchStore) RenewBatch(ctx context.Context, leases []driver.Renewal) []error {
	t0 := time.Since(s.base)
	errs := s.batch.RenewBatch(ctx, leases)
	t1 := time.Since(s.base)
	s.calls.Add(1)
	s.scaleStore.calls.Add(1)
	s.mu.Lock()
	for i, l := range leases {
		var err error
		if i < len(errs) {
			err = errs[i]
		} else {
			err = errors.New("no answer")
		}
		s.record(l.Resource, t0, t1, err)
	}
	s.mu.Unlock()
	return errs
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// RunScale takes cfg.Leases leases with one Locker on target's store, holds
// them for cfg.Duration while the Locker renews them every TTL/3, and
// releases them.
func RunScale(ctx context.Context, target *Target, cfg ScaleConfig) (*ScaleResult, error) {
	if cfg.AcquireConcurrency <= 0 {
		cfg.AcquireConcurrency = 64
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 30 * time.Second
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string) {}
	}
	interval := cfg.TTL / 3
	res := &ScaleResult{
		Store: target.Name, Leases: cfg.Leases, TTLS: cfg.TTL.Seconds(), IntervalS: interval.Seconds(),
		DurationS: cfg.Duration.Seconds(), SlackMs: ms(cfg.Slack), MaxRenewal: cfg.MaxConcurrentRenewals,
		AcquireRate: cfg.AcquireRate,
	}
	if res.MaxRenewal == 0 {
		res.MaxRenewal = tenure.DefaultMaxConcurrentRenewals
	}
	// Everything the measurement itself keeps is allocated now, before the
	// baseline.
	expect := cfg.Leases*int(cfg.Duration/interval+3)*3/2 + 16
	ss := &scaleStore{
		Store: target.Store, base: time.Now(), interval: interval, slack: cfg.Slack,
		last: make([]time.Duration, cfg.Leases),
		lag:  make([]time.Duration, 0, expect), gap: make([]time.Duration, 0, expect), lat: make([]time.Duration, 0, expect),
	}
	names := make([]string, cfg.Leases)
	for i := range names {
		names[i] = fmt.Sprintf("%s/%s/scale/%d", cfg.Prefix, target.Name, i)
	}
	leases := make([]*tenure.Lease, cfg.Leases)
	var lost atomic.Int64
	opts := []tenure.Option{
		tenure.WithOwnerID("bench-scale"),
		tenure.WithOnLost(func(*tenure.Lease, error) { lost.Add(1) }),
	}
	if cfg.MaxConcurrentRenewals > 0 {
		opts = append(opts, tenure.WithMaxConcurrentRenewals(cfg.MaxConcurrentRenewals))
	}
	var store driver.Store = ss
	var bs *scaleBatchStore
	if b, ok := target.Store.(driver.BatchRenewer); ok {
		bs = &scaleBatchStore{scaleStore: ss, batch: b}
		store = bs
		res.Batched = true
	}
	lk, err := tenure.New(store, opts...)
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = lk.Close(cctx)
	}()
	// Warm up: one lease taken and released (prepares statements, opens
	// connections).
	warm, err := lk.TryAcquire(ctx, fmt.Sprintf("%s/%s/scale/warm", cfg.Prefix, target.Name), cfg.TTL)
	if err != nil {
		return nil, fmt.Errorf("bench: scale warm-up on %s: %w", target.Name, err)
	}
	if err := warm.Release(ctx); err != nil {
		return nil, fmt.Errorf("bench: scale warm-up on %s: %w", target.Name, err)
	}

	// Goroutine sampler (running before the baseline, so it counts in both).
	var peak atomic.Int64
	sampling := make(chan struct{})
	samplerDone := make(chan struct{})
	var sample atomic.Bool
	go func() {
		defer close(samplerDone)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampling:
				return
			case <-t.C:
				if sample.Load() {
					if n := int64(runtime.NumGoroutine()); n > peak.Load() {
						peak.Store(n)
					}
				}
			}
		}
	}()
	defer func() { close(sampling); <-samplerDone }()

	time.Sleep(100 * time.Millisecond) // let the warm-up's goroutines end
	res.HeapBase = heapAlloc()
	res.GoroutinesBase = runtime.NumGoroutine()

	// Take the leases.
	progress(fmt.Sprintf("scale %s: acquiring %d leases (TTL %v) ...", target.Name, cfg.Leases, cfg.TTL))
	t0 := time.Now()
	var acqErrs atomic.Int64
	parallel(cfg.Leases, cfg.AcquireConcurrency, func(i int) {
		if cfg.AcquireRate > 0 {
			time.Sleep(time.Until(t0.Add(time.Duration(float64(i) / cfg.AcquireRate * float64(time.Second)))))
		}
		for attempt := 0; attempt < 3; attempt++ {
			actx, cancel := context.WithTimeout(ctx, time.Minute)
			l, err := lk.TryAcquire(actx, names[i], cfg.TTL)
			cancel()
			if err == nil {
				leases[i] = l
				return
			}
		}
		acqErrs.Add(1)
	})
	res.AcquireS = round3(time.Since(t0).Seconds())
	res.AcquireErrors = int(acqErrs.Load())
	res.HeapWith = heapAlloc()
	res.GoroutinesHeld = runtime.NumGoroutine()
	res.HeapPerLease = round3(float64(int64(res.HeapWith)-int64(res.HeapBase)) / float64(cfg.Leases))

	// Hold them.
	before := target.Meter.Snapshot()
	var batches0 int64
	if bs != nil {
		batches0 = bs.calls.Load()
	}
	sample.Store(true)
	holdStart := time.Now()
	progress(fmt.Sprintf("scale %s: %d leases taken in %.1fs; holding for %v", target.Name, cfg.Leases-res.AcquireErrors, res.AcquireS, cfg.Duration))
	tick := time.NewTicker(cfg.ProgressEvery)
	holdEnd := holdStart.Add(cfg.Duration)
hold:
	for {
		select {
		case <-ctx.Done():
			tick.Stop()
			return nil, ctx.Err()
		case <-time.After(time.Until(holdEnd)):
			break hold
		case <-tick.C:
			ss.mu.Lock()
			n, late, errs := len(ss.gap), ss.late, ss.errs
			ss.mu.Unlock()
			progress(fmt.Sprintf("scale %s: %v/%v: %d renewals, %d late, %d failed, %d leases lost, goroutines peak %d",
				target.Name, time.Since(holdStart).Round(time.Second), cfg.Duration, n, late, errs, lost.Load(), peak.Load()))
		}
	}
	tick.Stop()
	held := time.Since(holdStart)
	sample.Store(false)
	res.Requests = target.Meter.Snapshot().Sub(before)
	if bs != nil {
		res.BatchCalls = bs.calls.Load() - batches0
	}
	if res.Requests != nil {
		res.PerSecond = map[string]float64{}
		for k, v := range res.Requests {
			res.PerSecond[k] = round3(float64(v) / held.Seconds())
		}
	}
	// Lost: the loss callbacks, or the leases whose Err says so, whichever
	// is more (they agree unless a callback has not run yet).
	var ended int64
	for _, l := range leases {
		if l != nil && l.Err() != nil {
			ended++
		}
	}
	res.Lost = max(lost.Load(), ended)
	res.GoroutinesPeak = int(peak.Load())
	// The renewals of the hold: a renewal in flight when its lease is
	// released below would fail ("no live lease") without being a loss.
	ss.mu.Lock()
	res.Renewals, res.RenewErrors, res.Late = int64(len(ss.gap)), ss.errs, ss.late
	res.SendLag, res.ConfirmGap, res.RenewLatency = Summarize(ss.lag), Summarize(ss.gap), Summarize(ss.lat)
	res.FirstRenewError = ss.firstErr
	ss.mu.Unlock()
	res.HeapWithEnd = heapAlloc()

	// Release them.
	t0 = time.Now()
	var relErrs atomic.Int64
	parallel(cfg.Leases, cfg.AcquireConcurrency, func(i int) {
		if leases[i] == nil {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := leases[i].Release(rctx); err != nil {
			relErrs.Add(1)
		}
		leases[i] = nil
	})
	res.ReleaseS = round3(time.Since(t0).Seconds())
	res.ReleaseErrors = int(relErrs.Load())
	res.HeapAfter = heapAlloc()
	res.HeapPerLeaseEnd = round3(float64(int64(res.HeapWithEnd)-int64(res.HeapAfter)) / float64(cfg.Leases))

	// Renewal calls from acquisition to release; the renewals themselves
	// were taken at the end of the hold, above.
	res.RenewCalls = ss.calls.Load()
	return res, nil
}

// parallel runs f(0..n-1) on k goroutines.
func parallel(n, k int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < k; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}
