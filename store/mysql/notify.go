package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tenure-go/tenure/driver"
)

// pollBatch bounds the resources of one poll statement.
const pollBatch = 500

// errNoPolling is Subscribe's error when Config.PollInterval is negative.
var errNoPolling = errors.New("release polling is off (poll_interval=off): waiters back off")

// poll is the Store's listener (driver.Hub.Listen): while some Acquire of
// this Store waits, it reads, every PollInterval, which of the resources
// they wait for are held, in one statement, and wakes a waiter of each
// one that is free (the one that has waited longest; every watcher). A
// resource stays in the poll until its last subscriber leaves, so a
// release is seen within one poll interval of its commit, whichever
// process released it, and so is an expiry. When a poll fails, it says
// so (Subscribe then waits for the next successful poll, up to its
// bound) and tries again with capped backoff; after a failure it wakes
// every subscriber, since a release may have come meanwhile.
func (s *Store) poll(ctx context.Context) {
	delay := s.pollEvery
	listening, failed := false, false
	for {
		resources := s.watchedResources()
		if len(resources) > 0 {
			free, err := s.free(ctx, resources)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				s.hub.SetListening(false, err)
				listening, failed = false, true
				delay = min(2*delay, 2*time.Second)
			} else {
				if !listening {
					s.hub.SetListening(true, nil)
					listening = true
					if failed {
						// A release may have come while the polls
						// failed; before the first poll, a subscriber
						// tries again itself after subscribing.
						s.hub.WakeAll()
					}
				}
				delay = s.pollEvery
				for _, r := range free {
					s.hub.Wake(r)
				}
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// watchedResources returns the resources with subscribers, sorted.
func (s *Store) watchedResources() []string {
	s.watched.mu.Lock()
	defer s.watched.mu.Unlock()
	out := make([]string, 0, len(s.watched.n))
	for r := range s.watched.n {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// free returns the resources among rs that no live lease holds.
func (s *Store) free(ctx context.Context, rs []string) ([]string, error) {
	pctx, cancel := context.WithTimeout(ctx, s.connTO+time.Second)
	defer cancel()
	held := map[string]bool{}
	for lo := 0; lo < len(rs); lo += pollBatch {
		chunk := rs[lo:min(lo+pollBatch, len(rs))]
		args := make([]any, len(chunk))
		for i, r := range chunk {
			args[i] = r
		}
		err := s.with(pctx, "poll", fmt.Sprintf("%d resources", len(chunk)), func(c *sql.Conn) error {
			rows, err := c.QueryContext(pctx, fmt.Sprintf(s.sql.poll, placeholders(len(chunk))), args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var r []byte
				if err := rows.Scan(&r); err != nil {
					return err
				}
				held[string(r)] = true
			}
			return rows.Err()
		})
		if err != nil {
			return nil, s.failed("poll", fmt.Sprintf("%d resources", len(chunk)), err)
		}
	}
	var out []string
	for _, r := range rs {
		if !held[r] {
			out = append(out, r)
		}
	}
	return out, nil
}

// Subscribe implements driver.Notifier: the channel receives a value
// (coalesced, never blocking the sender) when resource may have become
// free: the Store polls the resources its subscribers wait for every
// Config.PollInterval (one statement for all of them, only while someone
// waits) and wakes, for each one it finds free (released or expired, by
// any process), the subscriber that has waited longest (driver.Hub). It
// waits until the Store's poll has succeeded once (at most twice the
// connect timeout plus a second, and ctx), so that a release right after
// Subscribe returns is seen; when the database cannot be polled, or
// polling is off (PollInterval negative), it returns an error wrapping
// driver.ErrNotListening and the caller backs off on its own. A
// notification is only a hint. The returned function ends the
// subscription; it is idempotent.
func (s *Store) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.subscribe(ctx, resource, s.hub.Subscribe)
}

// Watch implements driver.Watcher: the watcher is woken at every poll that
// finds resource free (a holder that watches its own lease,
// tenure.WithReleaseWatch); otherwise as Subscribe.
func (s *Store) Watch(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.subscribe(ctx, resource, s.hub.Watch)
}

func (s *Store) subscribe(ctx context.Context, resource string,
	hub func(context.Context, string, time.Duration) (<-chan struct{}, func(), error)) (<-chan struct{}, func(), error) {
	if err := driver.ValidateResource(resource); err != nil {
		return nil, nil, err
	}
	if s.pollEvery < 0 {
		return nil, nil, fmt.Errorf("mysql store: %w: %w", driver.ErrNotListening, errNoPolling)
	}
	if s.closed.Load() {
		return nil, nil, errClosed
	}
	// Registered before the hub's Subscribe, so that the poll that tells
	// the hub it listens has looked at this resource too.
	s.watched.mu.Lock()
	s.watched.n[resource]++
	s.watched.mu.Unlock()
	unwatch := func() {
		s.watched.mu.Lock()
		defer s.watched.mu.Unlock()
		if s.watched.n[resource]--; s.watched.n[resource] <= 0 {
			delete(s.watched.n, resource)
		}
	}
	ch, stop, err := hub(ctx, resource, 2*s.connTO+time.Second)
	if err != nil {
		unwatch()
		if ctx.Err() == nil && errors.Is(err, driver.ErrNotListening) {
			return nil, nil, fmt.Errorf("mysql store: %w", err)
		}
		return nil, nil, fmt.Errorf("mysql store: %w", err)
	}
	done := false
	return ch, func() {
		s.watched.mu.Lock()
		d := done
		done = true
		s.watched.mu.Unlock()
		if !d {
			stop()
			unwatch()
		}
	}, nil
}
