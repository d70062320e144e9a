// Package memory is an in-process driver.Store for unit tests of code that
// uses tenure, and for examples. Leases live in a map guarded by a mutex and
// expire on the store's clock (injectable, so tests need no sleeps). It
// keeps fencing tokens per resource for the store's lifetime and notifies
// waiters on release (driver.Notifier).
//
// It is not a stand-in for a real store in that store's own tests: it shares
// no state between processes and survives no restart.
package memory

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenure-go/tenure/clock"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store"
)

// Store is an in-memory driver.Store. It is safe for concurrent use.
type Store struct {
	clock clock.Clock

	mu     sync.Mutex
	leases map[string]*lease
	tokens map[string]uint64 // last token granted per resource; never goes back
	hub    driver.Hub        // release notifications; always listening
	closed bool
}

type lease struct {
	owner   string
	token   uint64
	ttl     time.Duration
	expires time.Time
}

// Config configures a Store.
type Config struct {
	// Clock is the clock on which leases expire (default: the real clock).
	// Tests give a fake one, so that they need no sleeps.
	Clock clock.Clock
}

// CheckTTL returns an error wrapping driver.ErrInvalidTTL for a TTL that is
// not positive; the store keeps any positive TTL.
func (c Config) CheckTTL(ttl time.Duration) error { return driver.ValidateTTL(ttl) }

// Open returns an empty store. It never fails; the error is there for the
// shape every store package has.
func Open(_ context.Context, cfg Config) (*Store, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	s := &Store{
		clock:  cfg.Clock,
		leases: make(map[string]*lease),
		tokens: make(map[string]uint64),
	}
	s.hub.SetListening(true, nil)
	return s, nil
}

// New returns an empty store on the real clock: Open with a zero Config.
func New() *Store {
	s, _ := Open(context.Background(), Config{})
	return s
}

// OpenURL returns an empty store for the URL "memory:" (see ParseURL).
func OpenURL(ctx context.Context, raw string) (*Store, error) {
	return driver.OpenURL(ctx, raw, ParseURL, Open)
}

// ParseURL accepts "memory:" (also "memory://"), which names a new, empty
// store of its own each time it is opened: nothing is shared between two
// opens. It takes no parameters. Errors wrap driver.ErrBadURL.
func ParseURL(raw string) (Config, error) {
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok || !strings.EqualFold(scheme, "memory") || (rest != "" && rest != "//") {
		return Config{}, urlSpec.Errorf("want memory:, got %q", raw)
	}
	return Config{}, nil
}

// urlSpec describes memory: URLs, for messages.
var urlSpec = driver.URLSpec{Store: "memory", Schemes: []string{"memory"}, Form: "memory:"}

func init() {
	store.Register(store.Driver[Config, *Store]{
		Schemes:  []string{"memory"},
		Usage:    "memory:  a new, empty store in this process only, for tests and examples (nothing is shared or kept)",
		Parse:    ParseURL,
		Open:     Open,
		CheckTTL: Config.CheckTTL,
	})
}

// errClosed is what a closed Store answers: it matches
// driver.ErrStoreUnusable, so that a Locker waiting on it stops.
var errClosed = fmt.Errorf("memory store: closed (%w)", driver.ErrStoreUnusable)

// live returns the live lease on resource; the caller holds s.mu.
func (s *Store) live(resource string, now time.Time) *lease {
	l := s.leases[resource]
	if l == nil {
		return nil
	}
	if !now.Before(l.expires) {
		delete(s.leases, resource)
		return nil
	}
	return l
}

func record(resource string, l *lease, now time.Time) driver.Record {
	return driver.Record{Resource: resource, Owner: l.owner, Token: l.token, TTL: l.ttl, Remaining: l.expires.Sub(now)}
}

// notHolder is the error of a renewal or release whose grant does not hold
// resource; l is the live lease, if any.
func notHolder(resource string, l *lease, now time.Time) error {
	if l == nil {
		return driver.NotHolder(nil)
	}
	rec := record(resource, l, now)
	return driver.NotHolder(&rec)
}

// Acquire implements driver.Store.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := driver.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return driver.Record{}, errClosed
	}
	now := s.clock.Now()
	if l := s.live(resource, now); l != nil {
		if l.owner != owner {
			return driver.Record{}, &driver.HeldError{Holder: record(resource, l, now)}
		}
		l.ttl, l.expires = ttl, now.Add(ttl)
		return record(resource, l, now), nil
	}
	s.tokens[resource]++
	l := &lease{owner: owner, token: s.tokens[resource], ttl: ttl, expires: now.Add(ttl)}
	s.leases[resource] = l
	return record(resource, l, now), nil
}

// Renew implements driver.Store.
func (s *Store) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if err := driver.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	return s.update(ctx, "renew", resource, owner, token, func(l *lease, now time.Time) {
		l.ttl, l.expires = ttl, now.Add(ttl)
	})
}

// update applies f to the live lease of resource held by owner with token,
// under the store's lock; op names the call in the error when another or
// nobody holds it.
func (s *Store) update(ctx context.Context, op, resource, owner string, token uint64, f func(l *lease, now time.Time)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	now := s.clock.Now()
	l := s.live(resource, now)
	if l == nil || l.owner != owner || l.token != token {
		return fmt.Errorf("memory store: %s %q: %w", op, resource, notHolder(resource, l, now))
	}
	f(l, now)
	return nil
}

// Keep implements driver.Keeper.
func (s *Store) Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error {
	if err := driver.ValidateKeep(resource, owner, keeper, ttl); err != nil {
		return err
	}
	return s.update(ctx, "keep", resource, owner, token, func(l *lease, now time.Time) {
		l.owner, l.ttl, l.expires = keeper, ttl, now.Add(ttl)
	})
}

// RenewBatch implements driver.BatchRenewer: every renewal under one lock,
// as a store that renews many leases in one request would.
func (s *Store) RenewBatch(ctx context.Context, leases []driver.Renewal) []error {
	errs := make([]error, len(leases))
	for i, r := range leases {
		errs[i] = driver.ValidateAcquire(r.Resource, r.Owner, r.TTL)
	}
	if err := ctx.Err(); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for i, r := range leases {
		switch {
		case errs[i] != nil:
		case s.closed:
			errs[i] = errClosed
		default:
			l := s.live(r.Resource, now)
			if l == nil || l.owner != r.Owner || l.token != r.Token {
				errs[i] = fmt.Errorf("memory store: renew %q: %w", r.Resource, notHolder(r.Resource, l, now))
				continue
			}
			l.ttl, l.expires = r.TTL, now.Add(r.TTL)
		}
	}
	return errs
}

// Release implements driver.Store.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	now := s.clock.Now()
	l := s.live(resource, now)
	if l == nil || l.owner != owner || l.token != token {
		return fmt.Errorf("memory store: release %q: %w", resource, notHolder(resource, l, now))
	}
	delete(s.leases, resource)
	s.hub.Wake(resource)
	return nil
}

// Get implements driver.Store.
func (s *Store) Get(ctx context.Context, resource string) (driver.Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return driver.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	l := s.live(resource, now)
	if l == nil {
		return driver.Record{}, fmt.Errorf("memory store: %q: %w", resource, driver.ErrNotHeld)
	}
	return record(resource, l, now), nil
}

// List implements driver.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	var out []driver.Record
	for r := range s.leases {
		if l := s.live(r, now); l != nil && strings.HasPrefix(r, prefix) {
			out = append(out, record(r, l, now))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out, nil
}

// Subscribe implements driver.Notifier: a release of resource wakes the
// subscriber that has waited longest (driver.Hub).
func (s *Store) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.hub.Subscribe(ctx, resource, 0)
}

// Watch implements driver.Watcher: every release of resource wakes the
// watcher.
func (s *Store) Watch(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.hub.Watch(ctx, resource, 0)
}

// Close makes later operations fail. It is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}
