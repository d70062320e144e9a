package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
// starting again (with capped backoff) whenever it ends. A watch that ends
// resumes from the last resourceVersion it delivered, so no release is
// missed and nobody needs waking; only when it must start from a new list
// (the first time, or when the API server no longer has that version) does
// it wake every subscriber, since a release may have gone unseen. (Waking
// every waiter of a resource lets them race for it, out of the order they
// came; a watch that the API server closed under load did that.)
func (s *Store) listen(ctx context.Context) {
	backoff := 50 * time.Millisecond
	first := true
	from := ""
	for ctx.Err() == nil {
		var err error
		from, err = s.watchOnce(ctx, from, first)
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

// watchOnce runs one watch until it ends, from resourceVersion from, or,
// when from is "", from a new list's (waking every subscriber unless first).
// It returns the resourceVersion to resume from ("" when the next watch must
// list again), and nil when the server ended the watch as asked
// (watchTimeout).
func (s *Store) watchOnce(ctx context.Context, from string, first bool) (string, error) {
	relist := from == ""
	if relist {
		lctx, cancel := context.WithTimeout(ctx, s.wait)
		l, err := s.leases.List(lctx, metav1.ListOptions{Limit: 1})
		cancel()
		if err != nil {
			return "", fmt.Errorf("kubernetes store: listing Leases to watch them: %w", err)
		}
		from = l.ResourceVersion
	}
	wctx, wcancel := context.WithTimeout(ctx, watchTimeout+watchGrace)
	defer wcancel()
	secs := int64(watchTimeout / time.Second)
	w, err := s.leases.Watch(wctx, metav1.ListOptions{ResourceVersion: from, AllowWatchBookmarks: true, TimeoutSeconds: &secs})
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return "", err
	}
	if err != nil {
		return from, fmt.Errorf("kubernetes store: watching Leases: %w", err)
	}
	defer w.Stop()
	s.hub.SetListening(true, nil)
	if relist && !first {
		s.hub.WakeAll()
	}
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return from, nil
			}
			return from, errWatchStalled
		case ev, ok := <-w.ResultChan():
			if !ok {
				return from, nil
			}
			if ev.Type == watch.Error {
				if st, ok := ev.Object.(*metav1.Status); ok && (st.Code == http.StatusGone || st.Reason == metav1.StatusReasonExpired || st.Reason == metav1.StatusReasonGone) {
					return "", fmt.Errorf("kubernetes store: watch of Leases: %s", st.Message)
				}
				return from, fmt.Errorf("kubernetes store: watch of Leases: %v", ev.Object)
			}
			obj, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			if obj.ResourceVersion != "" {
				from = obj.ResourceVersion
			}
			if ev.Type == watch.Bookmark {
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
