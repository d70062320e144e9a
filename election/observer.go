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
	return LeaderOf(rec), nil
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
	var (
		queue    []Leader
		last     Leader // the last state reported
		reported bool
		maxToken uint64
		failures int
		sub      subscription
		subs     = make(chan subscription)
		dropped  bool
	)
	defer func() {
		if sub.stop != nil {
			sub.stop()
		}
	}()
	timer := o.cfg.Clock.NewTimer(time.Hour) // reset after the first read
	defer timer.Stop()
	retry := backoff.Policy{Base: 50 * time.Millisecond, Cap: o.cfg.PollInterval}
	subscribed := false
	read := true
	for {
		if read {
			read = false
			rctx, cancel := context.WithTimeout(ctx, o.readTimeout())
			l, err := o.Leader(rctx)
			cancel()
			if errors.Is(err, ErrNoLeader) {
				err = nil
			}
			delay := o.cfg.PollInterval
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				if failures == 0 {
					o.log.Warn("observer: cannot read the leader; retrying", "err", err)
				} else {
					o.log.Debug("observer: cannot read the leader; retrying", "err", err, "failures", failures+1)
				}
				delay = min(delay, retry.Delay(failures))
				failures++
			default:
				if failures > 0 {
					o.log.Info("observer: the leader can be read again", "failures", failures)
					failures = 0
				}
				stale := l.Token != 0 && l.Token < maxToken
				if !stale && (!reported || !sameTerm(l, last)) {
					if l.Owner != "" && reported && subscribed {
						// A new term: subscribe again, so that its lease is
						// marked as watched where the store needs that for
						// its release to notify.
						o.subscribe(ctx, subs)
					}
					queue = append(queue, l)
					if len(queue) > maxObserved {
						queue = queue[len(queue)-maxObserved:]
						if !dropped {
							o.log.Warn("observer: the reader does not keep up; dropping the oldest observations")
							dropped = true
						}
					}
					last, reported = l, true
				}
				maxToken = max(maxToken, l.Token)
				if l.Owner != "" && l.Remaining > 0 {
					// Read again once the lease would expire unless renewed.
					delay = min(delay, l.Remaining+10*time.Millisecond)
				}
			}
			if !subscribed {
				subscribed = o.subscribe(ctx, subs)
			}
			timer.Reset(max(delay, time.Millisecond))
		}
		var send chan<- Leader
		var head Leader
		if len(queue) > 0 {
			send, head = out, queue[0]
		}
		select {
		case <-ctx.Done():
			return
		case send <- head:
			queue = queue[1:]
		case s := <-subs:
			if sub.stop != nil {
				sub.stop()
			}
			sub = s
			read = true // a release before the subscription started may have been missed
		case _, ok := <-sub.ch:
			if !ok {
				sub.ch = nil
			}
			read = true
		case <-timer.C():
			read = true
		}
	}
}
