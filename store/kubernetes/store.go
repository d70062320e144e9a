package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/backoff"
)

// Store is a driver.Store on the Lease objects of one namespace. It is safe
// for concurrent use.
type Store struct {
	leases    coordclient.LeaseInterface
	namespace string
	host      string
	clock     clock.Clock
	obs       *observations
	transport *http.Transport
	fieldMgr  string
	hub       driver.Hub
	wait      time.Duration // how long Subscribe waits for the watch

	mu     sync.Mutex
	grants map[string]*coordinationv1.Lease // by resource: the object as this Store last wrote or read it for a grant it holds

	closed atomic.Bool
}

var (
	_ driver.Store      = (*Store)(nil)
	_ driver.Notifier   = (*Store)(nil)
	_ driver.Watcher    = (*Store)(nil)
	_ driver.Keeper     = (*Store)(nil)
	_ driver.TTLChecker = (*Store)(nil)
)

// Open connects to the API server that cfg names and checks, within the
// dial timeout and ctx, that it answers a list of Leases in the namespace
// (which the store's Role allows). It creates nothing. Errors: a bad
// configuration, ErrNotInCluster, or the API server's refusal (wrapped).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	rc, ns, err := cfg.restConfig()
	if err != nil {
		return nil, err
	}
	if errs := validationNamespace(ns); errs != nil {
		return nil, errs
	}
	if rc.QPS == 0 && rc.RateLimiter == nil {
		rc.QPS = -1 // no client-side rate limit
	}
	rc.UserAgent = "tenure"
	if cfg.Identity != "" {
		rc.UserAgent = cfg.Identity
	}
	hc, tr, err := httpClient(rc, cfg.DialTimeout)
	if err != nil {
		return nil, err
	}
	cs, err := coordclient.NewForConfigAndClient(rc, hc)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("kubernetes store: client: %w", err)
	}
	s := &Store{
		leases:    cs.Leases(ns),
		namespace: ns,
		host:      rc.Host,
		clock:     cfg.Clock,
		obs:       newObservations(cfg.Clock),
		transport: tr,
		fieldMgr:  "tenure",
		wait:      cfg.DialTimeout,
		grants:    map[string]*coordinationv1.Lease{},
	}
	s.hub.Listen = s.listen
	octx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := s.leases.List(octx, metav1.ListOptions{Limit: 1}); err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("kubernetes store: listing Leases in namespace %q at %s: %w", ns, rc.Host, err)
	}
	return s, nil
}

func validationNamespace(ns string) error {
	return Config{Namespace: ns}.check()
}

// OpenURL opens a Store from a kubernetes: URL (see ParseURL and Open).
func OpenURL(ctx context.Context, raw string) (*Store, error) {
	return driver.OpenURL(ctx, raw, ParseURL, Open)
}

// Namespace returns the namespace of the Store's Lease objects.
func (s *Store) Namespace() string { return s.namespace }

// CheckTTL implements driver.TTLChecker.
func (s *Store) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// Close stops the Store's watch and closes its idle connections. It does not
// release leases. Later calls return an error matching
// driver.ErrStoreUnusable.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.hub.Close()
	s.transport.CloseIdleConnections()
	return nil
}

var errClosed = fmt.Errorf("kubernetes store: closed: %w", driver.ErrStoreUnusable)

func (s *Store) usable() error {
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

// maxAttempts bounds the read-and-write rounds of one operation that meets
// concurrent writes (update conflicts). After a conflict the operation
// waits as backoff.Passed says, so that Stores writing one Lease at once
// (every holder of a semaphore renews its marker with an acquire) spread
// out instead of conflicting again.
const maxAttempts = 10

// backOff waits after the attempt-th (from 0) update that met a conflict,
// or until ctx ends (an error; nothing of the operation was applied).
func backOff(ctx context.Context, attempt int) error {
	if err := backoff.Passed.Wait(ctx, attempt); err != nil {
		return fmt.Errorf("kubernetes store: %w", err)
	}
	return nil
}

// get reads the Lease of resource: the object (nil when there is none), and
// how long this Store has seen it at its resourceVersion. An object that
// belongs to another resource (a name collision) is an error.
func (s *Store) get(ctx context.Context, resource string) (*coordinationv1.Lease, time.Duration, error) {
	name, _ := leaseName(resource)
	obj, err := s.leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s.obs.forget(name)
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, s.readErr("reading Lease "+name, err)
	}
	if err := belongs(obj, resource); err != nil {
		return nil, 0, err
	}
	return obj, s.obs.seen(name, obj.ResourceVersion, parseLease(obj).dur), nil
}

// belongs checks that obj keeps resource.
func belongs(obj *coordinationv1.Lease, resource string) error {
	if r := resourceOf(obj); r != resource {
		return fmt.Errorf("kubernetes store: Lease %s/%s keeps resource %q, not %q (a name collision; see LeaseName)", obj.Namespace, obj.Name, r, resource)
	}
	return nil
}

// resourceOf is the tenure resource that obj keeps.
func resourceOf(obj *coordinationv1.Lease) string {
	if r, ok := obj.Annotations[AnnotationResource]; ok {
		return r
	}
	if _, literal := leaseName(obj.Name); !literal {
		return "" // not a tenure name: keeps nothing
	}
	return obj.Name
}

// floor returns the current resourceVersion of Leases as a number: a list
// is a consistent read, so it is at least the resourceVersion of every
// write that completed before it, deletions included.
func (s *Store) floor(ctx context.Context, name string) (uint64, *coordinationv1.Lease, error) {
	l, err := s.leases.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		return 0, nil, s.readErr("listing Lease "+name, err)
	}
	rv, err := rvNumber(l.ResourceVersion)
	if err != nil {
		return 0, nil, err
	}
	var obj *coordinationv1.Lease
	if len(l.Items) > 0 {
		obj = &l.Items[0]
	}
	return rv, obj, nil
}

// rvNumber parses a resourceVersion.
func rvNumber(rv string) (uint64, error) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("kubernetes store: resourceVersion %q is not a positive 64-bit integer; fencing tokens need the comparable resource versions of etcd-backed API servers", rv)
	}
	return n, nil
}

// nextToken returns the token of a new grant of obj's resource: above the
// last tenure token kept in the object, and above floor, the
// resourceVersion of the state the grant replaces (or of a list, for a
// new object). See the package documentation for why it strictly
// increases.
func nextToken(l lease, floor uint64) uint64 {
	return max(l.token+1, floor+1)
}

// Acquire implements driver.Store.Acquire.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	if err := s.usable(); err != nil {
		return driver.Record{}, err
	}
	name, _ := leaseName(resource)
	var last lease
	conflict := false // the round before met another write
	for attempt := range maxAttempts {
		if conflict {
			if err := backOff(ctx, attempt-1); err != nil {
				return driver.Record{}, err
			}
			conflict = false
		}
		obj, seen, err := s.get(ctx, resource)
		if err != nil {
			return driver.Record{}, err
		}
		if obj == nil {
			// No object: create one, with a token above the list's
			// resourceVersion (above every grant before a deletion).
			rv, found, err := s.floor(ctx, name)
			if err != nil {
				return driver.Record{}, err
			}
			if found != nil {
				continue // created meanwhile: read it
			}
			obj = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.namespace}}
			tok := nextToken(lease{}, rv)
			grantSpec(obj, resource, owner, tok, ttl, time.Now(), false)
			got, err := s.leases.Create(ctx, obj, metav1.CreateOptions{FieldManager: s.fieldMgr})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return driver.Record{}, s.writeErr("creating Lease "+name, err)
			}
			return s.granted(resource, owner, got), nil
		}
		l := parseLease(obj)
		last = l
		switch {
		case l.ours(owner) && !expired(l, seen):
			// A retry of the same grant (or a semaphore's marker): renew it.
			w := writable(obj)
			renewSpec(w, ttl, time.Now())
			got, err := s.leases.Update(ctx, w, metav1.UpdateOptions{FieldManager: s.fieldMgr})
			if apierrors.IsConflict(err) {
				conflict = true
				continue
			}
			if err != nil {
				return driver.Record{}, s.writeErr("renewing Lease "+name, err)
			}
			return s.granted(resource, owner, got), nil
		case l.held() && !expired(l, seen):
			return driver.Record{}, &driver.HeldError{Holder: l.record(resource, l.dur-seen)}
		}
		// Free (released, or seen unchanged for its duration): take it over,
		// conditioned on the resourceVersion read.
		rv, err := rvNumber(obj.ResourceVersion)
		if err != nil {
			return driver.Record{}, err
		}
		w := writable(obj)
		grantSpec(w, resource, owner, nextToken(l, rv), ttl, time.Now(), true)
		got, err := s.leases.Update(ctx, w, metav1.UpdateOptions{FieldManager: s.fieldMgr})
		if apierrors.IsConflict(err) {
			conflict = true
			continue
		}
		if apierrors.IsNotFound(err) {
			continue // deleted meanwhile
		}
		if err != nil {
			return driver.Record{}, s.writeErr("acquiring Lease "+name, err)
		}
		return s.granted(resource, owner, got), nil
	}
	// Others kept writing the object: report what was seen last.
	if last.held() && last.holder == owner {
		// Writes of this owner string (a shared one) met each other every
		// time: nothing of this call was applied, and the caller may retry.
		return driver.Record{}, fmt.Errorf("kubernetes store: acquire %q: the Lease changed under each of %d attempts; nothing was written", resource, maxAttempts)
	}
	if last.held() && last.holder != owner {
		return driver.Record{}, &driver.HeldError{Holder: last.record(resource, 0)}
	}
	return driver.Record{}, &driver.HeldError{Holder: driver.Record{Resource: resource}}
}

// expired reports whether this Store has seen l unchanged for its
// leaseDurationSeconds. A record without one expires at once, as client-go
// reads it.
func expired(l lease, seen time.Duration) bool {
	return seen >= l.dur
}

// granted records the object of a grant this Store wrote and returns its
// record.
func (s *Store) granted(resource, owner string, obj *coordinationv1.Lease) driver.Record {
	l := parseLease(obj)
	s.obs.seen(obj.Name, obj.ResourceVersion, l.dur)
	s.mu.Lock()
	s.grants[resource] = obj
	s.mu.Unlock()
	return driver.Record{Resource: resource, Owner: owner, Token: l.token, TTL: l.dur, Remaining: l.dur}
}

// writable returns a copy of obj to send in an update: conditioned on its
// resourceVersion, with managedFields left as the server keeps them.
func writable(obj *coordinationv1.Lease) *coordinationv1.Lease {
	w := obj.DeepCopy()
	w.ManagedFields = nil
	return w
}

// cached returns the object this Store last saw for the grant, if any.
func (s *Store) cached(resource, owner string, token uint64) *coordinationv1.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj := s.grants[resource]
	if obj == nil || !parseLease(obj).grantOf(owner, token) {
		return nil
	}
	return obj
}

func (s *Store) forgetGrant(resource string, obj *coordinationv1.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.grants[resource]; cur != nil && (obj == nil || cur.ResourceVersion == obj.ResourceVersion || cur == obj) {
		delete(s.grants, resource)
	}
}

// change applies edit to the live lease of the grant (owner, token) as one
// update conditioned on the resourceVersion this Store last saw (usually
// its own last write, so one request), reading the object again only when
// that condition fails. When the grant does not hold the resource it
// returns driver.NotHolder, naming the holder where there is one. keep
// says whether the grant still holds the resource after the change (a
// renewal), to keep its object.
func (s *Store) change(ctx context.Context, what, resource, owner string, token uint64, keep bool, edit func(*coordinationv1.Lease)) error {
	name, _ := leaseName(resource)
	obj := s.cached(resource, owner, token)
	if obj != nil {
		// This Store's own count: a grant it has seen unchanged for its
		// duration is over, whether or not anyone took it over.
		if seen, ok := s.obs.elapsed(name, obj.ResourceVersion); ok && expired(parseLease(obj), seen) {
			s.forgetGrant(resource, nil)
			return fmt.Errorf("kubernetes store: %s %q: unchanged for its duration since this Store's last write: %w", what, resource, driver.NotHolder(nil))
		}
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if obj == nil {
			cur, seen, err := s.get(ctx, resource)
			if err != nil {
				return err
			}
			if cur == nil {
				s.forgetGrant(resource, nil)
				return fmt.Errorf("kubernetes store: %s %q: %w", what, resource, driver.NotHolder(nil))
			}
			if l := parseLease(cur); !l.grantOf(owner, token) || expired(l, seen) {
				s.forgetGrant(resource, nil)
				var holder *driver.Record
				if l.held() && !l.grantOf(owner, token) && !expired(l, seen) {
					rec := l.record(resource, l.dur-seen)
					holder = &rec
				}
				return fmt.Errorf("kubernetes store: %s %q: %w", what, resource, driver.NotHolder(holder))
			}
			obj = cur
		}
		w := writable(obj)
		edit(w)
		got, err := s.leases.Update(ctx, w, metav1.UpdateOptions{FieldManager: s.fieldMgr})
		switch {
		case err == nil:
			s.obs.seen(name, got.ResourceVersion, parseLease(got).dur)
			if keep {
				s.mu.Lock()
				s.grants[resource] = got
				s.mu.Unlock()
			} else {
				s.forgetGrant(resource, nil)
			}
			return nil
		case apierrors.IsConflict(err), apierrors.IsNotFound(err):
			obj = nil // read it again
			if attempt+1 < maxAttempts {
				if err := backOff(ctx, attempt); err != nil {
					return err
				}
			}
		default:
			return s.writeErr(what+" Lease "+name, err)
		}
	}
	// Every update was refused (409) and every read found the grant still
	// holding the Lease: nothing was applied, and the caller may retry.
	return fmt.Errorf("kubernetes store: %s %q: the Lease changed under each of %d attempts; nothing was written", what, resource, maxAttempts)
}

// Renew implements driver.Store.Renew: one update of the Lease (renewTime,
// leaseDurationSeconds), conditioned on the resourceVersion of this
// Store's last write of the grant.
func (s *Store) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	if err := s.usable(); err != nil {
		return err
	}
	return s.change(ctx, "renewing", resource, owner, token, true, func(w *coordinationv1.Lease) {
		renewSpec(w, ttl, time.Now())
	})
}

// Release implements driver.Store.Release: the Lease is kept, with no
// holder, as client-go's leader election releases it, so that its
// leaseTransitions and the last fencing token stay with it.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	if err := s.usable(); err != nil {
		return err
	}
	return s.change(ctx, "releasing", resource, owner, token, false, func(w *coordinationv1.Lease) {
		releaseSpec(w, token, time.Now())
	})
}

// Keep implements driver.Keeper: the grant's Lease is handed to keeper
// with the same token and leaseDurationSeconds ceil(ttl), in one update
// conditioned on the grant's last write.
func (s *Store) Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error {
	if err := ttls.ValidateKeep(resource, owner, keeper, ttl); err != nil {
		return err
	}
	if err := s.usable(); err != nil {
		return err
	}
	return s.change(ctx, "keeping", resource, owner, token, false, func(w *coordinationv1.Lease) {
		keepSpec(w, keeper, token, ttl, time.Now())
	})
}

// Get implements driver.Store.Get: the holder, unless the Lease has no
// holder or this Store has seen it unchanged for its duration.
// Remaining is the time left until this Store would take it over.
func (s *Store) Get(ctx context.Context, resource string) (driver.Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return driver.Record{}, err
	}
	if err := s.usable(); err != nil {
		return driver.Record{}, err
	}
	obj, seen, err := s.get(ctx, resource)
	if err != nil {
		return driver.Record{}, err
	}
	if obj == nil {
		return driver.Record{}, fmt.Errorf("kubernetes store: %q: %w", resource, driver.ErrNotHeld)
	}
	l := parseLease(obj)
	if !l.held() || expired(l, seen) {
		return driver.Record{}, fmt.Errorf("kubernetes store: %q: %w", resource, driver.ErrNotHeld)
	}
	return l.record(resource, l.dur-seen), nil
}

// listPage is the page size of List.
const listPage = 500

// List implements driver.Store.List: every Lease of the namespace whose
// resource starts with prefix and that is held (as Get decides), sorted by
// resource. Leases that client-go's leader election holds are listed with
// token 0.
func (s *Store) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	var out []driver.Record
	opts := metav1.ListOptions{Limit: listPage}
	for {
		page, err := s.leases.List(ctx, opts)
		if err != nil {
			return nil, s.readErr("listing Leases", err)
		}
		for i := range page.Items {
			obj := &page.Items[i]
			r := resourceOf(obj)
			if r == "" || !strings.HasPrefix(r, prefix) {
				continue
			}
			l := parseLease(obj)
			seen := s.obs.seen(obj.Name, obj.ResourceVersion, l.dur)
			if !l.held() || expired(l, seen) {
				continue
			}
			out = append(out, l.record(r, l.dur-seen))
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out, nil
}

// readErr wraps the error of a read.
func (s *Store) readErr(what string, err error) error {
	if err := s.usable(); err != nil {
		return err
	}
	return fmt.Errorf("kubernetes store: %s: %w", what, err)
}

// writeErr wraps the error of a write: an answer of the API server that
// says the write was not applied is definite; a lost answer (a timeout, a
// broken connection, the context ending while the request was out), or an
// API server that timed out or failed inside (its write to etcd may still
// apply) is an unknown outcome.
func (s *Store) writeErr(what string, err error) error {
	wrapped := fmt.Errorf("kubernetes store: %s: %w", what, err)
	if definite(err) {
		return wrapped
	}
	return driver.UnknownOutcome(wrapped)
}

// definite reports whether a write's error says that it was not applied.
func definite(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		switch status.Status().Code {
		case http.StatusInternalServerError, http.StatusGatewayTimeout, http.StatusServiceUnavailable, http.StatusBadGateway:
			// The server may have sent the write to etcd and timed out
			// waiting (StatusReasonTimeout, "etcdserver: request timed out").
			return false
		}
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true // nothing was sent
	}
	return false
}
