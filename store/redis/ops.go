package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure/driver"
)

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
	key := s.leaseKey(resource)
	script, keys, args := acquireScript, []string{key, s.counterKey(key)}, []any{owner, msTTL}
	if s.waits.has(resource) {
		args = append(args, "w")
	}
	if s.compat.Load() {
		script, keys = acquireCompatScript, append(keys, s.oldCounterKey(resource))
	}
	v, acked, waitErr, err := s.write(ctx, script, keys, args...)
	if err != nil {
		return driver.Record{}, writeErr("acquire", resource, err)
	}
	switch v := v.(type) {
	case int64:
		if v > 0 {
			if err := s.replicated(acked, waitErr); err != nil {
				return driver.Record{}, driver.UnknownOutcome(fmt.Errorf("redis store: acquire %q (token %d): %w", resource, v, err))
			}
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

// replicated returns nil when the store does not wait for replicas, or
// when WAIT counted enough of them; otherwise an error wrapping
// ErrNotReplicated.
func (s *Store) replicated(acked int64, waitErr error) error {
	switch {
	case s.waitN == 0:
		return nil
	case waitErr != nil:
		return fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, waitErr)
	case acked < int64(s.waitN):
		return fmt.Errorf("%w (%d of %d replicas in %v)", ErrNotReplicated, acked, s.waitN, s.waitTimeout)
	}
	return nil
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
	v, acked, waitErr, err := s.write(ctx, renewScript, []string{s.leaseKey(resource)}, leaseValue(token, owner, ms), ms)
	if err != nil {
		return writeErr("renew", resource, err)
	}
	return s.confirm("renew", resource, v, acked, waitErr)
}

// confirm is notHolder, and an error wrapping ErrNotReplicated and
// driver.ErrUnknownOutcome for a write done that did not reach the
// replicas the store waits for.
func (s *Store) confirm(op, resource string, v any, acked int64, waitErr error) error {
	if err := notHolder(op, resource, v); err != nil {
		return err
	}
	if err := s.replicated(acked, waitErr); err != nil {
		return driver.UnknownOutcome(fmt.Errorf("redis store: %s %q: %w", op, resource, err))
	}
	return nil
}

// Release implements driver.Store: it deletes the live lease with this owner
// and token and, when someone waits for the resource, publishes the
// release; otherwise it returns an error made by driver.NotHolder (naming
// the holder when another grant holds it) and changes nothing.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	v, acked, waitErr, err := s.write(ctx, releaseScript, []string{s.leaseKey(resource)},
		grantPrefix(token, owner), s.channel, resource)
	if err != nil {
		return writeErr("release", resource, err)
	}
	return s.confirm("release", resource, v, acked, waitErr)
}

// Keep implements driver.Keeper: one script gives the live lease of this
// grant to owner string keeper (value "<token>:<keeper>:<ttl ms>", the
// wait mark kept), expiring ttl from now (milliseconds, rounded up).
func (s *Store) Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error {
	if err := ttls.ValidateKeep(resource, owner, keeper, ttl); err != nil {
		return err
	}
	ms := driver.Milliseconds(ttl)
	v, acked, waitErr, err := s.write(ctx, keepScript, []string{s.leaseKey(resource)},
		grantPrefix(token, owner), leaseValue(token, keeper, ms), ms)
	if err != nil {
		return writeErr("keep", resource, err)
	}
	return s.confirm("keep", resource, v, acked, waitErr)
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
	// One call on one server; on a cluster, one per hash slot (in one
	// pipeline per master).
	groups := [][]int{make([]int, len(resources))}
	for i := range resources {
		groups[0][i] = i
	}
	if s.cluster != nil && len(resources) > 1 {
		bySlot := map[int]int{}
		groups = groups[:0]
		for i, r := range resources {
			slot := keySlot(s.leaseKey(r))
			g, ok := bySlot[slot]
			if !ok {
				g = len(groups)
				bySlot[slot] = g
				groups = append(groups, nil)
			}
			groups[g] = append(groups[g], i)
		}
	}
	calls := make([]*call, len(groups))
	for g, idx := range groups {
		keys := make([]string, len(idx))
		for j, i := range idx {
			keys[j] = s.leaseKey(resources[i])
		}
		calls[g] = &call{sc: getScript, keys: keys}
	}
	if len(calls) == 1 {
		calls[0].res, calls[0].err = s.eval(ctx, getScript, calls[0].keys)
	} else {
		s.runCalls(ctx, calls, false)
	}
	var found []int // indexes of resources held, in order
	recs := map[int]driver.Record{}
	for g, idx := range groups {
		c := calls[g]
		if c.err != nil {
			return nil, c.err
		}
		answers, ok := c.res.([]any)
		if !ok || len(answers) != len(idx) {
			return nil, fmt.Errorf("unexpected reply %v", c.res)
		}
		for j, a := range answers {
			a, ok := a.([]any)
			if !ok {
				return nil, fmt.Errorf("unexpected reply %v", c.res)
			}
			if len(a) == 0 {
				continue
			}
			rec, err := holderOf(resources[idx[j]], a)
			if err != nil {
				return nil, err
			}
			recs[idx[j]] = rec
			found = append(found, idx[j])
		}
	}
	slices.Sort(found)
	out := make([]driver.Record, 0, len(found))
	for _, i := range found {
		out = append(out, recs[i])
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
	keyPrefix, suffix := s.prefix+"lease:", ""
	if s.cluster != nil {
		keyPrefix, suffix = s.prefix+"lease:{", "}"
	}
	match := globEscape(keyPrefix+prefix) + "*"
	var mu sync.Mutex
	seen := map[string]bool{}
	var out []driver.Record
	var pending []string
	flush := func(ctx context.Context) error {
		if len(pending) == 0 {
			return nil
		}
		recs, err := s.read(ctx, pending)
		pending = pending[:0]
		out = append(out, recs...)
		return err
	}
	scan := func(ctx context.Context, c *redis.Client) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, match, listCount).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, k := range keys {
				// On a cluster the pattern also matches the key of a name
				// that the prefix extends past a '}' (the key of "a" starts
				// the keys of "a}..."): the name must start with prefix.
				r, ok := strings.CutSuffix(strings.TrimPrefix(k, keyPrefix), suffix)
				if !ok || !strings.HasPrefix(r, prefix) || seen[r] || driver.ValidateResource(r) != nil {
					continue
				}
				seen[r] = true
				pending = append(pending, r)
				if len(pending) == maxBatch {
					if err := flush(ctx); err != nil {
						mu.Unlock()
						return err
					}
				}
			}
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	var err error
	if s.cluster != nil {
		// Every master's keys; a key that a slot migration has on two
		// nodes is read once.
		err = s.cluster.ForEachMaster(ctx, scan)
	} else {
		err = scan(ctx, s.single)
	}
	if err == nil {
		err = flush(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("redis store: list %q: %w", prefix, err)
	}
	slices.SortFunc(out, func(a, b driver.Record) int { return strings.Compare(a.Resource, b.Resource) })
	return out, nil
}
