// Package etcd is a driver.Store on etcd, through go.etcd.io/etcd/client/v3
// (client v3.6, tested against etcd server 3.4.23 as Debian ships it; the v3
// gRPC API it uses exists unchanged since etcd 3.3).
//
// # Keys, leases and tokens
//
// A resource R is the key PREFIX+R (default prefix "/tenure/leases/"), whose
// value is the holder's owner string and which is attached to an etcd lease
// of its own: etcd deletes the key when that lease expires or is revoked.
//
//   - Acquire grants an etcd lease, then runs one transaction: if the key
//     does not exist (create_revision = 0), put it with that lease; else read
//     it. The fencing token is the key's create_revision: the cluster-wide
//     revision of the transaction that created it. Revisions only grow, and
//     are kept in etcd's raft log and database, so tokens strictly increase
//     across release, expiry and restarts of clients and servers (they start
//     over only if the cluster's data is wiped, like any store's).
//   - Renew sends one keep-alive for the key's etcd lease (etcd refuses to
//     renew an expired lease, even one not yet revoked), then checks in a
//     transaction that the key still holds this owner, token and lease; a
//     keep-alive of a lease that no longer carries the key proves nothing.
//     A renewal with a longer TTL than the lease's moves the key to a new
//     etcd lease in a transaction conditioned on owner, token and the old
//     lease.
//   - Release deletes the key in a transaction conditioned on owner and
//     token, then revokes the etcd lease.
//
// # TTLs
//
// etcd leases have whole-second TTLs. A TTL below one second is
// ErrInvalidTTL; others are rounded up to whole seconds for etcd, so the
// store keeps a lease at least the requested time (the holder's local
// deadline still uses the requested TTL). etcd also raises a lease's TTL to
// its minimum, 1.5 × the election timeout rounded up (2 s with the default
// 1 s election timeout), and checks for expired leases every 500 ms, so a
// lease whose holder vanished disappears between TTL' and TTL'+0.5 s after
// its last renewal, where TTL' = max(ceil(TTL), etcd's minimum). Measured
// on etcd 3.4.23 with default settings: a 1 s and a 2 s lease both vanished
// after 2.0 to 2.5 s, a 3 s lease after 3.0 to 3.5 s. A leader change (or a
// restart of a single member) extends every lease by its full TTL: leases
// then live longer, never shorter.
//
// # Notifications
//
// The Store implements driver.Notifier with an etcd watch on the key, from
// the revision the subscription read, so that no release or expiry after
// Subscribe returns is missed. The etcd client multiplexes all watches of a
// Store on one gRPC stream.
package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-go/tenure/driver"
)

// Defaults.
const (
	// DefaultPrefix starts every key.
	DefaultPrefix = "/tenure/leases/"
	// DefaultDialTimeout bounds connecting.
	DefaultDialTimeout = 5 * time.Second
)

// MaxTTL is the longest TTL the store accepts: etcd's limit of 9,000,000,000
// seconds.
const MaxTTL = 9_000_000_000 * time.Second

// ttls is the range of TTLs the store keeps: whole seconds from 1 s to
// MaxTTL (others are rounded up).
var ttls = driver.TTLRange{Min: time.Second, Max: MaxTTL, Why: "etcd's TTLs are whole seconds"}

// CheckTTL returns an error wrapping driver.ErrInvalidTTL for a TTL that a
// store opened with c cannot keep (below 1 s or above MaxTTL), without I/O.
func (c Config) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// CheckTTL implements driver.TTLChecker, so a Locker rejects a TTL this
// store cannot keep before any I/O.
func (s *Store) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// Config configures a Store.
type Config struct {
	// Client is etcd's client configuration (endpoints, TLS, user name and
	// password, timeouts). Endpoints are required. A zero DialTimeout becomes
	// DefaultDialTimeout; a nil Logger discards the client's logs.
	Client clientv3.Config

	// Prefix starts every key. Default DefaultPrefix. Stores that share
	// leases must share the prefix.
	Prefix string
}

// Store is a driver.Store and driver.Notifier on etcd. It is safe for
// concurrent use.
type Store struct {
	cli    *clientv3.Client
	prefix string
}

// Open connects to etcd and checks that the cluster answers a linearizable
// read, within the dial timeout (and ctx). Bad configuration returns an
// error before any I/O.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Client.Endpoints) == 0 {
		return nil, errors.New("etcd store: no endpoints")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	cc := cfg.Client
	if cc.DialTimeout == 0 {
		cc.DialTimeout = DefaultDialTimeout
	}
	if cc.DialKeepAliveTime == 0 {
		cc.DialKeepAliveTime = 10 * time.Second
		cc.DialKeepAliveTimeout = 5 * time.Second
	}
	if cc.Logger == nil {
		cc.Logger = zap.NewNop()
	}
	cctx, cancel := context.WithTimeout(ctx, cc.DialTimeout)
	defer cancel()
	cc.Context = nil
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, connectErr(cc, err)
	}
	if _, err := cli.Get(cctx, cfg.Prefix, clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, connectErr(cc, err)
	}
	return &Store{cli: cli, prefix: cfg.Prefix}, nil
}

// connectErr describes a failure to connect. The etcd client retries a
// failed TLS handshake until its deadline and then reports only "context
// deadline exceeded", which reads like an unreachable server; so when TLS is
// on and the error is a timeout or unavailability, one TLS handshake per
// endpoint (bounded by a second in all) finds the certificate problem (an
// unknown CA, a wrong name, a client certificate refused) and the error
// wraps it too.
func connectErr(cc clientv3.Config, err error) error {
	err = fmt.Errorf("etcd store: connect %s: %w", strings.Join(cc.Endpoints, ","), err)
	c := code(err)
	if cc.TLS == nil || (c != codes.DeadlineExceeded && c != codes.Unavailable && !errors.Is(err, context.DeadlineExceeded)) {
		return err
	}
	deadline := time.Now().Add(min(time.Second, cc.DialTimeout))
	for _, ep := range cc.Endpoints {
		if herr := handshake(ep, cc.TLS, deadline); herr != nil {
			return fmt.Errorf("%w (TLS handshake with %s: %w)", err, ep, herr)
		}
	}
	return err
}

// handshake makes a TLS connection to endpoint host:port (or
// https://host:port) as the client would, and waits for the server's first
// bytes until deadline: with TLS 1.3 a server that refuses the client's
// certificate says so only after the client's side of the handshake. It
// returns the TLS error, or nil when the handshake worked or the endpoint
// could not be reached at all (that is not a TLS problem).
func handshake(endpoint string, tc *tls.Config, deadline time.Time) error {
	if _, rest, ok := strings.Cut(endpoint, "://"); ok {
		endpoint = rest
	}
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return nil
	}
	conn, err := net.DialTimeout("tcp", endpoint, time.Until(deadline))
	if err != nil {
		return nil
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	tc = tc.Clone()
	if tc.ServerName == "" {
		tc.ServerName = host // as gRPC does, from the endpoint
	}
	tc.NextProtos = []string{"h2"}
	tlsConn := tls.Client(conn, tc)
	if err := tlsConn.Handshake(); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	}
	if _, err := tlsConn.Read(make([]byte, 1)); err != nil {
		var rec tls.RecordHeaderError
		if errors.As(err, &rec) || strings.Contains(err.Error(), "tls: ") {
			return err
		}
	}
	return nil
}

// Client returns the store's etcd client (for tests and diagnostics).
func (s *Store) Client() *clientv3.Client { return s.cli }

// Close closes the client, ending subscriptions. It does not release
// leases.
func (s *Store) Close() error { return s.cli.Close() }

func (s *Store) key(resource string) string { return s.prefix + resource }

// seconds returns ttl in whole seconds, rounded up, or ErrInvalidTTL.
func seconds(ttl time.Duration) (int64, error) {
	if err := ttls.CheckTTL(ttl); err != nil {
		return 0, err
	}
	return int64((ttl + time.Second - 1) / time.Second), nil
}

func code(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return codes.Unknown
}

// definite reports an error after which the request was certainly not
// applied: etcd refused it.
func definite(err error) bool {
	switch code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.PermissionDenied,
		codes.Unauthenticated, codes.AlreadyExists, codes.OutOfRange, codes.ResourceExhausted, codes.Unimplemented:
		return true
	}
	return false
}

// writeErr classifies the error of a transaction that may change a key: a
// refusal by etcd is definite; anything else (a timeout, a lost
// connection, "request timed out" during a leader change) leaves the outcome
// unknown.
func writeErr(op, resource string, err error) error {
	e := fmt.Errorf("etcd store: %s %q: %w", op, resource, err)
	if definite(err) {
		return e
	}
	return driver.UnknownOutcome(e)
}

func lost(op, resource string) error {
	return fmt.Errorf("etcd store: %s %q: no live lease with this owner and token: %w", op, resource, driver.ErrLeaseLost)
}

// revoke revokes an etcd lease that holds no key of ours any more, or an
// unused one, best effort: if it fails, the lease expires by its TTL.
func (s *Store) revoke(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_, _ = s.cli.Revoke(rctx, id)
}

// Acquire implements driver.Store. The TTL is rounded up to whole seconds
// (below one second: ErrInvalidTTL, before any I/O). It returns a
// *driver.HeldError naming the holder, with the time left on its etcd lease
// (whole seconds, as etcd reports it), when another owner holds the
// resource. When the caller already holds it, its lease is renewed (the
// same token). The etcd lease granted before the transaction is revoked
// when the transaction does not use it; if that fails it expires by its TTL.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := driver.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	secs, err := seconds(ttl)
	if err != nil {
		return driver.Record{}, err
	}
	key := s.key(resource)
	for attempt := 0; ; attempt++ {
		g, err := s.cli.Grant(ctx, secs)
		if err != nil {
			// An etcd lease without a key changes nothing: definite.
			return driver.Record{}, fmt.Errorf("etcd store: acquire %q: grant lease: %w", resource, err)
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, owner, clientv3.WithLease(g.ID))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return driver.Record{}, writeErr("acquire", resource, err)
		}
		if resp.Succeeded {
			return driver.Record{Resource: resource, Owner: owner, Token: uint64(resp.Header.Revision), TTL: ttl,
				Remaining: time.Duration(g.TTL) * time.Second}, nil
		}
		s.revoke(ctx, g.ID)
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 { // deleted between the compare and the read: cannot happen in one txn
			return driver.Record{}, fmt.Errorf("etcd store: acquire %q: key neither absent nor present", resource)
		}
		kv := kvs[0]
		if string(kv.Value) == owner {
			// The same owner: the same lease, renewed. If its etcd lease has
			// expired (and awaits revocation), wait for the key to go and
			// grant anew.
			err := s.extend(ctx, resource, owner, uint64(kv.CreateRevision), clientv3.LeaseID(kv.Lease), secs)
			if err == nil {
				return driver.Record{Resource: resource, Owner: owner, Token: uint64(kv.CreateRevision), TTL: ttl,
					Remaining: time.Duration(secs) * time.Second}, nil
			}
			if !errors.Is(err, driver.ErrLeaseLost) || attempt >= 20 {
				return driver.Record{}, err
			}
			select {
			case <-time.After(100 * time.Millisecond):
				continue
			case <-ctx.Done():
				return driver.Record{}, fmt.Errorf("etcd store: acquire %q: %w", resource, context.Cause(ctx))
			}
		}
		holder := driver.Record{Resource: resource, Owner: string(kv.Value), Token: uint64(kv.CreateRevision)}
		if tl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil && tl.TTL >= 0 {
			holder.TTL = time.Duration(tl.GrantedTTL) * time.Second
			holder.Remaining = time.Duration(tl.TTL) * time.Second
		}
		return driver.Record{}, &driver.HeldError{Holder: holder}
	}
}

// extend renews the etcd lease id that carries key for owner and token so
// that it lasts at least secs from now, or returns an error wrapping
// ErrLeaseLost.
func (s *Store) extend(ctx context.Context, resource, owner string, token uint64, id clientv3.LeaseID, secs int64) error {
	key := s.key(resource)
	ka, err := s.cli.KeepAliveOnce(ctx, id)
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) || code(err) == codes.NotFound {
			return lost("renew", resource)
		}
		// A keep-alive changes only the expiry of a lease: whether or not it
		// was applied, retrying is safe. Report it as unknown.
		return writeErr("renew", resource, err)
	}
	same := []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(key), "=", owner),
		clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token)),
		clientv3.Compare(clientv3.LeaseValue(key), "=", id),
	}
	if ka.TTL >= secs {
		// The keep-alive counts only if the key still lives on that lease.
		resp, err := s.cli.Txn(ctx).If(same...).Commit()
		if err != nil {
			return fmt.Errorf("etcd store: renew %q: check: %w", resource, err)
		}
		if !resp.Succeeded {
			return lost("renew", resource)
		}
		return nil
	}
	// A longer TTL than the lease has: move the key to a new lease.
	g, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return fmt.Errorf("etcd store: renew %q: grant lease: %w", resource, err)
	}
	resp, err := s.cli.Txn(ctx).If(same...).Then(clientv3.OpPut(key, owner, clientv3.WithLease(g.ID))).Commit()
	if err != nil {
		return writeErr("renew", resource, err)
	}
	if !resp.Succeeded {
		s.revoke(ctx, g.ID)
		return lost("renew", resource)
	}
	s.revoke(ctx, id)
	return nil
}

// Renew implements driver.Store: it keeps the etcd lease of the live lease
// with this owner and token alive for at least ttl (rounded up to whole
// seconds) from now, or returns an error wrapping driver.ErrLeaseLost. It
// never revives an expired lease: etcd refuses keep-alives of expired
// leases, and the key of a revoked one is gone.
func (s *Store) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if err := driver.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	secs, err := seconds(ttl)
	if err != nil {
		return err
	}
	resp, err := s.cli.Get(ctx, s.key(resource))
	if err != nil {
		return fmt.Errorf("etcd store: renew %q: %w", resource, err)
	}
	if len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != owner || uint64(resp.Kvs[0].CreateRevision) != token {
		return lost("renew", resource)
	}
	return s.extend(ctx, resource, owner, token, clientv3.LeaseID(resp.Kvs[0].Lease), secs)
}

// Release implements driver.Store: it deletes the key if it holds this
// owner and token, in one transaction, then revokes its etcd lease (best
// effort); otherwise it returns an error wrapping driver.ErrLeaseLost and
// changes nothing.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	key := s.key(resource)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), "=", owner),
			clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token))).
		Then(clientv3.OpGet(key), clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return writeErr("release", resource, err)
	}
	if !resp.Succeeded {
		return lost("release", resource)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 && kvs[0].Lease != 0 {
		s.revoke(ctx, clientv3.LeaseID(kvs[0].Lease))
	}
	return nil
}

// record builds the Record of a key, with the time left on its etcd lease.
// ok is false when the lease has already expired (the key awaits deletion).
func (s *Store) record(ctx context.Context, resource string, owner []byte, createRev, lease int64) (driver.Record, bool, error) {
	rec := driver.Record{Resource: resource, Owner: string(owner), Token: uint64(createRev)}
	tl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil {
		return rec, false, err
	}
	// TTL is the whole seconds left, rounded down (0: less than a second);
	// -1 means the lease is gone.
	if tl.TTL < 0 {
		return rec, false, nil
	}
	rec.TTL = time.Duration(tl.GrantedTTL) * time.Second
	rec.Remaining = time.Duration(tl.TTL) * time.Second
	return rec, true, nil
}

// Get implements driver.Store. Remaining is whole seconds, rounded down, as
// etcd reports it (zero: less than a second, or unknown).
func (s *Store) Get(ctx context.Context, resource string) (driver.Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return driver.Record{}, err
	}
	resp, err := s.cli.Get(ctx, s.key(resource))
	if err != nil {
		return driver.Record{}, fmt.Errorf("etcd store: get %q: %w", resource, err)
	}
	if len(resp.Kvs) == 0 {
		return driver.Record{}, fmt.Errorf("etcd store: %q: %w", resource, driver.ErrNotHeld)
	}
	kv := resp.Kvs[0]
	rec, ok, err := s.record(ctx, resource, kv.Value, kv.CreateRevision, kv.Lease)
	if err != nil {
		return driver.Record{}, fmt.Errorf("etcd store: get %q: %w", resource, err)
	}
	if !ok {
		return driver.Record{}, fmt.Errorf("etcd store: %q: %w", resource, driver.ErrNotHeld)
	}
	return rec, nil
}

// List implements driver.Store: the live leases whose resource starts with
// prefix, in byte order, from one linearizable read (plus one lease lookup
// per lease for the time left).
func (s *Store) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	resp, err := s.cli.Get(ctx, s.key(prefix), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("etcd store: list %q: %w", prefix, err)
	}
	out := make([]driver.Record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		rec, ok, err := s.record(ctx, strings.TrimPrefix(string(kv.Key), s.prefix), kv.Value, kv.CreateRevision, kv.Lease)
		if err != nil {
			return nil, fmt.Errorf("etcd store: list %q: %w", prefix, err)
		}
		if ok {
			out = append(out, rec)
		}
	}
	return out, nil
}

// Subscribe implements driver.Notifier: the channel receives a value
// (coalesced, never blocking the sender) when the key of resource is
// deleted (a release or an expiry), and when the watch had to be
// re-established. It reads the key's current revision first and watches
// from the next one, so nothing after Subscribe returns is missed. A
// notification is only a hint. The returned function ends the watch and
// waits for its goroutine; it is idempotent.
func (s *Store) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateResource(resource); err != nil {
		return nil, nil, err
	}
	key := s.key(resource)
	resp, err := s.cli.Get(ctx, key, clientv3.WithCountOnly())
	if err != nil {
		return nil, nil, fmt.Errorf("etcd store: subscribe %q: %w", resource, err)
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rev := resp.Header.Revision + 1
		for wctx.Err() == nil && s.cli.Ctx().Err() == nil {
			one, stopOne := context.WithCancel(wctx)
			for wr := range s.cli.Watch(one, key, clientv3.WithRev(rev), clientv3.WithFilterPut()) {
				if err := wr.Err(); err != nil {
					break
				}
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypeDelete {
						notify(ch)
					}
				}
				rev = wr.Header.Revision + 1
			}
			stopOne()
			if wctx.Err() != nil || s.cli.Ctx().Err() != nil {
				return
			}
			// The watch ended (compaction, lost leader, closed client):
			// something may have been missed. Wake the waiter, who will ask
			// the store, and watch again from now.
			notify(ch)
			select {
			case <-time.After(200 * time.Millisecond):
			case <-wctx.Done():
				return
			}
			r, err := s.cli.Get(wctx, key, clientv3.WithCountOnly())
			if err == nil {
				rev = r.Header.Revision + 1
			}
		}
	}()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}, nil
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
