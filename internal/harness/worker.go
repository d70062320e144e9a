package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

// WorkerConfig configures one contender process.
type WorkerConfig struct {
	Store    string        // store URL
	Resource string        // the one contended resource
	TTL      time.Duration // lease TTL
	Retry    time.Duration // largest backoff delay of a blocking Acquire
	History  string        // history file
	Worker   int           // slot number, for the history
	Seed     uint64        // seeds the worker's random choices, with its pid
	// Unsafe makes the worker ignore tenure's deadline checks: it works
	// while it believes it holds the lease, a belief set on a grant and
	// cleared only by a successful release (like an election loop that keeps
	// believing it leads while its renewals fail).
	Unsafe bool
	// ExitProb is the probability that the worker exits after a piece of
	// work without releasing its lease, as a crashed process would.
	ExitProb float64
	// Workload is what the worker does (WorkloadLease, WorkloadReacquire,
	// WorkloadSemaphore, WorkloadRW; default WorkloadLease).
	Workload string
	// Slots is the semaphore's number of slots (WorkloadSemaphore).
	Slots int
	// SharedOwner gives the store one owner string per Locker instead of
	// one per grant, as tenure did before grant identity
	// (sharedOwnerStore): a deliberately unsafe configuration.
	SharedOwner bool
	// HoldProb is the probability that a lease worker ends a round with
	// Lease.ReleaseAfter(HoldFor) instead of Release: the store keeps the
	// lease under another owner string for HoldFor, longer than the TTL,
	// and nobody may be granted it meanwhile (a cron job's hold).
	HoldProb float64
	// HoldByRenew makes ReleaseAfter one renewal with the hold's TTL, as
	// tenure did before driver.Keeper (withoutKeeper): a deliberately unsafe
	// configuration, which a renewal delivered late breaks.
	HoldByRenew bool
	// SlotsAlt and SlotChangeProb (WorkloadSemaphore): with probability
	// SlotChangeProb a round takes a slot of a semaphore of SlotsAlt slots
	// on the same resource instead of Slots, as a process of a deployment
	// whose slot count changes does: it must be refused
	// (ErrSlotsMismatch) while a slot of the other count is held or kept.
	SlotsAlt       int
	SlotChangeProb float64
	// CancelWaiter (WorkloadLease, WorkloadReacquire) runs a second waiter
	// in the worker's process: a Locker of its own on the same store (so
	// on the same notification connection and hub), with a history of its
	// own, that acquires, works a step and releases in a loop, and in half
	// of its waits gives up during an attempt that follows a wake-up (see
	// wakeCanceller): a waiter that took a wake-up and then gave up.
	CancelWaiter bool
}

// CompanionHistory is the history file of a worker's second waiter
// (CancelWaiter), next to the worker's own.
func CompanionHistory(history string) string {
	return strings.TrimSuffix(history, ".jsonl") + "-c.jsonl"
}

// holdFor is the length of a worker's hold (HoldProb), in TTLs: longer than
// the TTL, the case that a late renewal could cut short. Half of a
// semaphore worker's holds last naming.MarkerTTL longer: a kept slot must
// keep the slot count after the marker lease could have expired.
const holdFor = 2

// Workloads.
const (
	// WorkloadLease rests a moment before every acquire, also after a loss.
	WorkloadLease = "lease"
	// WorkloadReacquire acquires again at once with the same Locker when
	// its lease was lost locally (its deadline passed, or the store said
	// another grant holds): the case of a Locker whose earlier grant the
	// store may still keep.
	WorkloadReacquire = "reacquire"
	// WorkloadSemaphore holds a slot of a semaphore of Slots slots on the
	// resource (Locker.Semaphore), and, like WorkloadReacquire, acquires
	// again at once after a loss.
	WorkloadSemaphore = "semaphore"
)

// Workloads lists the workloads.
var Workloads = []string{WorkloadLease, WorkloadReacquire, WorkloadSemaphore, WorkloadRW}

// Status lines a worker writes on its status output for the orchestrator:
// "G <token> <resource>" when it starts trusting a lease, "E" when it
// stops.
const (
	statusGrant = "G"
	statusEnd   = "E"
)

// ErrAbandon is returned by RunWorker when the worker chose to exit without
// releasing its lease.
var ErrAbandon = errors.New("harness: worker exits without releasing its lease")

// RunWorker runs a contender until ctx ends (it then releases what it holds)
// or it chooses to exit without releasing (ErrAbandon). Each piece of work is
// a few steps; each step stamps the time before it checks that the lease is
// still trusted, and records the stamp only when the check passed.
func RunWorker(ctx context.Context, cfg WorkerConfig, status io.Writer) error {
	return runWorker(ctx, cfg, "", status)
}

func runWorker(ctx context.Context, cfg WorkerConfig, translate string, status io.Writer) error {
	rec, err := NewRecorder(cfg.History)
	if err != nil {
		return err
	}
	defer rec.Close()
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	store, err := openWorkerStore(octx, cfg.Store, translate)
	cancel()
	if err != nil {
		return err
	}
	defer store.Close()
	if cfg.SharedOwner {
		store = withSharedOwner(store)
	}
	rs := NewRecordingStore(store, rec)
	ls := rs
	if cfg.HoldByRenew {
		ls = withoutKeeper(rs)
	}
	lk, err := tenure.New(ls, tenure.WithOwnerID(fmt.Sprintf("w%d-%d", cfg.Worker, os.Getpid())),
		tenure.WithRetry(min(10*time.Millisecond, cfg.Retry), cfg.Retry))
	if err != nil {
		return err
	}
	if cfg.Workload == "" {
		cfg.Workload = WorkloadLease
	}
	start := Event{Ev: EvStart, T: MonoNow(), Owner: lk.Owner(), PID: os.Getpid(), Worker: cfg.Worker, TTL: int64(cfg.TTL), Unsafe: cfg.Unsafe, Workload: cfg.Workload}
	w := &worker{cfg: cfg, rec: rec, rs: rs, lk: lk, status: status,
		rng:  rand.New(rand.NewPCG(cfg.Seed, uint64(os.Getpid()))),
		step: max(cfg.TTL/8, time.Millisecond)}
	switch cfg.Workload {
	case WorkloadLease, WorkloadReacquire:
	case WorkloadSemaphore:
		sem, err := lk.Semaphore(cfg.Resource, cfg.Slots)
		if err != nil {
			return err
		}
		w.sem = sem
		if cfg.SlotsAlt > 0 && cfg.SlotsAlt != cfg.Slots && cfg.SlotChangeProb > 0 {
			if w.semAlt, err = lk.Semaphore(cfg.Resource, cfg.SlotsAlt); err != nil {
				return err
			}
		}
		start.Sem, start.Slots = cfg.Resource, cfg.Slots
	case WorkloadRW:
		rw, err := lk.RWLock(cfg.Resource)
		if err != nil {
			return err
		}
		w.rw = rw
		start.RW = cfg.Resource
	default:
		return fmt.Errorf("harness: unknown workload %q (want %v)", cfg.Workload, Workloads)
	}
	rec.Record(start)
	if cfg.CancelWaiter && w.sem == nil && !cfg.Unsafe {
		cctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- runCompanion(cctx, cfg, store) }()
		defer func() {
			stop()
			if err := <-done; err != nil {
				fmt.Fprintln(os.Stderr, "harness: the second waiter:", err)
			}
		}()
	}
	lost := false
	for ctx.Err() == nil {
		// Rest a little between pieces of work, so that others get a turn;
		// after a loss, the reacquire and semaphore workloads go again at
		// once, with the same Locker.
		if !lost || cfg.Workload == WorkloadLease {
			if !w.sleep(ctx, time.Duration(w.rng.Int64N(int64(cfg.TTL/2)))) {
				break
			}
		}
		var err error
		lost, err = w.round(ctx)
		if err != nil {
			switch {
			case errors.Is(err, ErrAbandon):
				rec.Record(Event{Ev: EvExit, T: MonoNow(), Err: "abandon"})
			case errors.Is(err, errStoreUnusable):
				rec.Record(Event{Ev: EvExit, T: MonoNow(), Err: "store unusable"})
				return rec.Err()
			}
			return err
		}
		if err := rec.Err(); err != nil {
			return err
		}
	}
	rec.Record(Event{Ev: EvExit, T: MonoNow(), Err: "stopped"})
	return rec.Err()
}

// errStoreUnusable ends a worker whose store must be opened again.
var errStoreUnusable = errors.New("harness: the store must be opened again")

type worker struct {
	cfg    WorkerConfig
	rec    *Recorder
	rs     driver.Store
	lk     *tenure.Locker
	sem    *tenure.Semaphore // WorkloadSemaphore
	rw     *tenure.RWLock    // WorkloadRW
	semAlt *tenure.Semaphore // and the other slot count (SlotsAlt), or nil
	status io.Writer
	rng    *rand.Rand
	step   time.Duration
	// canceller arms the second waiter's waits (CancelWaiter); nil for
	// the worker itself.
	canceller *wakeCanceller
}

func (w *worker) say(s string) { fmt.Fprintln(w.status, s) }

// acquire acquires the resource (blocking), or a slot of the semaphore.
func (w *worker) acquire(ctx context.Context) (*tenure.Lease, Event, error) {
	g := Event{Ev: EvGrant}
	if w.rw != nil {
		return w.acquireRW(ctx)
	}
	if w.sem != nil {
		sem := w.sem
		if w.semAlt != nil && w.rng.Float64() < w.cfg.SlotChangeProb {
			sem = w.semAlt
		}
		sl, err := sem.Acquire(ctx, w.cfg.TTL)
		if err != nil {
			return nil, g, err
		}
		g.Sem, g.Slots, g.Slot = sem.Resource(), sem.Slots(), sl.Slot
		return sl.Lease, g, nil
	}
	if w.canceller != nil && w.rng.IntN(2) == 0 {
		// Give up during an attempt that follows a wake-up.
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		w.canceller.arm(cancel)
		defer w.canceller.arm(nil)
		l, err := w.lk.Acquire(actx, w.cfg.Resource, w.cfg.TTL)
		return l, g, err
	}
	l, err := w.lk.Acquire(ctx, w.cfg.Resource, w.cfg.TTL)
	return l, g, err
}

// round acquires (blocking), works, and releases. lost reports that the
// worker saw its lease lost.
func (w *worker) round(ctx context.Context) (lost bool, err error) {
	w.rec.Record(Event{Ev: EvWait, T: MonoNow()})
	lease, g, err := w.acquire(ctx)
	if err != nil {
		w.rec.Record(Event{Ev: EvAcqErr, T: MonoNow(), Err: err.Error()})
		if errors.Is(err, tenure.ErrStoreUnusable) {
			// The store must be opened again (store-reset replaced the
			// SQLite file): the worker exits, and the harness starts
			// another in its place, as a service's supervisor would.
			return false, errStoreUnusable
		}
		return false, nil
	}
	res := lease.Resource()
	send, reply, owner, token := LastGrant(w.rs, res)
	if owner != lease.Owner() || (token != lease.Token() && g.Mode != "shared") {
		// (A shared holder's lease reports its gate grant's token, not its
		// own lease's.)
		return false, fmt.Errorf("harness: the recorded grant of %q is %s with token %d, the lease %s with %d", res, owner, token, lease.Owner(), lease.Token())
	}
	tok := lease.Token()
	g.T, g.Resource, g.Owner, g.Token, g.Send, g.Reply, g.Deadline = MonoNow(), res, owner, tok, send, reply, MonoOf(lease.Deadline())
	w.rec.Record(g)
	w.say(fmt.Sprintf("%s %d %s", statusGrant, tok, res))
	stop := w.watchDeadline(lease)
	defer stop()
	steps := 2 + w.rng.IntN(15) // 0.25 to 2 TTLs of work
	abandon := w.rng.Float64() < w.cfg.ExitProb
	if w.cfg.Unsafe {
		return false, w.unsafeHold(ctx, lease, steps, abandon)
	}
	for i := 0; i < steps; i++ {
		ts := MonoNow()
		if err := lease.Err(); err != nil {
			w.rec.Record(Event{Ev: EvLost, T: MonoNow(), Token: tok, Err: err.Error()})
			w.say(statusEnd)
			return true, nil
		}
		w.rec.Record(Event{Ev: EvStep, T: ts, Token: tok, Deadline: MonoOf(lease.Deadline())})
		if !w.work(ctx) {
			break
		}
	}
	w.rec.Record(Event{Ev: EvDeadline, T: MonoNow(), Token: tok, Deadline: MonoOf(lease.Deadline())})
	if abandon && ctx.Err() == nil {
		return false, ErrAbandon
	}
	w.rec.Record(Event{Ev: EvRelease, T: MonoNow(), Token: tok})
	w.say(statusEnd)
	if ctx.Err() == nil && w.rng.Float64() < w.cfg.HoldProb {
		w.hold(ctx, lease)
		return false, nil
	}
	w.release(ctx, lease) //nolint:errcheck // recorded; a failed release is the store's to expire
	return false, nil
}

// hold ends the round with Lease.ReleaseAfter: the lease ends locally and
// the store keeps it for holdFor TTLs (see HoldProb).
func (w *worker) hold(ctx context.Context, lease *tenure.Lease) {
	d := holdFor * w.cfg.TTL
	if w.sem != nil && w.rng.IntN(2) == 0 {
		d += naming.MarkerTTL
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*w.cfg.TTL+5*time.Second)
	defer cancel()
	err := lease.ReleaseAfter(rctx, d)
	e := Event{Ev: EvHold, T: MonoNow(), Token: lease.Token(), TTL: int64(d)}
	if err != nil {
		e.Err = err.Error()
	}
	w.rec.Record(e)
}

// unsafeHold works while the worker believes it holds the lease, without
// asking the lease: only a successful release ends the belief. After a
// failed release it keeps working and tries again, three times, then exits
// (the belief ends with the process).
func (w *worker) unsafeHold(ctx context.Context, lease *tenure.Lease, steps int, abandon bool) error {
	tok := lease.Token()
	for try := 0; ; try++ {
		for i := 0; i < steps; i++ {
			w.rec.Record(Event{Ev: EvStep, T: MonoNow(), Token: tok, Deadline: MonoOf(lease.Deadline())})
			if !w.work(ctx) {
				break
			}
		}
		if abandon && ctx.Err() == nil {
			return ErrAbandon
		}
		w.rec.Record(Event{Ev: EvRelease, T: MonoNow(), Token: tok})
		if w.release(ctx, lease) == nil {
			w.say(statusEnd)
			return nil
		}
		if try == 2 || ctx.Err() != nil {
			return ErrAbandon
		}
	}
}

func (w *worker) release(ctx context.Context, lease *tenure.Lease) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*w.cfg.TTL+5*time.Second)
	defer cancel()
	err := lease.Release(rctx)
	e := Event{Ev: EvReleased, T: MonoNow(), Token: lease.Token()}
	if err != nil {
		e.Err = err.Error()
	}
	w.rec.Record(e)
	return err
}

// work is one step of simulated work; false when ctx ended.
func (w *worker) work(ctx context.Context) bool { return w.sleep(ctx, w.step) }

func (w *worker) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// watchDeadline records the lease's deadline whenever it moves, so that the
// history has the deadline a killed worker last trusted, and the moment it
// saw the lease end (EvEnded: after that, Err no longer returns nil). It
// samples every millisecond: tenure offers no notification of a renewal.
func (w *worker) watchDeadline(lease *tenure.Lease) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		last := lease.Deadline()
		for {
			select {
			case <-done:
				return
			case <-lease.Done():
				w.rec.Record(Event{Ev: EvEnded, T: MonoNow(), Token: lease.Token()})
				return
			case <-tick.C:
				if d := lease.Deadline(); !d.Equal(last) {
					last = d
					w.rec.Record(Event{Ev: EvDeadline, T: MonoNow(), Token: lease.Token(), Deadline: MonoOf(d)})
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// runCompanion runs a worker's second waiter (CancelWaiter) on the
// worker's store until ctx ends: a Locker of its own (owner wN-PID-c), a
// history of its own (CompanionHistory), the lease workload without
// exits, holds or losses' haste, and half of its waits given up during an
// attempt after a wake-up.
func runCompanion(ctx context.Context, cfg WorkerConfig, store driver.Store) error {
	cfg.History = CompanionHistory(cfg.History)
	cfg.ExitProb, cfg.HoldProb, cfg.Workload = 0, 0, WorkloadLease
	rec, err := NewRecorder(cfg.History)
	if err != nil {
		return err
	}
	defer rec.Close()
	canceller := newWakeCanceller(NewRecordingStore(store, rec), cfg.TTL/4)
	rs := canceller.inner
	lk, err := tenure.New(canceller.store(), tenure.WithOwnerID(fmt.Sprintf("w%d-%d-c", cfg.Worker, os.Getpid())),
		tenure.WithRetry(min(10*time.Millisecond, cfg.Retry), cfg.Retry))
	if err != nil {
		return err
	}
	defer lk.Close(context.Background())
	rec.Record(Event{Ev: EvStart, T: MonoNow(), Owner: lk.Owner(), PID: os.Getpid(), Worker: cfg.Worker, TTL: int64(cfg.TTL), Workload: cfg.Workload})
	w := &worker{cfg: cfg, rec: rec, rs: rs, lk: lk, status: io.Discard, canceller: canceller,
		rng:  rand.New(rand.NewPCG(cfg.Seed^0xc0, uint64(os.Getpid()))),
		step: max(cfg.TTL/8, time.Millisecond)}
	for ctx.Err() == nil {
		if !w.sleep(ctx, time.Duration(w.rng.Int64N(int64(cfg.TTL)))) {
			break
		}
		if _, err := w.round(ctx); err != nil {
			return err
		}
		if err := rec.Err(); err != nil {
			return err
		}
	}
	rec.Record(Event{Ev: EvExit, T: MonoNow(), Err: "stopped"})
	return rec.Err()
}

// wakeCanceller stands between the second waiter's Locker and its
// recording store. While a wait is armed (arm), its third and later
// acquire attempts, those that follow a wake-up or a poll (the first finds
// the resource held, the second follows the subscription at once), are
// held back delay and the wait's context is cancelled meanwhile: the
// attempt then fails with the context, never reaching the store, and the
// wake-up it took must be passed on to the worker's own waiter.
type wakeCanceller struct {
	inner driver.Store
	delay time.Duration

	mu       sync.Mutex
	cancel   context.CancelFunc
	attempts int
}

func newWakeCanceller(inner driver.Store, delay time.Duration) *wakeCanceller {
	return &wakeCanceller{inner: inner, delay: delay}
}

// arm makes the next wait give up (cancel ends it); nil disarms.
func (c *wakeCanceller) arm(cancel context.CancelFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancel, c.attempts = cancel, 0
}

// store returns the store for the Locker: inner with Acquire (and a
// Reserver's AcquireWaiting) passing through the canceller; the other
// methods and optional interfaces are inner's.
func (c *wakeCanceller) store() driver.Store {
	b := cancellingStore{Store: c.inner, c: c}
	switch v := c.inner.(type) {
	case driver.Notifier:
		return cancellingNotifier{cancellingStore: b, n: v}
	case driver.Reserver:
		return cancellingReserver{cancellingStore: b, r: v}
	}
	return b
}

// hold runs before an attempt: it reports whether the attempt goes on.
func (c *wakeCanceller) hold(ctx context.Context) bool {
	c.mu.Lock()
	c.attempts++
	cancel, n := c.cancel, c.attempts
	c.mu.Unlock()
	if cancel == nil || n < 3 {
		return true
	}
	t := time.NewTimer(c.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	cancel()
	return false
}

type cancellingStore struct {
	driver.Store
	c *wakeCanceller
}

func (s cancellingStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (tenure.Record, error) {
	if !s.c.hold(ctx) {
		return tenure.Record{}, fmt.Errorf("harness: the second waiter gave up: %w", context.Cause(ctx))
	}
	return s.Store.Acquire(ctx, resource, owner, ttl)
}

func (s cancellingStore) CheckTTL(ttl time.Duration) error {
	if c, ok := s.Store.(driver.TTLChecker); ok {
		return c.CheckTTL(ttl)
	}
	return nil
}

type cancellingNotifier struct {
	cancellingStore
	n driver.Notifier
}

func (s cancellingNotifier) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.n.Subscribe(ctx, resource)
}

type cancellingReserver struct {
	cancellingStore
	r driver.Reserver
}

func (s cancellingReserver) AcquireWaiting(ctx context.Context, resource, owner, waiter string, ttl, wait time.Duration) (tenure.Record, error) {
	if !s.c.hold(ctx) {
		return tenure.Record{}, fmt.Errorf("harness: the second waiter gave up: %w", context.Cause(ctx))
	}
	return s.r.AcquireWaiting(ctx, resource, owner, waiter, ttl, wait)
}

func (s cancellingReserver) Unreserve(ctx context.Context, resource, waiter string) error {
	return s.r.Unreserve(ctx, resource, waiter)
}
