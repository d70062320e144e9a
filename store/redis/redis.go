// Package redis is a driver.Store on a single Redis server, through
// github.com/redis/go-redis/v9.
//
// # Keys
//
// With the default prefix "tenure:", a resource R uses:
//
//	tenure:lease:R   hash {owner, token, ttl} with a PX expiry: the live lease
//	tenure:token:R   integer, the last fencing token granted for R (INCR, no expiry, never reset)
//	tenure:index     sorted set of every resource ever granted (for List)
//	tenure:released  pub/sub channel; a release publishes R
//
// Every operation is one Lua script, which Redis runs atomically: acquire
// (create the lease if absent, with the next token and a PX expiry; renew it
// if the caller already holds it), renew (compare owner and token, then
// extend), release (compare owner and token, then delete and publish). Expiry
// is decided by the Redis server's clock, in milliseconds, never by a
// client's.
//
// # What the fencing token promises, and when
//
// Tokens come from INCR on a key that never expires, so they strictly
// increase for as long as Redis keeps its data. A Redis that loses data
// breaks that promise and can also break mutual exclusion:
//
//   - A restart without persistence (the default of many deployments)
//     empties the server: live leases vanish (another owner may be granted at
//     once while the old holder still trusts its lease until its local
//     deadline) and the counters restart, so tokens go back.
//   - With AOF and appendfsync everysec, a crash loses up to about a second
//     of writes: the same, for the grants of that second.
//   - A failover to an asynchronously replicated replica (Sentinel, managed
//     Redis) loses whatever the replica had not received: a lease and its
//     token can be lost, two clients can hold the same resource, and a token
//     can be handed out twice.
//   - An eviction policy other than noeviction can delete lease keys early
//     (volatile-*) or the counters (allkeys-*). New refuses such a server
//     unless Config.AllowEviction is set.
//   - The server's wall clock decides expiry: a clock that steps forward
//     expires leases early.
//
// The token guarantee therefore holds only on a single Redis instance with
// appendonly yes and appendfsync always, no failover, noeviction, and a
// clock that does not step. Anything else is a choice to accept the risks
// above; use PostgreSQL or etcd when that is not acceptable.
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
// The Store implements driver.Notifier with one pub/sub connection per Store
// that fans out to the waiting Acquires. It also listens for expired-key
// events (__keyevent@DB__:expired), which arrive only when the server is
// configured with notify-keyspace-events including "Ex"; without them, a
// waiter notices an expired lease by its backoff.
//
// This store is for a standalone Redis: its scripts read keys they are not
// given (List), and the keys of one resource are not in one hash slot.
package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
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

// ErrEvictionPolicy means that the server's maxmemory-policy may delete
// lease keys or token counters (anything but noeviction).
var ErrEvictionPolicy = errors.New("redis store: the server's maxmemory-policy can evict leases or fencing-token counters; set maxmemory-policy noeviction (or Config.AllowEviction to accept the risk)")

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
}

// CheckTTL returns an error wrapping driver.ErrInvalidTTL for a TTL that a
// store opened with c cannot keep (below 1 ms or above MaxTTL), without
// I/O.
func (c Config) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// CheckTTL implements driver.TTLChecker, so a Locker rejects a TTL this
// store cannot keep before any I/O.
func (s *Store) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// Store is a driver.Store and driver.Notifier on one Redis server. It is
// safe for concurrent use.
type Store struct {
	rdb     *redis.Client
	prefix  string
	channel string
	expired string // keyspace event channel of expired keys

	hub    driver.Hub // release notifications; Listen is listen
	closed atomic.Bool
}

// Open connects to the server and checks that it answers (PING, bounded by
// the dial and read timeouts and ctx) and that its eviction policy cannot
// delete leases (see ErrEvictionPolicy). Bad configuration returns an error
// before any I/O.
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
		channel: cfg.Prefix + "released",
		expired: fmt.Sprintf("__keyevent@%d__:expired", o.DB),
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

func (s *Store) leaseKey(resource string) string { return s.prefix + "lease:" + resource }
func (s *Store) tokenKey(resource string) string { return s.prefix + "token:" + resource }
func (s *Store) indexKey() string                { return s.prefix + "index" }

// The scripts. Values come back as strings so tokens keep all 64 bits.
var (
	// KEYS: lease, token counter, index. ARGV: owner, ttl ms, resource.
	// Returns {1, token} when granted or renewed (same owner), or
	// {0, owner, token, ttl, pttl} when another owner holds it.
	acquireScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token', 'ttl')
if cur[1] then
	if cur[1] == ARGV[1] then
		redis.call('HSET', KEYS[1], 'ttl', ARGV[2])
		redis.call('PEXPIRE', KEYS[1], ARGV[2])
		return {1, cur[2]}
	end
	return {0, cur[1], cur[2], cur[3], tostring(redis.call('PTTL', KEYS[1]))}
end
local tok = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', tok, 'ttl', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[3], 0, ARGV[3])
return {1, tostring(tok)}`)

	// KEYS: lease. ARGV: owner, token, ttl ms. Returns 1 when extended.
	renewScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
	redis.call('HSET', KEYS[1], 'ttl', ARGV[3])
	redis.call('PEXPIRE', KEYS[1], ARGV[3])
	return 1
end
return 0`)

	// KEYS: lease. ARGV: owner, token, channel, resource. Returns 1 when
	// released (and published).
	releaseScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
	redis.call('DEL', KEYS[1])
	redis.call('PUBLISH', ARGV[3], ARGV[4])
	return 1
end
return 0`)

	// KEYS: lease. Returns {} or {owner, token, ttl, pttl}.
	getScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token', 'ttl')
if not cur[1] then return {} end
return {cur[1], cur[2], cur[3], tostring(redis.call('PTTL', KEYS[1]))}`)

	// KEYS: index. ARGV: lease key prefix, min, max (ZRANGEBYLEX bounds).
	// Returns {resource, owner, token, ttl, pttl, ...} of the live leases.
	listScript = redis.NewScript(`
local out = {}
for _, r in ipairs(redis.call('ZRANGEBYLEX', KEYS[1], ARGV[2], ARGV[3])) do
	local k = ARGV[1] .. r
	local cur = redis.call('HMGET', k, 'owner', 'token', 'ttl')
	if cur[1] then
		table.insert(out, r)
		table.insert(out, cur[1])
		table.insert(out, cur[2])
		table.insert(out, cur[3])
		table.insert(out, tostring(redis.call('PTTL', k)))
	end
end
return out`)
)

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

func strs(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %T", v)
	}
	out := make([]string, len(list))
	for i, x := range list {
		switch x := x.(type) {
		case string:
			out[i] = x
		case int64:
			out[i] = strconv.FormatInt(x, 10)
		default:
			return nil, fmt.Errorf("unexpected reply element %T", x)
		}
	}
	return out, nil
}

// record parses owner, token, ttl and pttl (ms) as the scripts return them.
func record(resource string, f []string) (driver.Record, error) {
	tok, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return driver.Record{}, fmt.Errorf("bad token %q: %w", f[1], err)
	}
	ttl, _ := strconv.ParseInt(f[2], 10, 64)
	pttl, _ := strconv.ParseInt(f[3], 10, 64)
	return driver.Record{Resource: resource, Owner: f[0], Token: tok,
		TTL: time.Duration(ttl) * time.Millisecond, Remaining: time.Duration(max(pttl, 0)) * time.Millisecond}, nil
}

// Acquire implements driver.Store. The TTL is rounded up to whole
// milliseconds; TTLs below 1 ms or above MaxTTL return ErrInvalidTTL before
// any I/O. It returns a *driver.HeldError naming the holder, with the time
// left on the server's clock, when another owner holds the resource.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	msTTL := driver.Milliseconds(ttl)
	v, err := acquireScript.Run(ctx, s.rdb,
		[]string{s.leaseKey(resource), s.tokenKey(resource), s.indexKey()}, owner, msTTL, resource).Result()
	if err != nil {
		return driver.Record{}, writeErr("acquire", resource, err)
	}
	f, err := strs(v)
	if err == nil && !(len(f) == 2 && f[0] == "1" || len(f) == 5 && f[0] == "0") {
		err = fmt.Errorf("unexpected reply %q", f)
	}
	if err != nil {
		return driver.Record{}, fmt.Errorf("redis store: acquire %q: %w", resource, err)
	}
	if f[0] == "0" {
		holder, err := record(resource, f[1:])
		if err != nil {
			return driver.Record{}, fmt.Errorf("redis store: acquire %q: %w", resource, err)
		}
		return driver.Record{}, &driver.HeldError{Holder: holder}
	}
	tok, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return driver.Record{}, fmt.Errorf("redis store: acquire %q: bad token %q", resource, f[1])
	}
	return driver.Record{Resource: resource, Owner: owner, Token: tok, TTL: ttl,
		Remaining: time.Duration(msTTL) * time.Millisecond}, nil
}

// Renew implements driver.Store: it extends the live lease with this owner
// and token to ttl from now on the server's clock, or returns an error
// wrapping driver.ErrLeaseLost and changes nothing (an expired lease is
// never re-created).
func (s *Store) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if err := ttls.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	n, err := renewScript.Run(ctx, s.rdb, []string{s.leaseKey(resource)},
		owner, strconv.FormatUint(token, 10), driver.Milliseconds(ttl)).Int64()
	if err != nil {
		return writeErr("renew", resource, err)
	}
	if n != 1 {
		return fmt.Errorf("redis store: renew %q: no live lease with this owner and token: %w", resource, driver.ErrLeaseLost)
	}
	return nil
}

// Release implements driver.Store: it deletes the live lease with this owner
// and token and publishes the release, or returns an error wrapping
// driver.ErrLeaseLost and changes nothing. The token counter stays.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	n, err := releaseScript.Run(ctx, s.rdb, []string{s.leaseKey(resource)},
		owner, strconv.FormatUint(token, 10), s.channel, resource).Int64()
	if err != nil {
		return writeErr("release", resource, err)
	}
	if n != 1 {
		return fmt.Errorf("redis store: release %q: no live lease with this owner and token: %w", resource, driver.ErrLeaseLost)
	}
	return nil
}

// Get implements driver.Store. Remaining is measured on the server's clock.
func (s *Store) Get(ctx context.Context, resource string) (driver.Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return driver.Record{}, err
	}
	v, err := getScript.Run(ctx, s.rdb, []string{s.leaseKey(resource)}).Result()
	if err != nil {
		return driver.Record{}, fmt.Errorf("redis store: get %q: %w", resource, err)
	}
	f, err := strs(v)
	if err == nil && len(f) != 0 && len(f) != 4 {
		err = fmt.Errorf("unexpected reply %q", f)
	}
	if err != nil {
		return driver.Record{}, fmt.Errorf("redis store: get %q: %w", resource, err)
	}
	if len(f) == 0 {
		return driver.Record{}, fmt.Errorf("redis store: %q: %w", resource, driver.ErrNotHeld)
	}
	rec, err := record(resource, f)
	if err != nil {
		return driver.Record{}, fmt.Errorf("redis store: get %q: %w", resource, err)
	}
	return rec, nil
}

// List implements driver.Store: the live leases whose resource starts with
// prefix, in byte order, read atomically by one script.
func (s *Store) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	// Resource names are valid UTF-8, which never holds the byte 0xff, so
	// every name that starts with prefix sorts below prefix+"\xff".
	lo, hi := "-", "+"
	if prefix != "" {
		lo, hi = "["+prefix, "("+prefix+"\xff"
	}
	v, err := listScript.Run(ctx, s.rdb, []string{s.indexKey()}, s.prefix+"lease:", lo, hi).Result()
	if err != nil {
		return nil, fmt.Errorf("redis store: list %q: %w", prefix, err)
	}
	f, err := strs(v)
	if err == nil && len(f)%5 != 0 {
		err = fmt.Errorf("unexpected reply of %d fields", len(f))
	}
	if err != nil {
		return nil, fmt.Errorf("redis store: list %q: %w", prefix, err)
	}
	out := make([]driver.Record, 0, len(f)/5)
	for i := 0; i < len(f); i += 5 {
		rec, err := record(f[i], f[i+1:i+5])
		if err != nil {
			return nil, fmt.Errorf("redis store: list %q: %w", prefix, err)
		}
		out = append(out, rec)
	}
	return out, nil
}
