package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tenure-go/tenure/driver"
)

// ListenCheck bounds how long the pub/sub connection may be silent: a
// connection that received nothing for ListenCheck is pinged, and one that
// still received nothing (the PONG included) ListenCheck later is closed
// and replaced, with a warning in the Store's log. So a connection that
// went half-open (a NAT or firewall that forgot it, a server host that
// vanished without a reset) is replaced within 2×ListenCheck of its last
// message, and every waiter then asks the store again (a release during
// the dead period is not lost).
const ListenCheck = 5 * time.Second

// listen keeps the one pub/sub connection per Store (driver.Hub starts it
// at the first Subscribe and stops it at Close). It subscribes to the
// release channel and to expired-key events, and fans messages out to
// subscribers. go-redis reconnects and resubscribes after a failure; a
// connection that stays silent through a ping (ListenCheck) is replaced.
// Every time the subscription is confirmed again, all subscribers are
// woken, since messages may have been missed meanwhile (not the first time:
// a subscriber that registered before the connection first listened was
// still in Subscribe, and its caller tries again after it); the loss and
// the reconnection are logged.
func (s *Store) listen(ctx context.Context) {
	var lost error // why the connection last stopped listening; nil if it never did
	listened := false
	for ctx.Err() == nil {
		err := s.session(ctx, &listened, &lost)
		s.hub.SetListening(false, err)
		if ctx.Err() != nil {
			return
		}
		if listened && lost == nil {
			lost = err
			s.log.Warn("redis store: release notifications: the pub/sub connection ended; reconnecting", "err", err)
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// session runs one PubSub until it is silent for too long or ctx ends.
// Errors in between are retried by go-redis's reconnection. listened tells
// whether a subscription was ever confirmed; lost is why the connection
// last stopped listening (nil while it listens).
func (s *Store) session(ctx context.Context, listened *bool, lost *error) error {
	channels := []string{s.channel}
	if s.expired != "" {
		channels = append(channels, s.expired)
	}
	ps := s.rdb.Subscribe(ctx, channels...)
	defer ps.Close()
	// Closing the PubSub ends a receive that is blocked on the connection.
	defer context.AfterFunc(ctx, func() { ps.Close() })()
	check := s.listenCheck
	silent := 0
	for {
		msg, err := ps.ReceiveTimeout(ctx, check)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				silent++
				if silent >= 2 {
					return fmt.Errorf("redis store: pub/sub connection silent for %v, a ping included", 2*check)
				}
				pctx, cancel := context.WithTimeout(ctx, check)
				_ = ps.Ping(pctx)
				cancel()
				continue
			}
			// A broken connection: go-redis reconnects and resubscribes on
			// the next receive.
			s.hub.SetListening(false, err)
			if *listened && *lost == nil {
				*lost = err
				s.log.Warn("redis store: release notifications: the pub/sub connection failed; reconnecting", "err", err)
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		silent = 0
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Count == len(channels) {
				s.hub.SetListening(true, nil)
				if *listened {
					if *lost != nil {
						s.log.Info("redis store: release notifications: listening again; every waiter asks the store", "after", *lost)
					}
					s.hub.WakeAll() // anything released while we were not listening
				}
				*listened, *lost = true, nil
			}
		case *redis.Message:
			switch m.Channel {
			case s.channel:
				s.hub.Wake(m.Payload)
			case s.expired:
				if r, ok := strings.CutPrefix(m.Payload, s.prefix+"lease:"); ok {
					s.hub.Wake(r)
				}
			}
		}
	}
}

// Subscribe implements driver.Notifier: the channel receives a value
// (coalesced, never blocking the sender) when a lease on resource is
// released through any store with the same prefix, when it expires (only if
// the server publishes expired-key events), and after the pub/sub
// connection was re-established; the Store wakes one waiting subscriber of
// resource per notification (driver.Hub). It waits until the Store's
// pub/sub connection is subscribed (bounded by the dial timeout and ctx),
// so that a release right after Subscribe returns is seen; otherwise it
// returns an error and the caller polls. A release publishes only for a
// lease marked as waited for: while the subscription lasts, each acquire
// attempt of this Store that finds resource held marks that lease, and each
// that is granted marks its own (the others still wait), so that releases
// hand the resource down the waiters one after the other. A
// notification is only a hint. The returned function ends the
// subscription; it is idempotent.
func (s *Store) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	ch, stop, err := s.hub.Subscribe(ctx, resource, 2*s.dial+time.Second)
	if err != nil {
		if !errors.Is(err, driver.ErrInvalidResource) {
			err = fmt.Errorf("redis store: %w", err)
		}
		return ch, stop, err
	}
	done := s.waits.add(resource)
	return ch, func() { stop(); done() }, nil
}

// Watch implements driver.Watcher: every release notification of resource
// wakes the watcher (Subscribe wakes one waiter per release). Before it
// returns, it marks the lease on resource, if any, so that its release
// publishes: a holder that watches its own lease learns at once that
// someone else freed it, and an exclusive request of a tenure.RWLock that
// watches a shared holder's lease learns at once that it left. The mark is
// best effort, bounded by ctx and the dial timeout: when it fails, the
// watcher learns of a release at its next look. No call of the watch
// outlives Watch's return but the subscription itself.
func (s *Store) Watch(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	ch, stop, err := s.hub.Watch(ctx, resource, 2*s.dial+time.Second)
	if err != nil {
		if !errors.Is(err, driver.ErrInvalidResource) {
			err = fmt.Errorf("redis store: %w", err)
		}
		return ch, stop, err
	}
	mctx, cancel := context.WithTimeout(ctx, s.dial+5*time.Second)
	_, _ = s.eval(mctx, markScript, []string{s.leaseKey(resource)})
	cancel()
	return ch, stop, nil
}

// waits are the resources that this Store's subscribers wait for: the
// acquire attempts of this Store mark the leases of those they find held.
type waits struct {
	n     atomic.Int64 // subscriptions
	mu    sync.Mutex
	count map[string]int
}

// has tells whether resource is subscribed to.
func (w *waits) has(resource string) bool {
	if w.n.Load() == 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count[resource] > 0
}

// add counts a subscription to resource and returns the function that
// ends it.
func (w *waits) add(resource string) func() {
	w.n.Add(1)
	w.mu.Lock()
	if w.count == nil {
		w.count = map[string]int{}
	}
	w.count[resource]++
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			if w.count[resource]--; w.count[resource] <= 0 {
				delete(w.count, resource)
			}
			w.mu.Unlock()
			w.n.Add(-1)
		})
	}
}
