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

// watchKey keeps the etcd watch of one resource's key until ctx ends: it
// reads the key's revision, watches deletes from the next one, and when the
// watch ends (compaction, lost leader) wakes everyone, who ask the store,
// and watches again from now.
func (s *Store) watchKey(ctx context.Context, hub *driver.Hub, resource, key string) {
	wctx := clientv3.WithRequireLeader(ctx)
	for ctx.Err() == nil && s.cli.Ctx().Err() == nil {
		resp, err := s.cli.Get(wctx, key, clientv3.WithCountOnly())
		if err != nil {
			hub.SetListening(false, err)
			select {
			case <-time.After(200 * time.Millisecond):
				continue
			case <-ctx.Done():
				return
			}
		}
		rev := resp.Header.Revision + 1
		one, stopOne := context.WithCancel(wctx)
		wch := s.cli.Watch(one, key, clientv3.WithRev(rev), clientv3.WithFilterPut())
		hub.SetListening(true, nil)
		for wr := range wch {
			if err := wr.Err(); err != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					hub.Wake(resource)
				}
			}
		}
		stopOne()
		if ctx.Err() != nil || s.cli.Ctx().Err() != nil {
			return
		}
		// Something may have been missed while the watch was down.
		hub.SetListening(false, errors.New("etcd watch ended"))
		hub.WakeAll()
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
