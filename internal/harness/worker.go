package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
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
}

// Status lines a worker writes on its status output for the orchestrator:
// "G <token>" when it starts trusting a lease, "E" when it stops.
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
	rs := NewRecordingStore(store, rec)
	lk, err := tenure.New(rs, tenure.WithOwnerID(fmt.Sprintf("w%d-%d", cfg.Worker, os.Getpid())),
		tenure.WithRetry(min(10*time.Millisecond, cfg.Retry), cfg.Retry))
	if err != nil {
		return err
	}
	rec.Record(Event{Ev: EvStart, T: MonoNow(), Owner: lk.Owner(), PID: os.Getpid(), Worker: cfg.Worker, TTL: int64(cfg.TTL), Unsafe: cfg.Unsafe})
	w := &worker{cfg: cfg, rec: rec, rs: rs, lk: lk, status: status,
		rng:  rand.New(rand.NewPCG(cfg.Seed, uint64(os.Getpid()))),
		step: max(cfg.TTL/8, time.Millisecond)}
	for ctx.Err() == nil {
		// Rest a little between pieces of work, so that others get a turn.
		if !w.sleep(ctx, time.Duration(w.rng.Int64N(int64(cfg.TTL/2)))) {
			break
		}
		if err := w.round(ctx); err != nil {
			if errors.Is(err, ErrAbandon) {
				rec.Record(Event{Ev: EvExit, T: MonoNow(), Err: "abandon"})
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

type worker struct {
	cfg    WorkerConfig
	rec    *Recorder
	rs     driver.Store
	lk     *tenure.Locker
	status io.Writer
	rng    *rand.Rand
	step   time.Duration
}

func (w *worker) say(s string) { fmt.Fprintln(w.status, s) }

// round acquires the resource (blocking), works, and releases.
func (w *worker) round(ctx context.Context) error {
	w.rec.Record(Event{Ev: EvWait, T: MonoNow()})
	lease, err := w.lk.Acquire(ctx, w.cfg.Resource, w.cfg.TTL)
	if err != nil {
		w.rec.Record(Event{Ev: EvAcqErr, T: MonoNow(), Err: err.Error()})
		return nil
	}
	send, reply, token := LastGrant(w.rs)
	if token != lease.Token() {
		return fmt.Errorf("harness: the recorded grant has token %d, the lease %d", token, lease.Token())
	}
	tok := lease.Token()
	w.rec.Record(Event{Ev: EvGrant, T: MonoNow(), Token: tok, Send: send, Reply: reply, Deadline: MonoOf(lease.Deadline())})
	w.say(fmt.Sprintf("%s %d", statusGrant, tok))
	stop := w.watchDeadline(lease)
	defer stop()
	steps := 2 + w.rng.IntN(15) // 0.25 to 2 TTLs of work
	abandon := w.rng.Float64() < w.cfg.ExitProb
	if w.cfg.Unsafe {
		return w.unsafeHold(ctx, lease, steps, abandon)
	}
	for i := 0; i < steps; i++ {
		ts := MonoNow()
		if err := lease.Err(); err != nil {
			w.rec.Record(Event{Ev: EvLost, T: MonoNow(), Token: tok, Err: err.Error()})
			w.say(statusEnd)
			return nil
		}
		w.rec.Record(Event{Ev: EvStep, T: ts, Token: tok, Deadline: MonoOf(lease.Deadline())})
		if !w.work(ctx) {
			break
		}
	}
	w.rec.Record(Event{Ev: EvDeadline, T: MonoNow(), Token: tok, Deadline: MonoOf(lease.Deadline())})
	if abandon && ctx.Err() == nil {
		return ErrAbandon
	}
	w.rec.Record(Event{Ev: EvRelease, T: MonoNow(), Token: tok})
	w.say(statusEnd)
	w.release(ctx, lease) //nolint:errcheck // recorded; a failed release is the store's to expire
	return nil
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
// history has the deadline a killed worker last trusted. It samples every
// millisecond: tenure offers no notification of a renewal.
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
