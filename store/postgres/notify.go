package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tenure-go/tenure/driver"
)

// listener is the one connection per Store that LISTENs on the release
// channel and fans notifications out to subscribers. It reconnects with
// capped backoff when the connection fails; after every (re)connection it
// wakes every subscriber, since releases may have been missed meanwhile.
type listener struct {
	s      *Store
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	subs      map[string]map[chan struct{}]struct{}
	listening bool
	changed   chan struct{} // closed and replaced when listening changes
	lastErr   error
}

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
	delay := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listenOnce(ctx)
		l.setListening(false, err)
		if ctx.Err() != nil {
			return
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// listenOnce connects, LISTENs, and dispatches notifications until the
// connection fails or ctx ends.
func (l *listener) listenOnce(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, l.s.connTO+time.Second)
	conn, err := pgx.ConnectConfig(cctx, l.s.connCfg)
	cancel()
	if err != nil {
		return fmt.Errorf("postgres store: listener: connect: %w", err)
	}
	defer conn.Close(context.Background())
	cctx, cancel = context.WithTimeout(ctx, l.s.connTO+time.Second)
	_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{l.s.channel}.Sanitize())
	cancel()
	if err != nil {
		return fmt.Errorf("postgres store: listener: LISTEN: %w", err)
	}
	l.setListening(true, nil)
	l.wakeAll() // anything released while we were not listening
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("postgres store: listener: %w", err)
		}
		l.wake(n.Payload)
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
// released through any store on this table, and after the listening
// connection was re-established. It waits until the Store's listening
// connection is up (at most the connect timeout, and ctx), so that a release
// right after Subscribe returns is seen; if it cannot be set up, Subscribe
// returns an error and the caller polls. A notification is only a hint:
// expiry sends none. The returned function ends the subscription; it is
// idempotent.
func (s *Store) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateResource(resource); err != nil {
		return nil, nil, err
	}
	l := s.listener()
	if l == nil {
		return nil, nil, errors.New("postgres store: closed")
	}
	// Register first, then wait for the connection: a reconnection after
	// this point wakes the new subscriber.
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
	timer := time.NewTimer(2*s.connTO + time.Second)
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
			err = fmt.Errorf("postgres store: release notifications unavailable: %w", lastErr)
		case <-ctx.Done():
			err = context.Cause(ctx)
		case <-l.done:
			err = errors.New("postgres store: closed")
		}
		unsubscribe()
		return nil, nil, err
	}
	var once sync.Once
	return ch, func() { once.Do(unsubscribe) }, nil
}
