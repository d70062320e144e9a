// Package etcd is a driver.Store on etcd, through go.etcd.io/etcd/client/v3
// (client v3.6, tested against etcd server 3.6.16). Open refuses etcd
// releases with known lease-safety bugs (ErrUnsafeServer: before 3.5.23, and
// 3.6 before 3.6.5), unless Config.AllowUnsafeServer is set.
//
// # Keep-alives and raft terms
//
// A keep-alive confirms a shared etcd lease only when a linearizable read
// sent after its answer is served in the same raft term as the answer: a
// leader that was stopped and runs again answers keep-alives from its own
// memory until it learns of the newer term (sameTerm in session.go). What the
// store cannot prevent: such a leader may also have the revocation of live
// etcd leases applied (etcd-io/etcd#15247, open on 3.6.16 for a stopped
// leader; docs/stores.md), deleting keys whose holders still trust them
// until their next renewal.
//
// # Keys, shared etcd leases and tokens
//
// A resource R is the key PREFIX+R (default prefix "/tenure/leases/"), whose
// value is the holder's owner string. A Store puts the keys of all the
// grants it makes with one TTL (in whole seconds) on one etcd lease of its
// own, as a concurrency.Session carries the keys of its mutexes: etcd
// deletes them all when that etcd lease expires or is revoked. The etcd
// lease is granted with a margin more than the TTL (a tenth of it, at least
// one second), and the Store knows a lower bound of its expiry (the send
// time of its last confirmed keep-alive, plus its TTL); an operation needs a
// keep-alive only when that bound does not cover its TTL, and any operation
// that finds the last keep-alive older than half the margin starts one in
// the background. New grants move to a new etcd lease every minute.
//
//   - Acquire runs one transaction: if the key does not exist
//     (create_revision = 0), put it on the shared etcd lease; else read it.
//     The fencing token is the key's create_revision: the cluster-wide
//     revision of the transaction that created it. Revisions only grow, are
//     never reused, and are kept in etcd's raft log and database, so tokens
//     strictly increase across release, expiry, restarts of clients and
//     servers, keys deleted and leases revoked by hand, and compaction. The
//     one way back is restoring the cluster from an older snapshot (see
//     docs/stores.md).
//   - Renew is one transaction that checks the key's mod_revision (no write
//     but ours touched it), read serializably; a mismatch is confirmed by a
//     linearizable read, whose else branch names the new holder. An acquire
//     by the holder (a retry, or a semaphore's marker, whose owner string
//     every holder shares) renews with a write, and every move of a key
//     between etcd leases is conditioned on the mod_revision it read, so a
//     move delivered late never applies after a newer renewal.
//   - Release is one transaction: delete the key if it holds this owner and
//     token, else read it (naming the holder).
//   - Keep (Lease.ReleaseAfter) moves the key onto an etcd lease of its own,
//     granted for the hold without a margin and kept alive by nothing, so
//     the hold ends when asked, within etcd's resolution (see Keep).
//   - RenewBatch needs at most one keep-alive per shared etcd lease; it
//     checks up to 128 keys per transaction, or, for 128 or more grants of
//     one etcd lease, audits that etcd lease's keys in the background.
//
// A grant not renewed for its TTL while others keep its etcd lease alive is
// deleted by the Store's reaper, conditioned on the grant, and never renewed
// afterwards; a put whose answer was lost is watched until its etcd lease
// ends, and its key deleted if no grant owns it. So a key on a shared etcd
// lease lives as if it had an etcd lease of its own.
//
// # TTLs
//
// etcd leases have whole-second TTLs. A TTL below one second is
// ErrInvalidTTL; others are rounded up to whole seconds, so the store keeps
// a lease at least the requested time (the holder's local deadline still
// uses the requested TTL). etcd also raises a lease's TTL to its minimum,
// 1.5 × the election timeout rounded up (2 s with the default 1 s election
// timeout), and checks for expired leases every 500 ms. A grant whose
// holder vanished goes when its shared etcd lease expires (ceil(TTL) + the
// margin after its last keep-alive, plus up to 0.5 s) or, when the Store
// lives on, when the reaper takes it (ceil(TTL) after its last confirmed
// renewal, plus up to a tenth of the TTL, at least 0.5 s). A leader change
// (or a restart of a single member) extends every etcd lease by its full
// TTL: leases then live longer, never shorter.
//
// # Notifications
//
// The Store implements driver.Notifier with an etcd watch on the key, from
// the revision the subscription read, so that no release or expiry after
// Subscribe returns is missed. The etcd client multiplexes all watches of a
// Store on one gRPC stream. A watch silent for ListenCheck is checked with a
// progress request and set up again when that goes unanswered; gRPC
// keep-alives replace a connection that went half-open (see ListenCheck).
package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/storeclient"
)

// Defaults.
const (
	// DefaultPrefix starts every key.
	DefaultPrefix = "/tenure/leases/"
	// DefaultDialTimeout bounds connecting.
	DefaultDialTimeout = 5 * time.Second
	// DefaultMaxTxnOps is etcd's default --max-txn-ops.
	DefaultMaxTxnOps = 128
)

// maxChecks is the most batch-renewal Txns a Store keeps in flight.
const maxChecks = 4

// MaxTTL is the longest TTL the store accepts: 8,000,000,000 seconds, so
// that with the margin its shared etcd leases live beyond the TTL (a tenth)
// it stays within etcd's limit of 9,000,000,000 seconds.
const MaxTTL = 8_000_000_000 * time.Second

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

	// MaxTxnOps is the most keys one batch renewal checks in one Txn: the
	// server's --max-txn-ops (default 128, the default here too).
	MaxTxnOps int

	// AllowUnsafeServer lets Open accept etcd members whose release has
	// known lease-safety bugs (ErrUnsafeServer: every release before 3.5.23,
	// 3.6 before 3.6.5). With it, a paused or overloaded etcd leader can
	// delete the key of a lease its holder still trusts.
	AllowUnsafeServer bool

	// Logger receives what the Store does on its own: a watch of release
	// notifications found silent and re-established (warnings and
	// information). Default slog.Default().
	Logger *slog.Logger
}

// Store is a driver.Store, driver.Notifier and driver.BatchRenewer on
// etcd. It is safe for concurrent use.
type Store struct {
	cli       *clientv3.Client
	prefix    string
	maxTxnOps int
	clock     clock.Clock

	// bgCtx ends at Close: keep-alives and the reaper run on it, and bg
	// counts them.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup

	mu       sync.Mutex
	sessions map[int64]*session      // by TTL in whole seconds: the shared etcd lease of new grants
	granting map[int64]*pendingGrant // Grants in flight
	grants   map[string]*grant       // by key: the grants this Store keeps alive
	ghosts   []*ghost                // puts whose outcome is unknown
	reaping  bool                    // the reaper runs

	bgMu   sync.Mutex
	closed bool

	// checks bounds the batch renewals' Txns in flight.
	checks chan struct{}

	watchMu sync.Mutex
	watches map[string]*watchGroup // by resource: one etcd watch each
	dialTO  time.Duration

	log *slog.Logger
	// listenCheck is how long a watch may be silent before the Store asks
	// for a progress notification, and how long that may take (ListenCheck).
	listenCheck time.Duration
	progressMu  sync.Mutex
	progressAt  time.Time // when the last progress notification was asked for
}

// Open connects to etcd and checks that the cluster answers a linearizable
// read, within the dial timeout (and ctx). Bad configuration returns an
// error before any I/O. Unless cfg.AllowUnsafeServer is set, it asks each
// endpoint for its server version (one Status call each, in parallel,
// within the same timeout) and returns an error wrapping ErrUnsafeServer
// when a member that answers runs a release with known lease-safety bugs.
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
	if !cfg.AllowUnsafeServer {
		if err := checkServers(cctx, cli, cc.Endpoints); err != nil {
			cli.Close()
			return nil, err
		}
	}
	if cfg.MaxTxnOps <= 0 {
		cfg.MaxTxnOps = DefaultMaxTxnOps
	}
	bgCtx, bgCancel := context.WithCancel(context.Background())
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Store{
		cli: cli, prefix: cfg.Prefix, maxTxnOps: cfg.MaxTxnOps, clock: clock.Real(), dialTO: cc.DialTimeout,
		bgCtx: bgCtx, bgCancel: bgCancel, checks: make(chan struct{}, maxChecks),
		sessions: map[int64]*session{}, granting: map[int64]*pendingGrant{}, grants: map[string]*grant{},
		log: log, listenCheck: ListenCheck,
	}, nil
}

// connectErr describes a failure to connect. The etcd client retries a
// failed dial or TLS handshake until its deadline and then reports only
// "context deadline exceeded"; so when the error is a timeout or
// unavailability, one probe per endpoint (bounded by a second in all) finds
// the cause and the error wraps it too: without TLS a TCP dial (when no
// endpoint can be reached, the dials' errors: connection refused, no route),
// with TLS a handshake (the certificate problem: an unknown CA, a wrong
// name, a client certificate refused).
func connectErr(cc clientv3.Config, err error) error {
	err = fmt.Errorf("etcd store: connect %s: %w", strings.Join(cc.Endpoints, ","), err)
	c := code(err)
	if c != codes.DeadlineExceeded && c != codes.Unavailable && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	deadline := time.Now().Add(min(time.Second, cc.DialTimeout))
	if cc.TLS == nil {
		// The client reports only the deadline; a dial of each endpoint says
		// whether any could be reached at all, and why not.
		var dialErrs []error
		for _, ep := range cc.Endpoints {
			if derr := dial(ep, deadline); derr != nil {
				dialErrs = append(dialErrs, derr)
			}
		}
		if len(dialErrs) == len(cc.Endpoints) {
			return fmt.Errorf("%w (no endpoint could be reached: %w)", err, errors.Join(dialErrs...))
		}
		return err
	}
	for _, ep := range cc.Endpoints {
		if herr := handshake(ep, cc.TLS, deadline); herr != nil {
			return fmt.Errorf("%w (TLS handshake with %s: %w)", err, ep, herr)
		}
	}
	return err
}

// hostPort returns an endpoint (host:port, or scheme://host:port) without
// its scheme.
func hostPort(endpoint string) string {
	if _, rest, ok := strings.Cut(endpoint, "://"); ok {
		return rest
	}
	return endpoint
}

// dial opens and closes a TCP connection to endpoint host:port (or
// scheme://host:port) by deadline, and returns the dial's error.
func dial(endpoint string, deadline time.Time) error {
	conn, err := net.DialTimeout("tcp", hostPort(endpoint), max(time.Until(deadline), 10*time.Millisecond))
	if err != nil {
		return err
	}
	return conn.Close()
}

// handshake makes a TLS connection to endpoint host:port (or
// https://host:port) as the client would, and waits for the server's first
// bytes until deadline: with TLS 1.3 a server that refuses the client's
// certificate says so only after the client's side of the handshake. It
// returns the TLS error, or nil when the handshake worked or the endpoint
// could not be reached at all (that is not a TLS problem).
func handshake(endpoint string, tc *tls.Config, deadline time.Time) error {
	endpoint = hostPort(endpoint)
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

// The store's client, for tenure's own tests and benchmarks.
func init() { storeclient.Register(func(s *Store) *clientv3.Client { return s.cli }) }

// Close stops the Store's keep-alives and reaper and closes the client,
// ending subscriptions. It does not release leases: their keys go when the
// shared etcd leases expire, one second after their TTL at the latest.
func (s *Store) Close() error {
	s.bgMu.Lock()
	s.closed = true
	s.bgMu.Unlock()
	s.bgCancel()
	s.bg.Wait()
	return s.cli.Close()
}

func (s *Store) key(resource string) string { return s.prefix + resource }

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
