package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/backoff"
)

// DefaultPollInterval is how often an Observer reads the leader by default.
const DefaultPollInterval = time.Second

// maxObserved bounds the observations an Observer keeps for a reader that
// does not keep up: beyond it, the oldest are dropped.
const maxObserved = 1024

// ObserverConfig configures an Observer.
type ObserverConfig struct {
	// Resource is the name of the election's lease (Config.Resource).
	// Required.
	Resource string
	// PollInterval is the longest time between two reads of the leader
	// (default 1 s). Reads also follow the store's release notifications,
	// where it sends them, and the time the store said the leader's lease
	// had left, so that a release or an expiry is seen promptly; a new
	// leader is seen at the next read.
	PollInterval time.Duration
	// Clock times the reads (default clock.Real()).
	Clock clock.Clock
	// Logger receives the observer's logs: a store that cannot be read (at
	// level Warn, once per outage), notifications that are unavailable
	// (Debug). Default: discarded.
	Logger *slog.Logger
}

// Observer follows who leads an election without campaigning: a process
// that is not a candidate (a proxy that forwards to the leader, a
// dashboard) or a candidate that wants to know the leader's published
// value. It only reads the store, and never delays the election: its reads
// are its own store calls, and its channel is served by a goroutine of its
// own. It is safe for concurrent use.
//
// What it reports is a hint: by the time a reader acts on it, the leader
// may have lost its lease. A leader's work is protected by its fencing
// token, not by what observers think.
type Observer struct {
	store driver.Store
	cfg   ObserverConfig
	log   *slog.Logger
}

// NewObserver returns an observer of the election on cfg.Resource in
// store. It checks the configuration without any I/O; a bad resource name
// is an error wrapping tenure.ErrInvalidResource.
func NewObserver(store driver.Store, cfg ObserverConfig) (*Observer, error) {
	if store == nil {
		return nil, errors.New("election: nil store")
	}
	if err := driver.ValidateResource(cfg.Resource); err != nil {
		return nil, fmt.Errorf("election: observer: %w", err)
	}
	if cfg.PollInterval < 0 {
		return nil, fmt.Errorf("election: observer: negative poll interval %v", cfg.PollInterval)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Observer{store: store, cfg: cfg, log: cfg.Logger.With("election", cfg.Resource)}, nil
}

// readTimeout bounds one read of the leader.
func (o *Observer) readTimeout() time.Duration { return max(2*o.cfg.PollInterval, 5*time.Second) }

// Leader reads the current leader once, or returns an error wrapping
// ErrNoLeader when nobody leads.
func (o *Observer) Leader(ctx context.Context) (Leader, error) {
	rec, err := o.store.Get(ctx, o.cfg.Resource)
	if errors.Is(err, tenure.ErrNotHeld) {
		return Leader{}, ErrNoLeader
	}
	if err != nil {
		return Leader{}, fmt.Errorf("election: leader of %q: %w", o.cfg.Resource, err)
	}
	return leaderOf(rec), nil
}

// Observe follows the leader until ctx ends, in the manner of etcd's
// Election.Observe. The returned channel receives the current state as
// soon as the store was read (a Leader, or the zero Leader, whose Owner is
// empty, when nobody leads), and then each change, in order: a new term
// (another fencing token, or owner string where the store keeps no
// tokens), or nobody leading. Renewals are not changes. Tokens never go
// back: a read older than what was already reported (a lagging replica) is
// ignored. The channel is closed when ctx ends.
//
// A change is seen within PollInterval, and sooner where the store
// notifies releases (driver.Watcher, driver.Notifier: PostgreSQL, etcd,
// Redis, Kubernetes; MySQL within its poll interval) and when a leader's
// lease expires (read at the time the store
// said it had left). A term shorter than that may be missed, and a
// hand-over from one leader to the next, without a read in between, is
// reported without the "nobody leads" between them.
//
// Observations wait in order for a reader that falls behind, up to 1024 of
// them (the oldest are then dropped), so a slow reader delays nothing but
// itself. While the store cannot be read, nothing is reported (the last
// observation stands); the failure is logged and the read retried with
// backoff, at least every PollInterval. Each call starts a goroutine of its
// own, which ends with ctx.
func (o *Observer) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	go o.run(ctx, out)
	return out
}

// subscription is a release subscription of the observer.
type subscription struct {
	ch   <-chan struct{}
	stop func()
}

// subscribe starts a release subscription in the background, where the
// store has notifications, and delivers it on subs (or ends it, when ctx
// ended first). A store with driver.Watcher is watched (every release
// wakes the observer, and the leader's lease is marked so that its release
// notifies, on PostgreSQL and Redis); one with only driver.Notifier is
// subscribed to.
func (o *Observer) subscribe(ctx context.Context, subs chan<- subscription) bool {
	n, ok := o.store.(driver.Notifier)
	if !ok {
		return false
	}
	f := n.Subscribe
	if w, ok := o.store.(driver.Watcher); ok {
		f = w.Watch
	}
	go func() {
		ch, stop, err := f(ctx, o.cfg.Resource)
		if err != nil {
			if ctx.Err() == nil {
				o.log.Debug("observer: release notifications unavailable; polling", "err", err)
			}
			return
		}
		select {
		case subs <- subscription{ch: ch, stop: stop}:
		case <-ctx.Done():
			stop()
		}
	}()
	return true
}

func (o *Observer) run(ctx context.Context, out chan<- Leader) {
	defer close(out)
	ob := &observation{
		o:     o,
		out:   out,
		subs:  make(chan subscription),
		retry: backoff.Policy{Base: 50 * time.Millisecond, Cap: o.cfg.PollInterval},
		timer: o.cfg.Clock.NewTimer(time.Hour), // reset after the first read
	}
	defer ob.timer.Stop()
	defer ob.unsubscribe()
	for read := true; ; {
		if read && !ob.read(ctx) {
			return
		}
		var ok bool
		if read, ok = ob.wait(ctx); !ok {
			return
		}
	}
}

// observation is the state of the goroutine of one Observe call.
type observation struct {
	o   *Observer
	out chan<- Leader

	queue    []Leader // observations the reader has not taken yet
	dropped  bool     // the oldest observations were dropped
	last     Leader   // the last state reported
	reported bool
	maxToken uint64 // the largest token read

	failures int // reads failed in a row
	retry    backoff.Policy

	sub        subscription
	subs       chan subscription // subscriptions that subscribe started
	subscribed bool

	timer clock.Timer // the next read
}

// read reads the leader once, queues what changed, and sets the timer of
// the next read. It returns false when ctx ended.
func (ob *observation) read(ctx context.Context) bool {
	o := ob.o
	rctx, cancel := context.WithTimeout(ctx, o.readTimeout())
	l, err := o.Leader(rctx)
	cancel()
	if errors.Is(err, ErrNoLeader) {
		err = nil
	}
	delay := o.cfg.PollInterval
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil:
		delay = min(delay, ob.failed(err))
	default:
		delay = min(delay, ob.seen(ctx, l))
	}
	if !ob.subscribed {
		ob.subscribed = o.subscribe(ctx, ob.subs)
	}
	ob.timer.Reset(max(delay, time.Millisecond))
	return true
}

// failed logs a read that failed (at level Warn once per outage) and
// returns how soon to read again: with backoff.
func (ob *observation) failed(err error) time.Duration {
	if ob.failures == 0 {
		ob.o.log.Warn("observer: cannot read the leader; retrying", "err", err)
	} else {
		ob.o.log.Debug("observer: cannot read the leader; retrying", "err", err, "failures", ob.failures+1)
	}
	d := ob.retry.Delay(ob.failures)
	ob.failures++
	return d
}

// seen queues l when it is a change that is not stale, and returns how
// soon to read again: once the leader's lease would expire unless renewed
// (or at the poll interval).
func (ob *observation) seen(ctx context.Context, l Leader) time.Duration {
	if ob.failures > 0 {
		ob.o.log.Info("observer: the leader can be read again", "failures", ob.failures)
		ob.failures = 0
	}
	stale := l.Token != 0 && l.Token < ob.maxToken
	if !stale && (!ob.reported || !sameTerm(l, ob.last)) {
		if l.Owner != "" && ob.reported && ob.subscribed {
			// A new term: subscribe again, so that its lease is marked as
			// watched where the store needs that for its release to
			// notify.
			ob.o.subscribe(ctx, ob.subs)
		}
		ob.enqueue(l)
		ob.last, ob.reported = l, true
	}
	ob.maxToken = max(ob.maxToken, l.Token)
	if l.Owner != "" && l.Remaining > 0 {
		return l.Remaining + 10*time.Millisecond
	}
	return ob.o.cfg.PollInterval
}

// enqueue queues l for the reader, dropping the oldest observations beyond
// maxObserved.
func (ob *observation) enqueue(l Leader) {
	ob.queue = append(ob.queue, l)
	if len(ob.queue) > maxObserved {
		ob.queue = ob.queue[len(ob.queue)-maxObserved:]
		if !ob.dropped {
			ob.o.log.Warn("observer: the reader does not keep up; dropping the oldest observations")
			ob.dropped = true
		}
	}
}

// wait hands queued observations to the reader until it is time to read
// again (the timer, a release notification, a new subscription), and says
// whether to read; ok is false when ctx ended.
func (ob *observation) wait(ctx context.Context) (read, ok bool) {
	var send chan<- Leader
	var head Leader
	if len(ob.queue) > 0 {
		send, head = ob.out, ob.queue[0]
	}
	select {
	case <-ctx.Done():
		return false, false
	case send <- head:
		ob.queue = ob.queue[1:]
		return false, true
	case s := <-ob.subs:
		ob.unsubscribe()
		ob.sub = s
		return true, true // a release before the subscription started may have been missed
	case _, open := <-ob.sub.ch:
		if !open {
			ob.sub.ch = nil
		}
		return true, true
	case <-ob.timer.C():
		return true, true
	}
}

// unsubscribe ends the current subscription, if any.
func (ob *observation) unsubscribe() {
	if ob.sub.stop != nil {
		ob.sub.stop()
	}
}
