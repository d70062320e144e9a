package harness

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

// sharedOwnerStore restores, for the store, the behaviour of tenure before
// every acquire was a grant of its own: it gives the store one owner string
// per Locker (the grant's owner string without its ".N"), so that the store
// renews a live earlier grant for a later acquire of the same Locker (the
// later grant adopts it, with its token), and a late renew or release of the
// earlier grant acts on the later one. It maps answers back to the grant
// that asked. The harness's -shared-owner switch uses it to show that the
// checker catches that behaviour.
type sharedOwnerStore struct {
	inner driver.Store
}

// lockerOwner returns the Locker's owner string of a grant's ("id#nonce.N"
// → "id#nonce"); other owner strings (a semaphore's marker) are unchanged.
func lockerOwner(owner string) string {
	i := strings.LastIndex(owner, naming.OwnerSeparator)
	j := strings.LastIndexByte(owner, '.')
	if i < 0 || j < i {
		return owner
	}
	return owner[:j]
}

func (s sharedOwnerStore) back(owner string, err error) error {
	var held *tenure.HeldError
	if errors.As(err, &held) && held.Holder.Owner == lockerOwner(owner) {
		held.Holder.Owner = owner
	}
	return err
}

func (s sharedOwnerStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (tenure.Record, error) {
	rec, err := s.inner.Acquire(ctx, resource, lockerOwner(owner), ttl)
	if err == nil && rec.Owner == lockerOwner(owner) {
		rec.Owner = owner
	}
	return rec, s.back(owner, err)
}

func (s sharedOwnerStore) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	return s.back(owner, s.inner.Renew(ctx, resource, lockerOwner(owner), token, ttl))
}

func (s sharedOwnerStore) Release(ctx context.Context, resource, owner string, token uint64) error {
	return s.back(owner, s.inner.Release(ctx, resource, lockerOwner(owner), token))
}

func (s sharedOwnerStore) Get(ctx context.Context, resource string) (tenure.Record, error) {
	return s.inner.Get(ctx, resource)
}

func (s sharedOwnerStore) List(ctx context.Context, prefix string) ([]tenure.Record, error) {
	return s.inner.List(ctx, prefix)
}

func (s sharedOwnerStore) Close() error { return s.inner.Close() }

type sharedOwnerNotifier struct {
	sharedOwnerStore
	n driver.Notifier
}

func (s sharedOwnerNotifier) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.n.Subscribe(ctx, resource)
}

func withSharedOwner(st driver.Store) driver.Store {
	s := sharedOwnerStore{st}
	if n, ok := st.(driver.Notifier); ok {
		return sharedOwnerNotifier{s, n}
	}
	return s
}
