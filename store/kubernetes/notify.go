package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// Subscribe implements driver.Notifier: the channel receives a value when
// the resource's Lease is released (no holder) or deleted, as the Store's
// watch of the namespace's Leases delivers it; each release wakes one
// waiting subscriber of the Store (driver.Hub). An expiry is no event: the
// API server never expires a Lease, so a waiter learns of it from the
// Remaining of the HeldError it was given (the time this Store still has to
// see the Lease unchanged).
func (s *Store) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	if err := s.usable(); err != nil {
		return nil, nil, err
	}
	return s.hub.Subscribe(ctx, resource, s.wait)
}

// Watch implements driver.Watcher: every release of resource.
func (s *Store) Watch(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	if err := s.usable(); err != nil {
		return nil, nil, err
	}
	return s.hub.Watch(ctx, resource, s.wait)
}

// watchTimeout is how long the API server keeps one watch open before it
// ends it (and the Store starts another): it bounds how long a watch on a
// connection that went silent can go unnoticed, with watchGrace.
const (
	watchTimeout = 60 * time.Second
	watchGrace   = 10 * time.Second
)

// listen keeps one watch of the namespace's Leases while the hub runs,
// starting again (with capped backoff) whenever it ends. After each start
// it wakes every subscriber, since a release may have gone unseen.
func (s *Store) listen(ctx context.Context) {
	backoff := 50 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		err := s.watchOnce(ctx, first)
		first = false
		s.hub.SetListening(false, err)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff = 50 * time.Millisecond
			continue
		}
		d := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, 2*time.Second)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

var errWatchStalled = errors.New("kubernetes store: watch of Leases stalled")

// watchOnce runs one watch from the current resourceVersion until it ends.
// A nil error means the server ended it as asked (watchTimeout).
func (s *Store) watchOnce(ctx context.Context, first bool) error {
	lctx, cancel := context.WithTimeout(ctx, s.wait)
	l, err := s.leases.List(lctx, metav1.ListOptions{Limit: 1})
	cancel()
	if err != nil {
		return fmt.Errorf("kubernetes store: listing Leases to watch them: %w", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, watchTimeout+watchGrace)
	defer wcancel()
	secs := int64(watchTimeout / time.Second)
	w, err := s.leases.Watch(wctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion, AllowWatchBookmarks: true, TimeoutSeconds: &secs})
	if err != nil {
		return fmt.Errorf("kubernetes store: watching Leases: %w", err)
	}
	defer w.Stop()
	s.hub.SetListening(true, nil)
	if !first {
		s.hub.WakeAll()
	}
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil
			}
			return errWatchStalled
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Error:
				return fmt.Errorf("kubernetes store: watch of Leases: %v", ev.Object)
			case watch.Bookmark:
				continue
			}
			obj, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			r := resourceOf(obj)
			if ev.Type == watch.Deleted {
				s.obs.forget(obj.Name)
				if r != "" {
					s.hub.Wake(r)
				}
				continue
			}
			s.obs.event(obj.Name, obj.ResourceVersion)
			if r != "" && !parseLease(obj).held() {
				s.hub.Wake(r)
			}
		}
	}
}
