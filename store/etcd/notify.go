package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-go/tenure/driver"
)

// Subscribe implements driver.Notifier: the channel receives a value
// (coalesced, never blocking the sender) when the key of resource is
// deleted (a release or an expiry), and when the watch had to be
// re-established. Subscribers of one resource in this Store share one etcd
// watch, and a delete wakes one waiter, the one that has waited longest
// (driver.Hub), so a hand-over costs a few store calls whatever the number
// of waiters; Watch subscribes to every delete. The watch starts from the
// revision read when it was set up, so nothing after Subscribe returns is
// missed. A notification is only a hint. The returned function ends the
// subscription; it is idempotent.
func (s *Store) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.subscribe(ctx, resource, false)
}

// Watch implements driver.Watcher: every delete of resource's key wakes
// the watcher.
func (s *Store) Watch(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.subscribe(ctx, resource, true)
}

// watchGroup is the one etcd watch of a resource and its subscribers.
type watchGroup struct {
	hub  driver.Hub
	refs int
}

func (s *Store) subscribe(ctx context.Context, resource string, watch bool) (<-chan struct{}, func(), error) {
	if err := driver.ValidateResource(resource); err != nil {
		return nil, nil, err
	}
	s.watchMu.Lock()
	if s.watches == nil {
		s.watches = make(map[string]*watchGroup)
	}
	g := s.watches[resource]
	if g == nil {
		g = &watchGroup{}
		key := s.key(resource)
		g.hub.Listen = func(ctx context.Context) { s.watchKey(ctx, &g.hub, resource, key) }
		s.watches[resource] = g
	}
	g.refs++
	s.watchMu.Unlock()
	leave := func() {
		s.watchMu.Lock()
		g.refs--
		last := g.refs == 0
		if last {
			delete(s.watches, resource)
		}
		s.watchMu.Unlock()
		if last {
			g.hub.Close()
		}
	}
	subscribe := g.hub.Subscribe
	if watch {
		subscribe = g.hub.Watch
	}
	ch, stop, err := subscribe(ctx, resource, 2*s.dialTO+time.Second)
	if err != nil {
		leave()
		return nil, nil, fmt.Errorf("etcd store: subscribe %q: %w", resource, err)
	}
	var once sync.Once
	return ch, func() { once.Do(func() { stop(); leave() }) }, nil
}

// ListenCheck bounds how long a watch of release notifications may be
// silent: after ListenCheck without a message the Store asks etcd for a
// progress notification on its watch stream (one request for all its
// watches), and a watch that still received nothing ListenCheck later is
// cancelled and set up again from a fresh read, with a warning in the
// Store's log, and its waiters are woken to ask the store (a release during
// the dead period is not lost). The connection under the watches is also
// kept by gRPC keep-alives (Config.Client.DialKeepAliveTime, default 10 s,
// and DialKeepAliveTimeout, default 5 s, here): one that went half-open is
// closed and dialed again within their sum, and the new watch goes through
// the new connection.
const ListenCheck = 5 * time.Second

// requestProgress makes sure that etcd was asked for a progress
// notification on every watch of the Store's watch stream after since: it
// asks in the background unless a request was sent after since already
// (one request serves every watch of the Store), and returns when the
// request that serves since was sent. A watch that received nothing since
// since gets the answer to that request, unless its stream is dead.
func (s *Store) requestProgress(since time.Time) time.Time {
	s.progressMu.Lock()
	if s.progressAt.After(since) {
		at := s.progressAt
		s.progressMu.Unlock()
		return at
	}
	now := time.Now()
	s.progressAt = now
	s.progressMu.Unlock()
	s.goBackground(func() {
		// The watches' stream is the one of their context's metadata
		// (WithRequireLeader).
		ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(s.bgCtx), s.listenCheck)
		defer cancel()
		_ = s.cli.RequestProgress(ctx)
	})
	return now
}

// watchKey keeps the etcd watch of one resource's key until ctx ends: it
// reads the store's revision, watches deletes from it, and when the
// watch ends (compaction, lost leader) or falls silent (ListenCheck)
// watches again from a new read, and then wakes everyone, who ask the
// store.
func (s *Store) watchKey(ctx context.Context, hub *driver.Hub, resource, key string) {
	wctx := clientv3.WithRequireLeader(ctx)
	var lost error // why the last watch ended; nil before the first
	for ctx.Err() == nil && s.cli.Ctx().Err() == nil {
		gctx, cancel := context.WithTimeout(wctx, s.dialTO+s.listenCheck)
		resp, err := s.cli.Get(gctx, key, clientv3.WithCountOnly())
		cancel()
		if err != nil {
			hub.SetListening(false, err)
			select {
			case <-time.After(200 * time.Millisecond):
				continue
			case <-ctx.Done():
				return
			}
		}
		// From the revision read, not the next one: a delete at that
		// revision wakes a waiter that asks the store for nothing, but a
		// watch that starts after the current revision gets no progress
		// notification until the next write anywhere (etcd's
		// watchableStore.progressIfSync), and the silence check needs them.
		rev := resp.Header.Revision
		one, stopOne := context.WithCancel(wctx)
		wch := s.cli.Watch(one, key, clientv3.WithRev(rev), clientv3.WithFilterPut())
		hub.SetListening(true, nil)
		if lost != nil {
			s.log.Info("etcd store: release notifications: watching again; every waiter asks the store", "resource", resource, "after", lost)
			hub.WakeAll() // anything released while the watch was down
		}
		lost = s.watchEvents(ctx, hub, resource, wch)
		stopOne()
		if ctx.Err() != nil || s.cli.Ctx().Err() != nil {
			return
		}
		// Something may be missed until the watch is up again; waiters are
		// woken once it is (above), not now: on a connection that went
		// half-open, their store calls would hang too.
		hub.SetListening(false, lost)
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
}

// errWatchEnded is the error of a watch whose channel closed.
var errWatchEnded = errors.New("etcd watch ended")

// watchEvents wakes hub's waiters at each delete that wch reports, until
// the watch ends (its error), falls silent through a progress request (an
// error, logged), or ctx ends (nil).
func (s *Store) watchEvents(ctx context.Context, hub *driver.Hub, resource string, wch clientv3.WatchChan) error {
	check := s.listenCheck
	last := time.Now() // of the last message, or the watch's start
	timer := time.NewTimer(check)
	defer timer.Stop()
	asked := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case wr, ok := <-wch:
			if !ok {
				return errWatchEnded
			}
			if err := wr.Err(); err != nil {
				return fmt.Errorf("%w: %w", errWatchEnded, err)
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					hub.Wake(resource)
				}
			}
			last, asked = time.Now(), false
			timer.Reset(check)
		case <-timer.C:
			if asked {
				err := fmt.Errorf("etcd watch silent for %v, through a progress request", time.Since(last).Round(time.Millisecond))
				s.log.Warn("etcd store: release notifications: the watch fell silent; watching again", "resource", resource, "err", err)
				return err
			}
			sent := s.requestProgress(last)
			asked = true
			timer.Reset(time.Until(sent.Add(check)))
		}
	}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
