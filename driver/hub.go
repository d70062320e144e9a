package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNotListening is wrapped by Hub.Subscribe's error when the store's
// listening connection did not come up in time; the caller then polls.
var ErrNotListening = errors.New("release notifications unavailable")

// Hub keeps the subscribers of a Notifier and wakes them, for stores whose
// notifications arrive on one listening connection (PostgreSQL's LISTEN,
// Redis pub/sub). The store sets Listen, the function that keeps that
// connection: the first Subscribe starts it, Close stops it. Listen calls
// Wake for each notification, WakeAll after its connection (re)connected
// (notifications may have been missed), and SetListening as the connection
// comes and goes. The store's Subscribe is Hub.Subscribe. A store without a
// connection (an in-process one) leaves Listen nil and calls
// SetListening(true, nil) once. The zero Hub is ready to use and not
// listening. A Hub must not be copied after first use; it is safe for
// concurrent use.
type Hub struct {
	// Listen keeps the store's listening connection until ctx ends,
	// reconnecting as it needs.
	Listen func(ctx context.Context)

	mu        sync.Mutex
	cancel    context.CancelFunc // ends Listen; nil until it started
	stopped   chan struct{}      // closed when Listen returned, or at Close
	closed    bool
	subs      map[string][]*hubSub // by resource, oldest first
	listening bool
	changed   chan struct{} // closed at the next change of listening; nil until asked for
	lastErr   error
}

// SetListening records whether the store's connection listens, and the
// error that ended it (nil when on).
func (h *Hub) SetListening(on bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr = err
	if h.listening == on {
		return
	}
	h.listening = on
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
}

// start starts Listen once and returns the channel closed when the hub
// stops, or an error after Close.
func (h *Hub) start() (<-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errHubClosed
	}
	if h.stopped == nil {
		h.stopped = make(chan struct{})
		if h.Listen != nil {
			ctx, cancel := context.WithCancel(context.Background())
			h.cancel = cancel
			go func() {
				defer close(h.stopped)
				h.Listen(ctx)
			}()
		}
	}
	return h.stopped, nil
}

var errHubClosed = errors.New("closed")

// Close stops Listen and waits until it returned. Subscribe fails after
// Close. It is idempotent.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	cancel, stopped := h.cancel, h.stopped
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-stopped
	}
}

// notify sends on ch without blocking: a value already pending coalesces.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// hubSub is one subscription: a waiter (Subscribe) or a watcher (Watch).
type hubSub struct {
	ch    chan struct{}
	watch bool
	ctx   context.Context // the subscriber's: ended when it gave up
	woken bool            // a wake-up was delivered to it (guarded by Hub.mu)
}

// wakeLocked delivers a wake-up to s. h.mu is held.
func (s *hubSub) wakeLocked() {
	s.woken = true
	notify(s.ch)
}

// Wake tells the subscribers of resource that it may have become free:
// every watcher, and one waiter, the one that has waited longest (it keeps
// its place until it unsubscribes, so waiters in this process are served in
// the order they came). Only one waiter can be granted the resource, so
// waking one keeps a hand-over to a few store calls whatever the number of
// waiters; the woken waiter that is not granted it waits again, and the next
// release wakes the next one.
func (h *Hub) Wake(resource string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	woke := false
	for _, s := range h.subs[resource] {
		if s.watch {
			notify(s.ch)
		} else if !woke {
			s.wakeLocked()
			woke = true
		}
	}
}

// WakeAll wakes every subscriber of every resource: after the listening
// connection (re)connected, notifications may have been missed.
func (h *Hub) WakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, subs := range h.subs {
		for _, s := range subs {
			s.wakeLocked()
		}
	}
}

// Watch is like Subscribe, for a watcher rather than a waiter: every
// release notification of resource wakes it (a holder that watches its own
// lease, to learn at once that someone else freed it; see
// driver.Watcher).
func (h *Hub) Watch(ctx context.Context, resource string, wait time.Duration) (<-chan struct{}, func(), error) {
	return h.subscribe(ctx, resource, wait, true)
}

// Subscribe implements Notifier.Subscribe for the store: it registers a
// subscriber of resource (ValidateResource first), starts Listen if it has
// not started, then waits until the connection listens, so that a
// notification sent after Subscribe returns is seen. It gives up after wait
// (with an error wrapping ErrNotListening and the connection's last error),
// when ctx ends (its cause), or when the hub is closed; then it unregisters
// the subscriber. The returned function ends the subscription; it is
// idempotent.
//
// A waiter keeps its place in the queue of its resource until it ends its
// subscription. Ending it passes a wake-up on to the next waiter when one is
// pending on the channel, and also when ctx has ended and a wake-up was
// delivered to this waiter: a waiter that took a wake-up and gives up
// without acting on it (its attempt was cut short, or it was told to stop)
// cancels ctx before it ends the subscription, and a waiter whose caller
// gave up has a ctx that ended anyway. So a waiter that gives up never
// swallows a release; one that was granted the resource, or found it held,
// ends its subscription with ctx live and passes nothing on. A store that
// wraps ctx must keep its context alive until the subscription ends.
func (h *Hub) Subscribe(ctx context.Context, resource string, wait time.Duration) (<-chan struct{}, func(), error) {
	return h.subscribe(ctx, resource, wait, false)
}

func (h *Hub) subscribe(ctx context.Context, resource string, wait time.Duration, watch bool) (<-chan struct{}, func(), error) {
	if err := ValidateResource(resource); err != nil {
		return nil, nil, err
	}
	closed, err := h.start()
	if err != nil {
		return nil, nil, err
	}
	// Register first, then wait for the connection: a reconnection after
	// this point wakes the new subscriber.
	sub := &hubSub{ch: make(chan struct{}, 1), watch: watch, ctx: ctx}
	ch := sub.ch
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[string][]*hubSub)
	}
	h.subs[resource] = append(h.subs[resource], sub)
	h.mu.Unlock()
	unsubscribe := func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		subs := h.subs[resource]
		for i, s := range subs {
			if s == sub {
				subs = append(subs[:i:i], subs[i+1:]...)
				break
			}
		}
		if len(subs) == 0 {
			delete(h.subs, resource)
		} else {
			h.subs[resource] = subs
		}
		if watch {
			return
		}
		passOn := sub.woken && ctx.Err() != nil // taken, and given up
		select {
		case <-ch: // a wake-up this waiter will never act on
			passOn = true
		default:
		}
		if passOn {
			for _, s := range subs {
				if !s.watch {
					s.wakeLocked()
					break
				}
			}
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		h.mu.Lock()
		on, lastErr := h.listening, h.lastErr
		if h.changed == nil {
			h.changed = make(chan struct{})
		}
		changed := h.changed
		h.mu.Unlock()
		if on {
			break
		}
		var err error
		select {
		case <-changed:
			continue
		case <-timer.C:
			err = ErrNotListening
			if lastErr != nil {
				err = fmt.Errorf("%w: %w", ErrNotListening, lastErr)
			}
		case <-ctx.Done():
			err = context.Cause(ctx)
		case <-closed:
			err = errHubClosed
		}
		unsubscribe()
		return nil, nil, err
	}
	var once sync.Once
	return ch, func() { once.Do(unsubscribe) }, nil
}
