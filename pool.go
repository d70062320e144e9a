package tenure

import (
	"container/heap"
	"sync"
	"time"
)

// pool runs a Locker's background store calls (renewals in one pool,
// clean-ups in another) on goroutines started on demand and gone when there
// is no work. At most max workers count at once, but a worker whose call has
// run longer than stuckAfter (real time: a call is I/O) stops counting, so
// calls that hang (a black-holed connection, a row lock, a frozen server)
// never hold up the others: field case C15. Queued jobs run nearest
// deadline first, so when renewals must queue, the lease closest to its
// deadline is renewed first.
type pool struct {
	max        int
	stuckAfter time.Duration

	mu      sync.Mutex
	q       jobHeap
	seq     uint64
	running int                  // workers counted against max
	active  map[*worker]struct{} // counted workers inside a job
	timer   *time.Timer          // the stuck check, armed while jobs wait for a worker
	armed   bool
}

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
	return &pool{max: max, stuckAfter: stuckAfter, active: make(map[*worker]struct{})}
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
	for n := len(p.q); n > 0 && p.running < p.max; n-- {
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
	d := max(p.stuckAfter-time.Since(oldest), 0)
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
	for w := range p.active {
		if now.Sub(w.start) >= p.stuckAfter {
			w.stuck = true
			delete(p.active, w)
			p.running--
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
		if w.stuck {
			// No longer counted: another worker took this one's place.
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
