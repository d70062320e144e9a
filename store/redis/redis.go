// Package redis is a driver.Store on a single Redis server (5.0 or later;
// tested with 7.0),
// through github.com/redis/go-redis/v9.
//
// # Keys
//
// With the default prefix "tenure:", a resource R uses:
//
//	tenure:lease:R   string "<token>:<owner>:<ttl ms>" with a PX expiry: the live lease,
//	                 "+" at the end when someone waits for it
//	tenure:token     integer: the last fencing token granted, for every resource (one key per store)
//	tenure:released  pub/sub channel; the release of a lease marked "+" publishes R
//
// Everything a lease writes lives in its key, which expires or is deleted
// by its release; only the store's one counter stays. Redis keeps no state
// for names no longer in use. List finds the leases with SCAN over the
// lease keys.
//
// Every operation is one Lua script (EVALSHA), which Redis runs atomically:
// acquire (create the lease if absent, with the next token and a PX expiry;
// extend it if the caller already holds it), renew (compare owner and
// token, then PEXPIRE), release (compare owner and token, then DEL, and
// PUBLISH when the lease is marked). Renew and release name the current
// holder when another grant holds the resource (driver.NotHolder).
// RenewBatch renews many leases in one script call. Expiry is decided by
// the Redis server's clock, in milliseconds, never by a client's.
//
// # Fencing tokens
//
// A token is max(the counter + 1, the server's clock in microseconds since
// the Unix epoch), read with TIME inside the script (Redis replicates a
// script's effects, so the value written is what a replica keeps). The
// counter gives a strictly increasing sequence for every resource; the
// clock floor makes it survive lost data: after a Redis that restarted
// empty, a counter deleted by hand, or a failover to a replica that missed
// the last writes, a new token is still above every token granted before,
// unless the server's wall clock is behind the clock that granted them (a
// clock stepped back, or a replica whose clock is behind the old master's
// by more than the time the failover took). Tokens are therefore large
// (about 1.8e15 in 2027) and stay below 2^53.
//
// # What a lost lease costs
//
// Losing data cannot make a token go back, but it can break mutual
// exclusion for a while: a lease key that vanishes (a Redis restarted
// without persistence, FLUSHALL, DEL by hand, eviction, a failover to a
// replica that had not received it) lets another owner be granted at once,
// while the old holder trusts its lease until its next renewal tells it
// (within the renewal interval, TTL/3 by default) or its local deadline
// passes. The resource's fencing check (a token greater than the last it
// saw) is what stops the old holder's writes meanwhile. See docs/stores.md
// for what the operator must not do.
//
// # Why no Redlock
//
// tenure does not offer Redlock (locking on a majority of independent Redis
// masters). Martin Kleppmann's analysis ("How to do distributed locking",
// 2016) showed that it produces no fencing token, so a paused or partitioned
// holder cannot be stopped by the resource it protects, and that its safety
// rests on bounded network delay, bounded pauses and clocks that run at the
// same rate. Salvatore Sanfilippo's reply ("Is Redlock safe?", 2016) argues
// that these timing assumptions are reasonable in practice and that a
// random unique value can serve for check-and-set; tenure's contract
// (docs/design.md) demands a monotonic fencing token, which Redlock cannot
// provide, so tenure keeps to one server and says what that server must
// guarantee.
//
// # Notifications
//
// The Store implements driver.Notifier and driver.Watcher with one pub/sub
// connection per Store that fans out to the waiting Acquires (one waiter
// per release, driver.Hub) and the watching holders. A release publishes
// only when its lease is marked as waited for, so a release nobody waits
// for sends no message to the listening connections of other processes. A
// waiter's acquire attempt that finds the resource held marks the lease in
// the same script (so a release that follows it publishes), an acquire
// granted while other subscribers of the Store wait marks its own lease (so
// its release wakes the next), and Watch marks the lease there (for a
// holder that watches its own lease). The Store also
// listens for expired-key events (__keyevent@DB__:expired), which arrive
// only when the server is configured with notify-keyspace-events including
// "Ex"; without them, a waiter notices an expired lease by its backoff.
//
// # Upgrading from the earlier layout
//
// Earlier versions of this store kept a hash per lease, a counter per
// resource (tenure:token:R, never deleted) and an index of every name ever
// used (tenure:index). This version reads an old lease hash as a live lease
// (so processes of both versions exclude each other), and its tokens start
// above any old counter (the clock floor). When Open finds the old index,
// the Store also keeps each old counter it meets in step with its grants,
// so that a process not yet upgraded never grants a smaller token. Once no
// process of an earlier version runs, RemoveOldLayout deletes the old
// counters and index.
//
// This store is for a standalone Redis (not Cluster): List scans keys, and
// the keys of one resource are not in one hash slot.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure/driver"
)

// Defaults.
const (
	// DefaultPrefix starts every key and the channel.
	DefaultPrefix = "tenure:"
	// DefaultDialTimeout bounds connecting when the options set no
	// dial timeout.
	DefaultDialTimeout = 5 * time.Second
)

// MaxTTL is the longest TTL the store accepts (about 146 years; PX takes
// int64 milliseconds).
const MaxTTL = driver.MaxMillisecondTTL

// ttls is the range of TTLs the store keeps: 1 ms to MaxTTL.
var ttls = driver.MillisecondTTLs

// maxBatch bounds the keys of one script call (RenewBatch, List).
const maxBatch = 1000

// ErrEvictionPolicy means that the server's maxmemory-policy may delete
// lease keys (anything but noeviction).
var ErrEvictionPolicy = errors.New("redis store: the server's maxmemory-policy can evict leases; set maxmemory-policy noeviction (or Config.AllowEviction to accept the risk)")

// Config configures a Store.
type Config struct {
	// Options are go-redis's connection options (address, TLS, auth, DB,
	// timeouts, pool). Required. The store sets MaxRetries to -1 (it never
	// lets the client resend a write whose answer was lost: that is an
	// unknown outcome for tenure to resolve) and ContextTimeoutEnabled, and a
	// DialTimeout of DefaultDialTimeout when none is set.
	Options *redis.Options

	// Prefix starts every key and the channel. Default DefaultPrefix. Stores
	// that share leases must share the prefix.
	Prefix string

	// AllowEviction skips the check that the server's maxmemory-policy is
	// noeviction (see ErrEvictionPolicy). When the server does not allow
	// CONFIG GET, the check is skipped anyway.
	AllowEviction bool

	// Hooks are added to the client (go-redis's AddHook) before it sends
	// anything: to count or trace commands.
	Hooks []redis.Hook

	// Logger receives what the Store does on its own: the pub/sub
	// connection of release notifications lost, found silent, and
	// re-established (warnings and information). Default slog.Default().
	Logger *slog.Logger
}

// CheckTTL returns an error wrapping driver.ErrInvalidTTL for a TTL that a
// store opened with c cannot keep (below 1 ms or above MaxTTL), without
// I/O.
func (c Config) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// CheckTTL implements driver.TTLChecker, so a Locker rejects a TTL this
// store cannot keep before any I/O.
func (s *Store) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// Store is a driver.Store, driver.BatchRenewer and driver.Notifier on one
// Redis server. It is safe for concurrent use.
type Store struct {
	rdb     *redis.Client
	prefix  string
	counter string // the store's token counter
	channel string
	expired string // keyspace event channel of expired keys

	// compat: the old layout's index existed at Open (see RemoveOldLayout).
	compat atomic.Bool

	hub    driver.Hub // release notifications; Listen is listen
	waits  waits      // the resources subscribed to
	closed atomic.Bool
	log    *slog.Logger
	// listenCheck is how long the pub/sub connection may be silent before
	// it is pinged, and how long the ping may take (ListenCheck).
	listenCheck time.Duration
}

// Open connects to the server and checks that it answers (PING, bounded by
// the dial and read timeouts and ctx) and that its eviction policy cannot
// delete leases (see ErrEvictionPolicy), and looks for keys of the layout
// of earlier versions (see RemoveOldLayout). Bad configuration returns an
// error before any I/O.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Options == nil {
		return nil, errors.New("redis store: no options")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "*?[]\\") {
		return nil, fmt.Errorf("redis store: prefix %q: glob characters are not allowed", cfg.Prefix)
	}
	o := *cfg.Options
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	rdb := redis.NewClient(&o)
	for _, h := range cfg.Hooks {
		rdb.AddHook(h)
	}
	s := &Store{
		rdb:     rdb,
		prefix:  cfg.Prefix,
		counter: cfg.Prefix + "token",
		channel: cfg.Prefix + "released",
		expired: fmt.Sprintf("__keyevent@%d__:expired", o.DB),
		log:     cfg.Logger,

		listenCheck: ListenCheck,
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.hub.Listen = s.listen
	bound := o.DialTimeout + 3*time.Second
	if o.ReadTimeout > 0 {
		bound = o.DialTimeout + o.ReadTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis store: connect %s: %w", o.Addr, err)
	}
	if !cfg.AllowEviction {
		policy, err := rdb.ConfigGet(pctx, "maxmemory-policy").Result()
		if err == nil && policy["maxmemory-policy"] != "" && policy["maxmemory-policy"] != "noeviction" {
			rdb.Close()
			return nil, fmt.Errorf("%w (it is %s)", ErrEvictionPolicy, policy["maxmemory-policy"])
		}
	}
	n, err := rdb.Exists(pctx, s.oldIndexKey()).Result()
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis store: connect %s: %w", o.Addr, err)
	}
	s.compat.Store(n > 0)
	return s, nil
}

// Client returns the store's go-redis client (for tests and diagnostics).
func (s *Store) Client() *redis.Client { return s.rdb }

// Close stops the pub/sub connection and closes the client. It does not
// release leases. It is safe to call more than once.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.hub.Close()
	return s.rdb.Close()
}

// errClosed is what a closed Store answers: it matches
// driver.ErrStoreUnusable, so that a Locker waiting on it stops.
var errClosed = fmt.Errorf("redis store: closed (%w)", driver.ErrStoreUnusable)

func (s *Store) leaseKey(resource string) string { return s.prefix + "lease:" + resource }

// The keys of the layout of earlier versions.
func (s *Store) oldCounterKey(resource string) string { return s.prefix + "token:" + resource }
func (s *Store) oldIndexKey() string                  { return s.prefix + "index" }

// writeErr classifies the error of a write script: an error reply from
// Redis (the script did not run, or failed before writing), a failed dial
// or a pool timeout is definite; any other (a connection that broke, a read
// timeout, ctx ending after the command was sent) leaves the outcome
// unknown.
func writeErr(op, resource string, err error) error {
	e := fmt.Errorf("redis store: %s %q: %w", op, resource, err)
	var rerr redis.Error
	var opErr *net.OpError
	switch {
	case errors.As(err, &rerr),
		errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrClosed),
		errors.As(err, &opErr) && opErr.Op == "dial":
		return e
	}
	return driver.UnknownOutcome(e)
}

// parseLease turns a lease value ("<token>:<owner>:<ttl ms>") and its PTTL
// (ms; negative when the key has no expiry) into a Record.
func parseLease(resource, v string, pttl int64) (driver.Record, error) {
	tok, rest, ok1 := strings.Cut(strings.TrimSuffix(v, "+"), ":")
	i := strings.LastIndexByte(rest, ':')
	t, err1 := strconv.ParseUint(tok, 10, 64)
	var ms int64
	var err2 error = errNotLease
	if i >= 0 {
		ms, err2 = strconv.ParseInt(rest[i+1:], 10, 64)
	}
	if !ok1 || err1 != nil || err2 != nil {
		return driver.Record{}, fmt.Errorf("not a lease value: %q", v)
	}
	return driver.Record{Resource: resource, Owner: rest[:i], Token: t,
		TTL: time.Duration(ms) * time.Millisecond, Remaining: time.Duration(max(pttl, 0)) * time.Millisecond}, nil
}

var errNotLease = errors.New("not a lease value")

// scriptError is an error that a batch script answered for one lease.
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks it as an error reply of the server (go-redis's
// redis.Error): definite.
func (e scriptError) RedisError() {}

// holderOf parses a script's {value, pttl} answer.
func holderOf(resource string, a []any) (driver.Record, error) {
	if len(a) != 2 {
		if len(a) == 1 {
			if msg, ok := a[0].(string); ok {
				return driver.Record{}, scriptError(msg)
			}
		}
		return driver.Record{}, fmt.Errorf("unexpected reply %v", a)
	}
	v, ok1 := a[0].(string)
	pttl, ok2 := a[1].(int64)
	if !ok1 || !ok2 {
		return driver.Record{}, fmt.Errorf("unexpected reply %v", a)
	}
	return parseLease(resource, v, pttl)
}

// Acquire implements driver.Store. The TTL is rounded up to whole
// milliseconds; TTLs below 1 ms or above MaxTTL return ErrInvalidTTL before
// any I/O. It returns a *driver.HeldError naming the holder, with the time
// left on the server's clock, when another owner holds the resource.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	if s.closed.Load() {
		return driver.Record{}, errClosed
	}
	msTTL := driver.Milliseconds(ttl)
	script, keys, args := acquireScript, []string{s.leaseKey(resource), s.counter}, []any{owner, msTTL}
	if s.waits.has(resource) {
		args = append(args, "w")
	}
	if s.compat.Load() {
		script, keys = acquireCompatScript, append(keys, s.oldCounterKey(resource))
	}
	v, err := script.Run(ctx, s.rdb, keys, args...).Result()
	if err != nil {
		return driver.Record{}, writeErr("acquire", resource, err)
	}
	switch v := v.(type) {
	case int64:
		if v > 0 {
			return driver.Record{Resource: resource, Owner: owner, Token: uint64(v), TTL: ttl,
				Remaining: time.Duration(msTTL) * time.Millisecond}, nil
		}
	case []any:
		holder, err := holderOf(resource, v)
		if err != nil {
			return driver.Record{}, fmt.Errorf("redis store: acquire %q: %w", resource, err)
		}
		return driver.Record{}, &driver.HeldError{Holder: holder}
	}
	return driver.Record{}, fmt.Errorf("redis store: acquire %q: unexpected reply %v", resource, v)
}

// leaseValue returns the lease value "<token>:<owner>:<ms>".
func leaseValue(token uint64, owner string, ms int64) string {
	b := make([]byte, 0, 30+len(owner))
	b = strconv.AppendUint(b, token, 10)
	b = append(b, ':')
	b = append(b, owner...)
	b = append(b, ':')
	b = strconv.AppendInt(b, ms, 10)
	return string(b)
}

// grantPrefix returns "<token>:<owner>:", what a lease value of this grant
// starts with (the TTL follows).
func grantPrefix(token uint64, owner string) string {
	b := make([]byte, 0, 22+len(owner))
	b = strconv.AppendUint(b, token, 10)
	b = append(b, ':')
	b = append(b, owner...)
	b = append(b, ':')
	return string(b)
}

// notHolder turns a renew or release script's answer into nil (done) or
// the error: driver.NotHolder, naming the holder when the answer does.
func notHolder(op, resource string, v any) error {
	switch v := v.(type) {
	case int64:
		switch v {
		case 1:
			return nil
		case 0:
			return fmt.Errorf("redis store: %s %q: %w", op, resource, driver.NotHolder(nil))
		}
	case []any:
		holder, err := holderOf(resource, v)
		if err != nil {
			return fmt.Errorf("redis store: %s %q: %w", op, resource, err)
		}
		return fmt.Errorf("redis store: %s %q: %w", op, resource, driver.NotHolder(&holder))
	}
	return fmt.Errorf("redis store: %s %q: unexpected reply %v", op, resource, v)
}

// Renew implements driver.Store: it extends the live lease with this owner
// and token to ttl from now on the server's clock, or returns an error
// made by driver.NotHolder (wrapping driver.ErrLeaseLost, and a
// *driver.HeldError naming the holder when another grant holds it) and
// changes nothing (an expired lease is never re-created).
func (s *Store) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	ms := driver.Milliseconds(ttl)
	v, err := renewScript.Run(ctx, s.rdb, []string{s.leaseKey(resource)}, leaseValue(token, owner, ms), ms).Result()
	if err != nil {
		return writeErr("renew", resource, err)
	}
	return notHolder("renew", resource, v)
}

// RenewBatch implements driver.BatchRenewer: the leases are renewed as
// Renew would, by one script call per maxBatch leases (the core sends at
// most 1,000). Each lease gets its own answer; an error of the call itself
// (UnknownOutcome when the answer was lost) is every lease's of that call.
// Redis runs a call's renewals one after the other without serving other
// clients, about a microsecond each.
func (s *Store) RenewBatch(ctx context.Context, leases []driver.Renewal) []error {
	errs := make([]error, len(leases))
	idx := make([]int, 0, len(leases))
	for i, r := range leases {
		if errs[i] = ttls.ValidateAcquire(r.Resource, r.Owner, r.TTL); errs[i] == nil {
			idx = append(idx, i)
		}
	}
	for len(idx) > 0 {
		chunk := idx[:min(len(idx), maxBatch)]
		idx = idx[len(chunk):]
		keys := make([]string, len(chunk))
		args := make([]any, len(chunk), 2*len(chunk))
		same := true
		first := driver.Milliseconds(leases[chunk[0]].TTL)
		for j, i := range chunk {
			r := leases[i]
			ms := driver.Milliseconds(r.TTL)
			same = same && ms == first
			keys[j] = s.leaseKey(r.Resource)
			args[j] = leaseValue(r.Token, r.Owner, ms)
		}
		// The TTLs: one for all when they are the same (the usual case).
		if same {
			args = append(args, first)
		} else {
			for _, i := range chunk {
				args = append(args, driver.Milliseconds(leases[i].TTL))
			}
		}
		v, err := renewBatchScript.Run(ctx, s.rdb, keys, args...).Result()
		answers, ok := v.([]any)
		if err == nil && (!ok || len(answers) != len(chunk)) {
			err = fmt.Errorf("unexpected reply %v", v)
		}
		for j, i := range chunk {
			if err != nil {
				errs[i] = writeErr("renew", leases[i].Resource, err)
			} else {
				errs[i] = notHolder("renew", leases[i].Resource, answers[j])
			}
		}
	}
	return errs
}

// Release implements driver.Store: it deletes the live lease with this owner
// and token and, when someone waits for the resource, publishes the
// release; otherwise it returns an error made by driver.NotHolder (naming
// the holder when another grant holds it) and changes nothing.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	v, err := releaseScript.Run(ctx, s.rdb, []string{s.leaseKey(resource)},
		grantPrefix(token, owner), s.channel, resource).Result()
	if err != nil {
		return writeErr("release", resource, err)
	}
	return notHolder("release", resource, v)
}

// Keep implements driver.Keeper: one script gives the live lease of this
// grant to owner string keeper (value "<token>:<keeper>:<ttl ms>", the
// wait mark kept), expiring ttl from now (milliseconds, rounded up).
func (s *Store) Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error {
	if err := ttls.ValidateKeep(resource, owner, keeper, ttl); err != nil {
		return err
	}
	ms := driver.Milliseconds(ttl)
	v, err := keepScript.Run(ctx, s.rdb, []string{s.leaseKey(resource)},
		grantPrefix(token, owner), leaseValue(token, keeper, ms), ms).Result()
	if err != nil {
		return writeErr("keep", resource, err)
	}
	return notHolder("keep", resource, v)
}

// Get implements driver.Store. Remaining is measured on the server's clock.
func (s *Store) Get(ctx context.Context, resource string) (driver.Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return driver.Record{}, err
	}
	recs, err := s.read(ctx, []string{resource})
	if err != nil {
		return driver.Record{}, fmt.Errorf("redis store: get %q: %w", resource, err)
	}
	if len(recs) == 0 {
		return driver.Record{}, fmt.Errorf("redis store: %q: %w", resource, driver.ErrNotHeld)
	}
	return recs[0], nil
}

// read returns the live leases on resources (at most maxBatch), read
// atomically by one script, in the order given.
func (s *Store) read(ctx context.Context, resources []string) ([]driver.Record, error) {
	keys := make([]string, len(resources))
	for i, r := range resources {
		keys[i] = s.leaseKey(r)
	}
	v, err := getScript.Run(ctx, s.rdb, keys).Result()
	if err != nil {
		return nil, err
	}
	answers, ok := v.([]any)
	if !ok || len(answers) != len(resources) {
		return nil, fmt.Errorf("unexpected reply %v", v)
	}
	out := make([]driver.Record, 0, len(resources))
	for i, a := range answers {
		a, ok := a.([]any)
		if !ok {
			return nil, fmt.Errorf("unexpected reply %v", v)
		}
		if len(a) == 0 {
			continue
		}
		rec, err := holderOf(resources[i], a)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}

// globEscape escapes the characters that Redis's glob patterns give a
// meaning to.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\^`) {
		return s
	}
	var b strings.Builder
	for _, c := range []byte(s) {
		switch c {
		case '*', '?', '[', ']', '\\', '^':
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}

// listCount is the COUNT hint of List's SCAN calls.
const listCount = 1000

// List implements driver.Store: the live leases whose resource starts with
// prefix, in byte order. It walks the lease keys with SCAN (MATCH on the
// key prefix, COUNT 1000: one round trip per thousand keys of the whole
// database), then reads the leases found, a thousand per script call. It
// is not one snapshot: a lease granted or released while List runs may or
// may not be in the answer; one live throughout is.
func (s *Store) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	keyPrefix := s.prefix + "lease:"
	match := globEscape(keyPrefix+prefix) + "*"
	seen := map[string]bool{}
	var out []driver.Record
	var pending []string
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		recs, err := s.read(ctx, pending)
		pending = pending[:0]
		out = append(out, recs...)
		return err
	}
	var cursor uint64
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, match, listCount).Result()
		if err != nil {
			return nil, fmt.Errorf("redis store: list %q: %w", prefix, err)
		}
		for _, k := range keys {
			r := strings.TrimPrefix(k, keyPrefix)
			if seen[r] || driver.ValidateResource(r) != nil {
				continue
			}
			seen[r] = true
			pending = append(pending, r)
			if len(pending) == maxBatch {
				if err := flush(); err != nil {
					return nil, fmt.Errorf("redis store: list %q: %w", prefix, err)
				}
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	if err := flush(); err != nil {
		return nil, fmt.Errorf("redis store: list %q: %w", prefix, err)
	}
	slices.SortFunc(out, func(a, b driver.Record) int { return strings.Compare(a.Resource, b.Resource) })
	return out, nil
}

// RemoveOldLayout deletes what earlier versions of this store kept for
// every resource ever used: the per-resource token counters
// (<prefix>token:R) and the index (<prefix>index). It first raises the
// store's counter above every old counter, so no token goes back; it
// leaves leases alone (an old-layout lease still live keeps excluding
// until it is released or expires). Run it once no process of an earlier
// version uses the prefix: such a process would grant tokens from a
// per-resource counter that starts again at 1. It returns how many keys it
// deleted. Stores opened before it keep the counters they meet in step
// (harmless) until they are closed; this Store stops at once.
func (s *Store) RemoveOldLayout(ctx context.Context) (int, error) {
	match := globEscape(s.prefix+"token:") + "*"
	deleted := 0
	var cursor uint64
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, match, listCount).Result()
		if err != nil {
			return deleted, fmt.Errorf("redis store: remove old layout: %w", err)
		}
		if len(keys) > 0 {
			vals, err := s.rdb.MGet(ctx, keys...).Result()
			if err != nil {
				return deleted, fmt.Errorf("redis store: remove old layout: %w", err)
			}
			var top uint64
			for _, v := range vals {
				if v, ok := v.(string); ok {
					if n, err := strconv.ParseUint(v, 10, 64); err == nil {
						top = max(top, n)
					}
				}
			}
			if top > 0 {
				if err := raiseScript.Run(ctx, s.rdb, []string{s.counter}, strconv.FormatUint(top, 10)).Err(); err != nil {
					return deleted, fmt.Errorf("redis store: remove old layout: raise the counter to %d: %w", top, err)
				}
			}
			n, err := s.rdb.Unlink(ctx, keys...).Result()
			deleted += int(n)
			if err != nil {
				return deleted, fmt.Errorf("redis store: remove old layout: %w", err)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	n, err := s.rdb.Unlink(ctx, s.oldIndexKey()).Result()
	deleted += int(n)
	if err != nil {
		return deleted, fmt.Errorf("redis store: remove old layout: %w", err)
	}
	s.compat.Store(false)
	return deleted, nil
}

// waits are the resources that this Store's subscribers wait for: the
// acquire attempts of this Store mark the leases of those they find held.
type waits struct {
	n     atomic.Int64 // subscriptions
	mu    sync.Mutex
	count map[string]int
}

// has tells whether resource is subscribed to.
func (w *waits) has(resource string) bool {
	if w.n.Load() == 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count[resource] > 0
}

// add counts a subscription to resource and returns the function that
// ends it.
func (w *waits) add(resource string) func() {
	w.n.Add(1)
	w.mu.Lock()
	if w.count == nil {
		w.count = map[string]int{}
	}
	w.count[resource]++
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			if w.count[resource]--; w.count[resource] <= 0 {
				delete(w.count, resource)
			}
			w.mu.Unlock()
			w.n.Add(-1)
		})
	}
}
