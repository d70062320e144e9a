package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tenure-go/tenure/driver"
)

// listener is the one pub/sub connection per Store. It subscribes to the
// release channel and to expired-key events, and fans messages out to
// subscribers. go-redis reconnects and resubscribes after a failure; every
// time the subscription is confirmed again, all subscribers are woken,
// since messages may have been missed meanwhile. A connection that stays
// silent through a ping is replaced.
type listener struct {
	s      *Store
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	subs      map[string]map[chan struct{}]struct{}
	listening bool
	changed   chan struct{}
	lastErr   error
	ps        *redis.PubSub // the current one, closed by stop to end a blocked receive
}

// pingEvery is how long the pub/sub connection may be silent before it is
// pinged; a second silent period replaces the connection.
const pingEvery = 15 * time.Second

func (s *Store) listener() *listener {
	s.lisOnce.Do(func() {
		if s.closed.Load() {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		l := &listener{s: s, cancel: cancel, done: make(chan struct{}),
			subs: make(map[string]map[chan struct{}]struct{}), changed: make(chan struct{})}
		s.lis = l
		go l.run(ctx)
	})
	return s.lis
}

func (l *listener) stop() {
	l.cancel()
	l.mu.Lock()
	if l.ps != nil {
		l.ps.Close()
	}
	l.mu.Unlock()
	<-l.done
}

func (l *listener) setListening(on bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastErr = err
	if l.listening == on {
		return
	}
	l.listening = on
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	for ctx.Err() == nil {
		err := l.session(ctx)
		l.setListening(false, err)
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// session runs one PubSub until it is silent for too long or ctx ends.
// Errors in between are retried by go-redis's reconnection.
func (l *listener) session(ctx context.Context) error {
	ps := l.s.rdb.Subscribe(ctx, l.s.channel, l.s.expired)
	defer ps.Close()
	l.mu.Lock()
	l.ps = ps
	l.mu.Unlock()
	if ctx.Err() != nil { // stopped before l.ps was set
		return ctx.Err()
	}
	silent := 0
	for {
		msg, err := ps.ReceiveTimeout(ctx, pingEvery)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				silent++
				if silent >= 2 {
					return fmt.Errorf("redis store: pub/sub connection silent for %v", 2*pingEvery)
				}
				_ = ps.Ping(ctx)
				continue
			}
			// A broken connection: go-redis reconnects and resubscribes on
			// the next receive.
			l.setListening(false, err)
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
			if m.Kind == "subscribe" && m.Count == 2 {
				l.setListening(true, nil)
				l.wakeAll() // anything released while we were not listening
			}
		case *redis.Message:
			switch m.Channel {
			case l.s.channel:
				l.wake(m.Payload)
			case l.s.expired:
				if r, ok := strings.CutPrefix(m.Payload, l.s.prefix+"lease:"); ok {
					l.wake(r)
				}
			}
		}
	}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default: // a value is pending: coalesced
	}
}

func (l *listener) wake(resource string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.subs[resource] {
		notify(ch)
	}
}

func (l *listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, set := range l.subs {
		for ch := range set {
			notify(ch)
		}
	}
}

// Subscribe implements driver.Notifier: the channel receives a value
// (coalesced, never blocking the sender) when a lease on resource is
// released through any store with the same prefix, when it expires (only if
// the server publishes expired-key events), and after the pub/sub
// connection was re-established. It waits until the Store's pub/sub
// connection is subscribed (bounded by the dial timeout and ctx), so that a
// release right after Subscribe returns is seen; otherwise it returns an
// error and the caller polls. A notification is only a hint. The returned
// function ends the subscription; it is idempotent.
func (s *Store) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateResource(resource); err != nil {
		return nil, nil, err
	}
	l := s.listener()
	if l == nil {
		return nil, nil, errors.New("redis store: closed")
	}
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	if l.subs[resource] == nil {
		l.subs[resource] = make(map[chan struct{}]struct{})
	}
	l.subs[resource][ch] = struct{}{}
	l.mu.Unlock()
	unsubscribe := func() {
		l.mu.Lock()
		delete(l.subs[resource], ch)
		if len(l.subs[resource]) == 0 {
			delete(l.subs, resource)
		}
		l.mu.Unlock()
	}
	timer := time.NewTimer(2*s.rdb.Options().DialTimeout + time.Second)
	defer timer.Stop()
	for {
		l.mu.Lock()
		on, changed, lastErr := l.listening, l.changed, l.lastErr
		l.mu.Unlock()
		if on {
			break
		}
		var err error
		select {
		case <-changed:
			continue
		case <-timer.C:
			err = fmt.Errorf("redis store: release notifications unavailable: %w", lastErr)
		case <-ctx.Done():
			err = context.Cause(ctx)
		case <-l.done:
			err = errors.New("redis store: closed")
		}
		unsubscribe()
		return nil, nil, err
	}
	var once sync.Once
	return ch, func() { once.Do(unsubscribe) }, nil
}
