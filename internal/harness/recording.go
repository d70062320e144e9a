package harness

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// RecordingStore wraps the store a worker's Locker uses and records every
// call: a call event with the time taken right before the request is sent,
// and a return event with the time taken right after the answer arrived and
// the result (granted, held, renewed, released, lost, got, notheld, unknown
// or error). A process killed during a call leaves a call without a return.
type RecordingStore struct {
	inner driver.Store
	rec   *Recorder

	mu        sync.Mutex
	lastGrant map[string]Event // per resource: the return event of the last granted Acquire, with Send set
}

// NewRecordingStore wraps inner. When inner is a driver.Notifier, so is the
// result, and a driver.Watcher when inner is one.
func NewRecordingStore(inner driver.Store, rec *Recorder) driver.Store {
	s := &RecordingStore{inner: inner, rec: rec, lastGrant: map[string]Event{}}
	if n, ok := inner.(driver.Notifier); ok {
		if w, ok := inner.(driver.Watcher); ok {
			return &recordingWatcher{recordingNotifier: &recordingNotifier{RecordingStore: s, n: n}, w: w}
		}
		return &recordingNotifier{RecordingStore: s, n: n}
	}
	if r, ok := inner.(driver.Reserver); ok {
		return &recordingReserver{RecordingStore: s, r: r}
	}
	return s
}

// recordingWatcher passes Watch through: a shared/exclusive lock's
// exclusive request watches the shared holders' leases.
type recordingWatcher struct {
	*recordingNotifier
	w driver.Watcher
}

func (s *recordingWatcher) Watch(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.w.Watch(ctx, resource)
}

// recordingReserver is a RecordingStore of a driver.Reserver: a waiting
// acquire is recorded as an acquire; Unreserve, which changes no lease,
// is not recorded.
type recordingReserver struct {
	*RecordingStore
	r driver.Reserver
}

func (s *recordingReserver) AcquireWaiting(ctx context.Context, resource, owner, waiter string, ttl, wait time.Duration) (tenure.Record, error) {
	return s.acquire(resource, owner, ttl, func() (tenure.Record, error) {
		return s.r.AcquireWaiting(ctx, resource, owner, waiter, ttl, wait)
	})
}

func (s *recordingReserver) Unreserve(ctx context.Context, resource, waiter string) error {
	return s.r.Unreserve(ctx, resource, waiter)
}

type recordingNotifier struct {
	*RecordingStore
	n driver.Notifier
}

func (s *recordingNotifier) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.n.Subscribe(ctx, resource)
}

// LastGrant returns the send and reply times, the owner string and the
// token of the last Acquire call of resource that the store answered with a
// grant.
func LastGrant(s driver.Store, resource string) (send, reply int64, owner string, token uint64) {
	var rs *RecordingStore
	switch v := s.(type) {
	case *RecordingStore:
		rs = v
	case *recordingNotifier:
		rs = v.RecordingStore
	case *recordingWatcher:
		rs = v.RecordingStore
	case *recordingReserver:
		rs = v.RecordingStore
	default:
		return 0, 0, "", 0
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	g := rs.lastGrant[resource]
	return g.Send, g.T, g.Holder, g.Token
}

func (s *RecordingStore) call(op, resource, owner string, token uint64, ttl time.Duration) (int64, int64) {
	id := s.rec.newID()
	t := MonoNow()
	s.rec.Record(Event{Ev: EvCall, T: t, ID: id, Op: op, Resource: resource, Owner: owner, Token: token, TTL: int64(ttl)})
	return id, t
}

func classify(err error, ok string) (string, string) {
	switch {
	case err == nil:
		return ok, ""
	case errors.Is(err, tenure.ErrUnknownOutcome):
		return ResUnknown, err.Error()
	case errors.Is(err, tenure.ErrLeaseLost):
		return ResLost, err.Error()
	case errors.Is(err, tenure.ErrNotHeld):
		return ResNotHeld, ""
	}
	var held *tenure.HeldError
	if errors.As(err, &held) {
		if held.Reserved {
			return ResReserved, ""
		}
		return ResHeld, ""
	}
	return ResError, err.Error()
}

// Acquire implements driver.Store.
func (s *RecordingStore) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (tenure.Record, error) {
	return s.acquire(resource, owner, ttl, func() (tenure.Record, error) { return s.inner.Acquire(ctx, resource, owner, ttl) })
}

// acquire records one acquire, which call makes.
func (s *RecordingStore) acquire(resource, owner string, ttl time.Duration, call func() (tenure.Record, error)) (tenure.Record, error) {
	id, send := s.call(OpAcquire, resource, owner, 0, ttl)
	rec, err := call()
	e := Event{Ev: EvReturn, T: MonoNow(), ID: id}
	e.Res, e.Err = classify(err, ResGranted)
	switch e.Res {
	case ResGranted:
		e.Token = rec.Token
		e.Holder = rec.Owner
	case ResHeld, ResReserved:
		var held *tenure.HeldError
		errors.As(err, &held)
		e.Holder, e.HolderToken = held.Holder.Owner, held.Holder.Token
	}
	s.rec.Record(e)
	if e.Res == ResGranted {
		g := e
		g.Send = send
		s.mu.Lock()
		s.lastGrant[resource] = g
		s.mu.Unlock()
	}
	return rec, err
}

// Renew implements driver.Store.
func (s *RecordingStore) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	id, _ := s.call(OpRenew, resource, owner, token, ttl)
	err := s.inner.Renew(ctx, resource, owner, token, ttl)
	e := Event{Ev: EvReturn, T: MonoNow(), ID: id}
	e.Res, e.Err = classify(err, ResRenewed)
	s.rec.Record(e)
	return err
}

// Release implements driver.Store.
func (s *RecordingStore) Release(ctx context.Context, resource, owner string, token uint64) error {
	id, _ := s.call(OpRelease, resource, owner, token, 0)
	err := s.inner.Release(ctx, resource, owner, token)
	e := Event{Ev: EvReturn, T: MonoNow(), ID: id}
	e.Res, e.Err = classify(err, ResReleased)
	s.rec.Record(e)
	return err
}

// Keep implements driver.Keeper when the inner store does (every store of
// this module); otherwise it fails without I/O.
func (s *RecordingStore) Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error {
	k, ok := s.inner.(driver.Keeper)
	if !ok {
		return errors.New("harness: the store does not implement driver.Keeper")
	}
	id := s.rec.newID()
	s.rec.Record(Event{Ev: EvCall, T: MonoNow(), ID: id, Op: OpKeep, Resource: resource, Owner: owner, Token: token, TTL: int64(ttl), Keeper: keeper})
	err := k.Keep(ctx, resource, owner, token, keeper, ttl)
	e := Event{Ev: EvReturn, T: MonoNow(), ID: id}
	e.Res, e.Err = classify(err, ResKept)
	s.rec.Record(e)
	return err
}

// withoutKeeper hides driver.Keeper from the Locker, which then makes
// Lease.ReleaseAfter one renewal with the hold's TTL, as tenure did before
// Keep: a renewal of the grant delivered late cuts such a hold back to the
// lease's TTL. The harness's -hold-by-renew switch uses it to show that the
// checker catches that behaviour.
func withoutKeeper(s driver.Store) driver.Store {
	nk := noKeeper{s}
	if n, ok := s.(driver.Notifier); ok {
		return noKeeperNotifier{nk, n}
	}
	return nk
}

type noKeeper struct{ driver.Store }

func (s noKeeper) CheckTTL(ttl time.Duration) error {
	if c, ok := s.Store.(driver.TTLChecker); ok {
		return c.CheckTTL(ttl)
	}
	return driver.ValidateTTL(ttl)
}

type noKeeperNotifier struct {
	noKeeper
	n driver.Notifier
}

func (s noKeeperNotifier) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.n.Subscribe(ctx, resource)
}

// Get implements driver.Store.
func (s *RecordingStore) Get(ctx context.Context, resource string) (tenure.Record, error) {
	id, _ := s.call(OpGet, resource, "", 0, 0)
	rec, err := s.inner.Get(ctx, resource)
	e := Event{Ev: EvReturn, T: MonoNow(), ID: id}
	e.Res, e.Err = classify(err, ResGot)
	if e.Res == ResGot {
		e.Holder, e.HolderToken = rec.Owner, rec.Token
	}
	s.rec.Record(e)
	return rec, err
}

// List implements driver.Store. It is not recorded: the checker's model
// covers point operations (a semaphore's and a shared/exclusive lock's
// acquires list; the checks of those invariants use the grants).
func (s *RecordingStore) List(ctx context.Context, prefix string) ([]tenure.Record, error) {
	return s.inner.List(ctx, prefix)
}

// Close implements driver.Store.
func (s *RecordingStore) Close() error { return s.inner.Close() }

// CheckTTL implements driver.TTLChecker: the inner store's check, or the
// plain one when it has none.
func (s *RecordingStore) CheckTTL(ttl time.Duration) error {
	if c, ok := s.inner.(driver.TTLChecker); ok {
		return c.CheckTTL(ttl)
	}
	return driver.ValidateTTL(ttl)
}
