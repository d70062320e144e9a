package tenure

import (
	"container/heap"
	"slices"
	"sync"
	"time"
)

// pool runs a Locker's background store calls (renewals in one pool,
// clean-ups in another) on goroutines started on demand and gone when there
// is no work. At most max workers count at once, but a worker whose call has
// run much longer than calls usually take stops counting, so calls that hang
// (a black-holed connection, a row lock, a frozen server) never hold up the
// others: field case C15. "Much longer" is four times the 90th percentile
// of the last calls' durations, and at least stuckAfter (real time: a call
// is I/O), so a store that is merely slow for everyone (an overloaded
// server) does not get more calls at once; and at most hardMax workers run
// at all, stuck or not. Queued jobs run nearest deadline first, so when
// renewals must queue, the lease closest to its deadline is renewed first.
type pool struct {
	max        int
	hardMax    int
	stuckAfter time.Duration

	mu      sync.Mutex
	q       jobHeap
	seq     uint64
	running int                  // workers counted against max
	stuck   int                  // workers no longer counted, still in their call
	active  map[*worker]struct{} // counted workers inside a job
	timer   *time.Timer          // the stuck check, armed while jobs wait for a worker
	armed   bool
	recent  [64]time.Duration // durations of the last calls, a ring
	nRecent int
}

// poolHardMaxFactor bounds all the workers of a pool, stuck or not, as a
// multiple of its max.
const poolHardMaxFactor = 16

// maxStuckAfter is the longest a call may run before it stops counting,
// whatever the recent durations.
const maxStuckAfter = 10 * time.Second

type worker struct {
	start time.Time
	stuck bool
}

type job struct {
	due time.Time
	seq uint64
	f   func()
}

func newPool(max int, stuckAfter time.Duration) *pool {
	return &pool{max: max, hardMax: poolHardMaxFactor * max, stuckAfter: stuckAfter, active: make(map[*worker]struct{})}
}

// stuckAfterLocked returns how long a call runs before it stops counting:
// four times the 90th percentile of recent durations, between stuckAfter
// and maxStuckAfter.
func (p *pool) stuckAfterLocked() time.Duration {
	n := min(p.nRecent, len(p.recent))
	if n < 8 {
		return p.stuckAfter
	}
	d := make([]time.Duration, n)
	copy(d, p.recent[:n])
	slices.Sort(d)
	return min(max(4*d[n*9/10], p.stuckAfter), maxStuckAfter)
}

// submit queues f, to run before jobs whose due time is later.
func (p *pool) submit(due time.Time, f func()) {
	p.mu.Lock()
	p.seq++
	heap.Push(&p.q, &job{due: due, seq: p.seq, f: f})
	p.growLocked()
	p.mu.Unlock()
}

// growLocked starts workers for waiting jobs while fewer than max count, and
// otherwise arms the stuck check.
func (p *pool) growLocked() {
	for n := len(p.q); n > 0 && p.running < p.max && p.running+p.stuck < p.hardMax; n-- {
		p.running++
		go p.work()
	}
	if len(p.q) > 0 && p.running >= p.max {
		p.armLocked()
	}
}

// armLocked schedules the stuck check for when the oldest call in flight
// reaches stuckAfter.
func (p *pool) armLocked() {
	if p.armed {
		return
	}
	var oldest time.Time
	for w := range p.active {
		if oldest.IsZero() || w.start.Before(oldest) {
			oldest = w.start
		}
	}
	if oldest.IsZero() {
		return // every counted worker is between jobs and will take one
	}
	d := max(p.stuckAfterLocked()-time.Since(oldest), 0)
	p.armed = true
	if p.timer == nil {
		p.timer = time.AfterFunc(d, p.checkStuck)
	} else {
		p.timer.Reset(d)
	}
}

// checkStuck stops counting the workers whose call has run longer than
// stuckAfter and starts others for the waiting jobs.
func (p *pool) checkStuck() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	now := time.Now()
	limit := p.stuckAfterLocked()
	for w := range p.active {
		if now.Sub(w.start) >= limit && p.running+p.stuck < p.hardMax {
			w.stuck = true
			delete(p.active, w)
			p.running--
			p.stuck++
		}
	}
	p.growLocked()
}

func (p *pool) work() {
	w := &worker{}
	p.mu.Lock()
	for len(p.q) > 0 {
		j := heap.Pop(&p.q).(*job)
		w.start = time.Now()
		p.active[w] = struct{}{}
		if len(p.q) > 0 && p.running >= p.max {
			p.armLocked()
		}
		p.mu.Unlock()
		j.f()
		p.mu.Lock()
		p.recent[p.nRecent%len(p.recent)] = time.Since(w.start)
		p.nRecent++
		if w.stuck {
			// No longer counted: another worker took this one's place.
			p.stuck--
			p.growLocked()
			p.mu.Unlock()
			return
		}
		delete(p.active, w)
	}
	p.running--
	p.mu.Unlock()
}

type jobHeap []*job

func (h jobHeap) Len() int { return len(h) }
func (h jobHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h jobHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *jobHeap) Push(x any)   { *h = append(*h, x.(*job)) }
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return j
}
