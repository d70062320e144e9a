package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-go/tenure"
)

// WaitersConfig configures the waiters phase: many blocked Acquires on one
// resource, and the resource handed down the whole queue.
type WaitersConfig struct {
	// Waiters is the number of blocked Acquires (default 200), each on a
	// Locker of its own (default options) sharing the target's store.
	Waiters int
	// TTL of every lease (default 30 s).
	TTL time.Duration
	// Hold is how long each waiter keeps the resource once granted before
	// it releases it (default 0: at once).
	Hold time.Duration
	// Settle is how long every waiter has been blocked before the first
	// release (default 3 s): their backoff has grown by then. The last
	// Window of it is counted as the calls of waiting alone.
	Settle time.Duration
	// Window is the span counted after the first release (default 1 s);
	// the first waiter granted keeps the resource through it, so it counts
	// what one release costs.
	Window time.Duration
	// Stagger is the time between the starts of two waiters' Acquires
	// (default 5 ms), so that they arrive in a known order: waiter i
	// starts i·Stagger after the first. 0 would start them all at once,
	// in no defined order.
	Stagger time.Duration
	// Timeout bounds the whole phase (default 10 minutes).
	Timeout  time.Duration
	Prefix   string
	Progress func(string)
}

// WaitersResult is what the waiters phase measured on one store.
type WaitersResult struct {
	Store     string  `json:"store"`
	Waiters   int     `json:"waiters"`
	TTLS      float64 `json:"ttl_s"`
	HoldMs    float64 `json:"hold_ms"`
	WindowMs  float64 `json:"window_ms"`
	StaggerMs float64 `json:"stagger_ms"`
	// Unit is the kind of request the Calls fields count (the meter's
	// primary kind).
	Unit string `json:"unit"`
	// CallsWaiting are the requests in the Window before the first release
	// (every waiter blocked, nothing released); CallsAfterRelease those in
	// the Window after it, while the first waiter granted holds the
	// resource (the release itself and the grant included).
	CallsWaiting      int64 `json:"calls_waiting"`
	CallsAfterRelease int64 `json:"calls_after_release"`
	// FirstGrantMs is the time from the first release to the first grant.
	FirstGrantMs float64 `json:"first_grant_ms"`
	// The hand-down: from the first grantee's release to the last grant,
	// Grants−1 grants; CallsHandDown requests in all (Requests by kind),
	// CallsPerGrant per grant.
	Grants        int     `json:"grants"`
	HandDownS     float64 `json:"hand_down_s"`
	CallsHandDown int64   `json:"calls_hand_down"`
	CallsPerGrant float64 `json:"calls_per_grant"`
	Requests      Counts  `json:"requests"`
	// Wait is each waiter's time from its first attempt that found the
	// resource held to its grant; Handover each grant's time since the
	// release before it began (the time the resource sat free, plus the
	// release call).
	Wait     Summary `json:"wait"`
	Handover Summary `json:"handover"`
	// Queue is each waiter's time from the first release to its grant:
	// where it stood in the hand-down.
	Queue Summary `json:"queue"`
	// OrderInversions is the fraction of pairs of waiters granted in the
	// opposite order of their arrival (the start of their Acquire, one
	// every StaggerMs): 0 is first-come-first-served, about 0.5 a random
	// order.
	OrderInversions float64 `json:"order_inversions"`
	Errors          int     `json:"errors"`
	FirstError      string  `json:"first_error,omitempty"`
}

// RunWaiters runs the waiters phase on target: a holder takes the resource,
// cfg.Waiters blocked Acquires wait for it, the holder releases it (the
// calls in the Window before and after are counted), and then each waiter
// granted releases it in turn until every waiter has had it.
func RunWaiters(ctx context.Context, target *Target, cfg WaitersConfig) (*WaitersResult, error) {
	if cfg.Waiters <= 0 {
		cfg.Waiters = 200
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 30 * time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 3 * time.Second
	}
	if cfg.Window <= 0 {
		cfg.Window = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.Stagger < 0 {
		cfg.Stagger = 0
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string) {}
	}
	n := cfg.Waiters
	res := &WaitersResult{
		Store: target.Name, Waiters: n, TTLS: cfg.TTL.Seconds(), HoldMs: ms(cfg.Hold), WindowMs: ms(cfg.Window), StaggerMs: ms(cfg.Stagger),
		Unit: target.Meter.Primary(),
	}
	calls := func() int64 { return target.Meter.Snapshot()[res.Unit] }
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	resource := fmt.Sprintf("%s/%s/waiters", cfg.Prefix, target.Name)

	holder, err := tenure.New(target.Store, tenure.WithOwnerID("bench-waiters-holder"))
	if err != nil {
		return nil, err
	}
	defer closeLocker(holder)
	hl, err := holder.TryAcquire(ctx, resource, cfg.TTL)
	if err != nil {
		return nil, fmt.Errorf("bench: waiters on %s: holder: %w", target.Name, err)
	}

	type waiter struct {
		lk      *tenure.Locker
		arrived time.Time // the first attempt that found the resource held
		seen    bool
		arrival int64 // order of the start of its Acquire
		granted time.Time
		grant   int64 // order of the grant
		ok      bool
	}
	ws := make([]*waiter, n)
	for i := range ws {
		lk, err := tenure.New(target.Store, tenure.WithOwnerID(fmt.Sprintf("bench-waiter-%d", i)))
		if err != nil {
			return nil, err
		}
		ws[i] = &waiter{lk: lk, arrival: int64(i), grant: -1}
	}
	defer func() {
		for _, w := range ws {
			closeLocker(w.lk)
		}
	}()

	var (
		mu          sync.Mutex
		lastRelease time.Time // when the latest release call began
		handovers   []time.Duration
		arrivals    atomic.Int64
		grants      atomic.Int64
		lastCalls   int64 // requests counted at the last grant
		lastGrantAt time.Time
		errs        int
		firstErr    string
		firstFree   = make(chan struct{}) // closed when the first grantee may release
		allArrived  = make(chan struct{})
	)
	var wg sync.WaitGroup
	begin := time.Now()
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sleepCtx(ctx, time.Until(begin.Add(time.Duration(i)*cfg.Stagger)))
			l, err := w.lk.Acquire(ctx, resource, cfg.TTL, tenure.OnWait(func(*tenure.HeldError, time.Duration) {
				if !w.seen {
					w.seen = true
					w.arrived = time.Now()
					if arrivals.Add(1) == int64(n) {
						close(allArrived)
					}
				}
			}))
			if err != nil {
				mu.Lock()
				errs++
				if firstErr == "" {
					firstErr = err.Error()
				}
				mu.Unlock()
				return
			}
			now := time.Now()
			g := grants.Add(1) - 1
			c := calls()
			mu.Lock()
			w.granted, w.grant, w.ok = now, g, true
			if !lastRelease.IsZero() {
				handovers = append(handovers, now.Sub(lastRelease))
			}
			if now.After(lastGrantAt) {
				lastGrantAt, lastCalls = now, c
			}
			mu.Unlock()
			if g == 0 {
				select {
				case <-firstFree:
				case <-ctx.Done():
				}
			} else if cfg.Hold > 0 {
				time.Sleep(cfg.Hold)
			}
			mu.Lock()
			lastRelease = time.Now()
			mu.Unlock()
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			if err := l.Release(rctx); err != nil {
				mu.Lock()
				errs++
				if firstErr == "" {
					firstErr = "release: " + err.Error()
				}
				mu.Unlock()
			}
			rcancel()
		}()
	}

	progress(fmt.Sprintf("%s: waiters: %d blocked Acquires on one resource ...", target.Name, n))
	select {
	case <-allArrived:
	case <-ctx.Done():
		cancel()
		wg.Wait()
		return nil, fmt.Errorf("bench: waiters on %s: %d of %d waiters made a first attempt before the timeout", target.Name, arrivals.Load(), n)
	}
	sleepCtx(ctx, cfg.Settle-cfg.Window)
	c0 := calls()
	sleepCtx(ctx, cfg.Window)
	res.CallsWaiting = calls() - c0

	// The first release: its grantee keeps the resource through the window.
	c0 = calls()
	t0 := time.Now()
	mu.Lock()
	lastRelease = t0
	mu.Unlock()
	if err := hl.Release(ctx); err != nil {
		cancel()
		wg.Wait()
		return nil, fmt.Errorf("bench: waiters on %s: holder's release: %w", target.Name, err)
	}
	sleepCtx(ctx, cfg.Window)
	res.CallsAfterRelease = calls() - c0
	progress(fmt.Sprintf("%s: waiters: %d %s in the %v after one release; handing it down ...", target.Name, res.CallsAfterRelease, res.Unit, cfg.Window))

	c0 = calls()
	before := target.Meter.Snapshot()
	t1 := time.Now()
	close(firstFree)
	wg.Wait()

	res.Grants = int(grants.Load())
	res.Errors, res.FirstError = errs, firstErr
	var first time.Time
	waits := make([]time.Duration, 0, n)
	queue := make([]time.Duration, 0, n)
	for _, w := range ws {
		if w.ok {
			waits = append(waits, w.granted.Sub(w.arrived))
			queue = append(queue, w.granted.Sub(t0))
			if w.grant == 0 {
				first = w.granted
			}
		}
	}
	if !first.IsZero() {
		res.FirstGrantMs = round3(ms(first.Sub(t0)))
	}
	if res.Grants > 1 && lastGrantAt.After(t1) {
		res.HandDownS = round3(lastGrantAt.Sub(t1).Seconds())
		res.CallsHandDown = lastCalls - c0
		res.CallsPerGrant = round3(float64(res.CallsHandDown) / float64(res.Grants-1))
	}
	res.Requests = target.Meter.Snapshot().Sub(before)
	res.Wait = Summarize(waits)
	res.Queue = Summarize(queue)
	res.Handover = Summarize(handovers)
	var pairs, inv int
	for i, a := range ws {
		for _, b := range ws[i+1:] {
			if !a.ok || !b.ok {
				continue
			}
			pairs++
			if (a.arrival < b.arrival) != (a.grant < b.grant) {
				inv++
			}
		}
	}
	if pairs > 0 {
		res.OrderInversions = round3(float64(inv) / float64(pairs))
	}
	if res.Grants < n && ctx.Err() != nil {
		return res, fmt.Errorf("bench: waiters on %s: %d of %d granted within %v", target.Name, res.Grants, n, cfg.Timeout)
	}
	return res, nil
}

func closeLocker(lk *tenure.Locker) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = lk.Close(ctx)
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
