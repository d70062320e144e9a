package tenure

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Jobs that hang stop counting after a while, so the quick ones behind
// them run; jobs are taken nearest due time first.
func TestPoolHungJobsDoNotBlockOthers(t *testing.T) {
	p := newPool(1, 20*time.Millisecond) // one counted worker: jobs run one at a time, in order
	release := make(chan struct{})
	defer close(release)
	now := time.Now()
	for i := range 6 {
		p.submit(now.Add(time.Duration(i)*time.Millisecond), func() { <-release })
	}
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		// Later due times than the hung jobs, submitted in reverse order.
		due := now.Add(time.Second - time.Duration(i)*time.Millisecond)
		p.submit(due, func() {
			defer wg.Done()
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("quick jobs never ran behind hung ones")
	}
	for k, i := range order {
		if i != len(order)-1-k {
			t.Fatalf("jobs ran in order %v; want nearest due time first", order)
		}
	}
}

// A store that is slow for everyone does not get ever more calls at once:
// the stuck threshold follows the calls' usual duration, and a hard cap
// bounds the workers whatever happens.
func TestPoolSlowStoreKeepsConcurrencyBounded(t *testing.T) {
	p := newPool(4, 2*time.Millisecond)
	var inFlight, peak atomic.Int64
	var wg sync.WaitGroup
	for range 120 {
		wg.Add(1)
		p.submit(time.Now(), func() {
			defer wg.Done()
			n := inFlight.Add(1)
			for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
			}
			time.Sleep(100 * time.Millisecond)
			inFlight.Add(-1)
		})
	}
	wg.Wait()
	// With a fixed 2 ms threshold, 4 more calls would start every 2 ms
	// while calls take 100 ms: all 120 at once, and more as the store slows
	// down under them.
	if m := peak.Load(); m > int64(p.hardMax) {
		t.Fatalf("%d calls at once on a store that answers every call in 100 ms (max 4, hard cap %d)", m, p.hardMax)
	}
	t.Logf("at most %d calls at once", peak.Load())
}
