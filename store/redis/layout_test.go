package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/testserver"
	tredis "github.com/tenure-go/tenure/store/redis"
)

// prefixed returns a store on $TENURE_REDIS with a key prefix of the
// test's own, so that the test can look at every key the store wrote.
func prefixed(t testing.TB, mod ...func(*tredis.Config)) (*tredis.Store, string) {
	t.Helper()
	o, _ := naming.NewOwner("p")
	prefix := "tenuretest:" + o[len(o)-12:] + ":"
	s := open(t, append([]func(*tredis.Config){func(c *tredis.Config) { c.Prefix = prefix }}, mod...)...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, k := range keys(ctx, t, s.Client(), prefix) {
			s.Client().Del(ctx, k)
		}
	})
	return s, prefix
}

// keys returns the keys that start with prefix, sorted.
func keys(ctx context.Context, t testing.TB, c *goredis.Client, prefix string) []string {
	t.Helper()
	var out []string
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// TestNoStateLeftBehind: leases released or expired leave no key behind
// but the store's one token counter (the old layout kept a counter per
// resource and an index entry for every name ever used).
func TestNoStateLeftBehind(t *testing.T) {
	s, prefix := prefixed(t)
	ctx := testserver.Ctx(t)
	lk := testserver.Locker(t, s)
	for i := range 20 {
		l, err := lk.TryAcquire(ctx, fmt.Sprintf("r%d", i), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	owner, _ := naming.NewOwner("expiring")
	for i := range 5 {
		if _, err := s.Acquire(ctx, fmt.Sprintf("e%d", i), owner, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if got, want := keys(ctx, t, s.Client(), prefix), []string{prefix + "token"}; !equal(got, want) {
		t.Fatalf("keys left: %q, want %q", got, want)
	}
}

func equal(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// TestTokensSurviveLostData: the fencing token never goes back when the
// lease key, the counter, or every key of the store is deleted by hand: the
// next token is above the last one (the server's clock is its floor). A
// holder whose key was deleted learns it at its next renewal: the store
// says the grant no longer holds the lease, and names nobody.
func TestTokensSurviveLostData(t *testing.T) {
	s, prefix := prefixed(t)
	ctx := testserver.Ctx(t)
	c := s.Client()
	a, b := testserver.Locker(t, s), testserver.Locker(t, s)
	r := "r"
	la, err := a.TryAcquire(ctx, r, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	last := la.Token()

	// The lease key deleted by hand.
	if err := c.Del(ctx, prefix+"lease:"+r).Err(); err != nil {
		t.Fatal(err)
	}
	err = la.Renew(ctx)
	var held *tenure.HeldError
	if !errors.Is(err, tenure.ErrNotHolder) || errors.As(err, &held) {
		t.Fatalf("renewal after the key was deleted: %v; want ErrNotHolder naming nobody", err)
	}
	lb, err := b.TryAcquire(ctx, r, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= last {
		t.Fatalf("token after the lease key was deleted: %d <= %d", lb.Token(), last)
	}
	last = lb.Token()
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The counter deleted, then every key (FLUSHDB of the store's keys).
	for _, del := range [][]string{{prefix + "token"}, nil} {
		if del == nil {
			del = keys(ctx, t, c, prefix)
		}
		if len(del) > 0 {
			if err := c.Del(ctx, del...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		l, err := a.TryAcquire(ctx, r, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("token after deleting %q: %d <= %d", del, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A counter set back by hand (a restore from an old backup).
	if err := c.Set(ctx, prefix+"token", "5", 0).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := a.TryAcquire(ctx, r, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= last {
		t.Fatalf("token after the counter was set back: %d <= %d", l.Token(), last)
	}
	_ = l.Release(ctx)

	// A counter ahead of the clock: tokens go on from it.
	ahead := uint64(time.Now().UnixMicro()) + uint64(time.Hour/time.Microsecond)
	if err := c.Set(ctx, prefix+"token", ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	l, err = a.TryAcquire(ctx, r, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != ahead+1 {
		t.Fatalf("token after a counter ahead of the clock at %d: %d, want %d", ahead, l.Token(), ahead+1)
	}
	_ = l.Release(ctx)

	// A counter beyond 2^53 (set by hand): refused, and left as it was.
	const beyond = "9007199254740993"
	if err := c.Set(ctx, prefix+"token", beyond, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if l, err := a.TryAcquire(ctx, r, 30*time.Second); err == nil || !strings.Contains(err.Error(), "2^53") {
		t.Fatalf("acquire with a counter beyond 2^53: %v, %v", l, err)
	}
	if got := c.Get(ctx, prefix+"token").Val(); got != beyond {
		t.Fatalf("counter after the refused grant: %q, want %q", got, beyond)
	}
	if n := c.Exists(ctx, prefix+"lease:"+r).Val(); n != 0 {
		t.Fatal("the refused grant left a lease")
	}
}

// TestNotHolderNamesHolder (rule 8): a renewal or release of a grant whose
// lease expired and was taken by another owner names that owner.
func TestNotHolderNamesHolder(t *testing.T) {
	s := open(t)
	ctx := testserver.Ctx(t)
	r := testserver.Resource(t)
	a, _ := naming.NewOwner("a")
	b, _ := naming.NewOwner("b")
	ra, err := s.Acquire(ctx, r, a, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(80 * time.Millisecond)
	rb, err := s.Acquire(ctx, r, b, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for op, err := range map[string]error{
		"renew":   s.Renew(ctx, r, a, ra.Token, 30*time.Second),
		"release": s.Release(ctx, r, a, ra.Token),
		"batch":   s.RenewBatch(ctx, []driver.Renewal{{Resource: r, Owner: a, Token: ra.Token, TTL: 30 * time.Second}})[0],
	} {
		var held *driver.HeldError
		if !errors.Is(err, driver.ErrLeaseLost) || !errors.As(err, &held) {
			t.Fatalf("%s of the expired grant: %v; want ErrLeaseLost with a HeldError", op, err)
		}
		if h := held.Holder; h.Owner != b || h.Token != rb.Token || h.TTL != 30*time.Second || h.Remaining <= 0 {
			t.Fatalf("%s names %+v; want %s token %d", op, h, b, rb.Token)
		}
	}
	// The same owner string with another token (an earlier grant's late
	// request) is not the holder either.
	if err := s.Renew(ctx, r, b, rb.Token-1, time.Second); !errors.Is(err, driver.ErrLeaseLost) {
		t.Fatalf("renew with a stale token: %v", err)
	}
	// Nothing changed: b still holds it with its TTL.
	got, err := s.Get(ctx, r)
	if err != nil || got.Owner != b || got.Token != rb.Token || got.Remaining < 29*time.Second {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	if err := s.Release(ctx, r, b, rb.Token); err != nil {
		t.Fatal(err)
	}
	err = s.Release(ctx, r, b, rb.Token)
	var held *driver.HeldError
	if !errors.Is(err, driver.ErrLeaseLost) || errors.As(err, &held) {
		t.Fatalf("second release: %v; want ErrLeaseLost naming nobody", err)
	}
}

// commandCounter counts the commands a store sends.
type commandCounter struct{ n atomic.Int64 }

func (h *commandCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *commandCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *commandCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestRenewBatch: one script call renews many leases, each with its own
// answer: renewed (also with a new TTL), gone, held by another grant, bad
// input (refused before any I/O).
func TestRenewBatch(t *testing.T) {
	count := &commandCounter{}
	s := open(t, func(c *tredis.Config) { c.Hooks = append(c.Hooks, count) })
	ctx := testserver.Ctx(t)
	base := testserver.Resource(t)
	a, _ := naming.NewOwner("a")
	b, _ := naming.NewOwner("b")
	const n = 2500 // three script calls
	var batch []driver.Renewal
	for i := range n {
		r := fmt.Sprintf("%s/%d", base, i)
		rec, err := s.Acquire(ctx, r, a, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, driver.Renewal{Resource: r, Owner: a, Token: rec.Token, TTL: 30 * time.Second})
	}
	batch[1].TTL = time.Minute
	// 2: gone; 3: taken by b; 4: bad input; 5: a stale token.
	if err := s.Release(ctx, batch[2].Resource, a, batch[2].Token); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, batch[3].Resource, a, batch[3].Token); err != nil {
		t.Fatal(err)
	}
	rb, err := s.Acquire(ctx, batch[3].Resource, b, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	batch[4].TTL = 0
	batch[5].Token--
	_ = s.RenewBatch(ctx, batch[:1]) // loads the script
	before := count.n.Load()
	errs := s.RenewBatch(ctx, batch)
	if got := count.n.Load() - before; got != 3 {
		t.Errorf("%d leases renewed with %d commands, want 3", n, got)
	}
	if len(errs) != n {
		t.Fatalf("%d answers for %d leases", len(errs), n)
	}
	var held *driver.HeldError
	for i, err := range errs {
		switch i {
		case 2, 5:
			if !errors.Is(err, driver.ErrLeaseLost) || errors.As(err, &held) && i == 2 {
				t.Errorf("lease %d: %v; want ErrLeaseLost", i, err)
			}
		case 3:
			if !errors.As(err, &held) || held.Holder.Owner != b || held.Holder.Token != rb.Token {
				t.Errorf("lease %d: %v; want a HeldError naming b", i, err)
			}
		case 4:
			if !errors.Is(err, driver.ErrInvalidTTL) {
				t.Errorf("lease %d: %v; want ErrInvalidTTL", i, err)
			}
		default:
			if err != nil {
				t.Errorf("lease %d: %v", i, err)
			}
		}
	}
	got, err := s.Get(ctx, batch[1].Resource)
	if err != nil || got.TTL != time.Minute || got.Remaining < 59*time.Second {
		t.Fatalf("lease renewed with a new TTL: %+v, %v", got, err)
	}
	// Clean up.
	for i, r := range batch {
		if i != 2 && i != 3 {
			_ = s.Release(ctx, r.Resource, a, r.Token)
		}
	}
	_ = s.Release(ctx, batch[3].Resource, b, rb.Token)

	// A failed call fails every lease of it, definitely.
	s.Close()
	for i, err := range s.RenewBatch(ctx, batch[:3]) {
		if err == nil || errors.Is(err, driver.ErrUnknownOutcome) {
			t.Errorf("lease %d on a closed store: %v", i, err)
		}
	}
}

// TestListScans: List finds leases by SCAN, across more than one script
// call, with a prefix that holds glob characters, and leaves out expired
// leases and keys that are not leases.
func TestListScans(t *testing.T) {
	s, prefix := prefixed(t)
	ctx := testserver.Ctx(t)
	a, _ := naming.NewOwner("a")
	var want []string
	for i := range 1200 {
		r := fmt.Sprintf("x*[?]\\^/%04d", i)
		if _, err := s.Acquire(ctx, r, a, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	for _, r := range []string{"x*[?]\\^", "xy/1", "x*[?]\\^expired"} {
		ttl := 30 * time.Second
		if strings.HasSuffix(r, "expired") {
			ttl = time.Millisecond
		}
		if _, err := s.Acquire(ctx, r, a, ttl); err != nil {
			t.Fatal(err)
		}
	}
	// Not a lease value: left out of List (and free for Acquire).
	if err := s.Client().Set(ctx, prefix+"lease:x*[?]\\^/junk", "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	recs, err := s.List(ctx, "x*[?]\\^/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rec := range recs {
		got = append(got, rec.Resource)
		if rec.Owner != a || rec.TTL != 30*time.Second || rec.Remaining <= 0 || rec.Token == 0 {
			t.Fatalf("record %+v", rec)
		}
	}
	if !equal(got, want) {
		t.Fatalf("List found %d leases, want %d (first %q)", len(got), len(want), got[:min(3, len(got))])
	}
	all, err := s.List(ctx, "")
	if err != nil || len(all) != len(want)+2 {
		t.Fatalf("List(\"\"): %d leases, %v; want %d", len(all), err, len(want)+2)
	}
}

// TestPartialState: keys left by something other than tenure never block a
// resource forever nor reset its token: a value that is not a lease is a
// free resource; a lease without an expiry (PERSIST by hand) gets its
// recorded TTL back at the next acquire attempt; a key of another type is
// refused with an error that says how to repair it.
func TestPartialState(t *testing.T) {
	s, prefix := prefixed(t)
	ctx := testserver.Ctx(t)
	c := s.Client()
	a, _ := naming.NewOwner("a")
	b, _ := naming.NewOwner("b")

	if err := c.Set(ctx, prefix+"lease:junk", "not a lease", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Acquire(ctx, "junk", a, 30*time.Second)
	if err != nil || rec.Token < uint64(time.Now().Add(-time.Minute).UnixMicro()) {
		t.Fatalf("acquire over a value that is not a lease: %+v, %v", rec, err)
	}

	rec, err = s.Acquire(ctx, "persisted", a, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Persist(ctx, prefix+"lease:persisted").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx, "persisted", b, 30*time.Second)
	var held *driver.HeldError
	if !errors.As(err, &held) || held.Holder.Owner != a {
		t.Fatalf("acquire of a lease without expiry: %v; want held by a", err)
	}
	if pttl := c.PTTL(ctx, prefix+"lease:persisted").Val(); pttl <= 0 || pttl > 200*time.Millisecond {
		t.Fatalf("expiry after the acquire attempt: %v, want the lease's TTL back", pttl)
	}
	time.Sleep(250 * time.Millisecond)
	rb, err := s.Acquire(ctx, "persisted", b, 30*time.Second)
	if err != nil || rb.Token <= rec.Token {
		t.Fatalf("acquire after the restored expiry: %+v, %v", rb, err)
	}

	if err := c.RPush(ctx, prefix+"lease:list", "x").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx, "list", a, 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "delete it") || errors.Is(err, driver.ErrUnknownOutcome) {
		t.Fatalf("acquire over a list: %v; want a definite error that says to delete the key", err)
	}
}

// The scripts of the layout before this one (a hash per lease, a counter
// per resource, an index of every name), as a process not yet upgraded
// runs them.
var (
	oldAcquire = goredis.NewScript(`
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
	oldRelease = goredis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
	redis.call('DEL', KEYS[1])
	redis.call('PUBLISH', ARGV[3], ARGV[4])
	return 1
end
return 0`)
)

// oldProcess acquires and releases as the earlier layout did.
type oldProcess struct {
	c      *goredis.Client
	prefix string
}

func (o oldProcess) acquire(ctx context.Context, r, owner string) (granted bool, token uint64, err error) {
	a, err := oldAcquire.Run(ctx, o.c, []string{o.prefix + "lease:" + r, o.prefix + "token:" + r, o.prefix + "index"}, owner, 30000, r).Slice()
	if err != nil {
		return false, 0, err
	}
	v := make([]string, len(a))
	for i, x := range a {
		v[i] = fmt.Sprint(x)
	}
	if v[0] == "1" {
		// The old script prints a token above 10^14 in floating point
		// ("1.79608635524e+15"), so an old process fails to read the
		// tokens that this version keeps its counters at; a retry of the
		// same grant reads the exact token from the hash, as this does.
		token, err = o.c.HGet(ctx, o.prefix+"lease:"+r, "token").Uint64()
		return true, token, err
	}
	token, err = strconv.ParseUint(v[2], 10, 64)
	return false, token, err
}

func (o oldProcess) release(ctx context.Context, r, owner string, token uint64) error {
	n, err := oldRelease.Run(ctx, o.c, []string{o.prefix + "lease:" + r}, owner, token, o.prefix+"released", r).Int()
	if err == nil && n != 1 {
		err = errors.New("old release: not held")
	}
	return err
}

// TestUpgradeFromOldLayout: processes of the earlier layout and of this one
// share a prefix during an upgrade. An old lease excludes new acquires (and
// the holder is named); a new lease makes old acquires fail (WRONGTYPE: an
// error, never a grant); tokens never go back in either direction, old
// counters included; RemoveOldLayout leaves only the counter and live
// leases, and tokens still go up.
func TestUpgradeFromOldLayout(t *testing.T) {
	_, prefix := prefixed(t)
	ctx := testserver.Ctx(t)
	base, err := tredis.ParseURL(addr(t))
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(base.Options)
	defer c.Close()
	old := oldProcess{c: c, prefix: prefix}
	oldOwner, _ := naming.NewOwner("old")
	newOwner, _ := naming.NewOwner("new")

	// The old version ran first: an old counter, and an old lease held.
	if err := c.Set(ctx, prefix+"token:r", 41, 0).Err(); err != nil {
		t.Fatal(err)
	}
	ok, tok, err := old.acquire(ctx, "r", oldOwner)
	if err != nil || !ok || tok != 42 {
		t.Fatalf("old acquire: %v %d %v", ok, tok, err)
	}
	last := tok

	s := open(t, func(c *tredis.Config) { c.Prefix = prefix })
	_, err = s.Acquire(ctx, "r", newOwner, 30*time.Second)
	var held *driver.HeldError
	if !errors.As(err, &held) || held.Holder.Owner != oldOwner || held.Holder.Token != 42 || held.Holder.TTL != 30*time.Second {
		t.Fatalf("new acquire of an old lease: %v; want held by the old owner, token 42", err)
	}
	if rec, err := s.Get(ctx, "r"); err != nil || rec.Owner != oldOwner {
		t.Fatalf("Get of an old lease: %+v, %v", rec, err)
	}
	if recs, err := s.List(ctx, ""); err != nil || len(recs) != 1 || recs[0].Owner != oldOwner {
		t.Fatalf("List with an old lease: %+v, %v", recs, err)
	}
	if err := s.Renew(ctx, "r", newOwner, 42, time.Second); !errors.As(err, &held) || held.Holder.Owner != oldOwner {
		t.Fatalf("renew of an old lease by another owner: %v", err)
	}
	if err := old.release(ctx, "r", oldOwner, 42); err != nil {
		t.Fatal(err)
	}

	// New grants, old grants, in turn: tokens go up every time.
	for i := range 3 {
		rec, err := s.Acquire(ctx, "r", newOwner, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Token <= last {
			t.Fatalf("round %d: new token %d <= %d", i, rec.Token, last)
		}
		last = rec.Token
		if ok, _, err := old.acquire(ctx, "r", oldOwner); ok || err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("round %d: old acquire of a new lease: granted %v, %v; want a WRONGTYPE error", i, ok, err)
		}
		if err := s.Release(ctx, "r", newOwner, rec.Token); err != nil {
			t.Fatal(err)
		}
		ok, tok, err := old.acquire(ctx, "r", oldOwner)
		if err != nil || !ok {
			t.Fatalf("round %d: old acquire: %v %v", i, ok, err)
		}
		if tok <= last {
			t.Fatalf("round %d: old token %d <= %d", i, tok, last)
		}
		last = tok
		if err := old.release(ctx, "r", oldOwner, tok); err != nil {
			t.Fatal(err)
		}
	}

	// The old version is gone: remove its keys.
	if err := c.Set(ctx, prefix+"token:other", 7, 0).Err(); err != nil {
		t.Fatal(err)
	}
	n, err := s.RemoveOldLayout(ctx)
	if err != nil || n != 3 {
		t.Fatalf("RemoveOldLayout: %d keys, %v; want 3 (two counters, the index)", n, err)
	}
	if got, want := keys(ctx, t, c, prefix), []string{prefix + "token"}; !equal(got, want) {
		t.Fatalf("keys after RemoveOldLayout: %q, want %q", got, want)
	}
	rec, err := s.Acquire(ctx, "r", newOwner, 30*time.Second)
	if err != nil || rec.Token <= last {
		t.Fatalf("acquire after RemoveOldLayout: %+v, %v (last token %d)", rec, err, last)
	}
	_ = s.Release(ctx, "r", newOwner, rec.Token)
	// A store opened now sees no old layout: it keeps no old counter.
	s2 := open(t, func(c *tredis.Config) { c.Prefix = prefix })
	rec, err = s2.Acquire(ctx, "r", newOwner, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = s2.Release(ctx, "r", newOwner, rec.Token)
	if got, want := keys(ctx, t, c, prefix), []string{prefix + "token"}; !equal(got, want) {
		t.Fatalf("keys after a grant on the new layout: %q, want %q", got, want)
	}
}

// TestReleasePublishesOnlyToWaiters: a release that nobody waits for sends
// no message; with a waiter (a blocking Acquire), the release publishes and
// wakes it.
func TestReleasePublishesOnlyToWaiters(t *testing.T) {
	s, prefix := prefixed(t)
	ctx := testserver.Ctx(t)
	sub := s.Client().Subscribe(ctx, prefix+"released")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the confirmation
		t.Fatal(err)
	}
	msgs := sub.Channel()
	a := testserver.Locker(t, s)
	la, err := a.TryAcquire(ctx, "r", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		t.Fatalf("a release nobody waited for published %q", m.Payload)
	case <-time.After(300 * time.Millisecond):
	}
	la, err = a.TryAcquire(ctx, "r", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other := open(t, func(c *tredis.Config) { c.Prefix = prefix })
	b := testserver.Locker(t, other, tenure.WithRetry(time.Hour, time.Hour))
	waiting := make(chan struct{})
	got := make(chan error, 1)
	go func() {
		var once atomic.Bool
		lb, err := b.Acquire(ctx, "r", 30*time.Second, tenure.OnWait(func(*tenure.HeldError, time.Duration) {
			if !once.Swap(true) {
				close(waiting)
			}
		}))
		if err == nil {
			err = lb.Release(ctx)
		}
		got <- err
	}()
	<-waiting
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		if m.Payload != "r" {
			t.Fatalf("published %q, want r", m.Payload)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the release a waiter waited for published nothing")
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken")
	}
}

// TestWaitMarkKept: the mark a waiter's attempt puts on a lease survives
// the holder's renewals (same TTL, another TTL, in a batch) and Get, List
// and the holder's own release read through it; the release then wakes a
// waiter that polls once an hour. A holder that watches its own lease
// (WithReleaseWatch) learns of a forced release at once: Subscribe marked
// its lease.
func TestWaitMarkKept(t *testing.T) {
	s, prefix := prefixed(t)
	ctx := testserver.Ctx(t)
	a := testserver.Locker(t, s)
	la, err := a.TryAcquire(ctx, "r", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other := open(t, func(c *tredis.Config) { c.Prefix = prefix })
	// The waiter's clock never moves: only a notification wakes it.
	b := testserver.Locker(t, other, tenure.WithClock(clock.NewFake()))
	waiting := make(chan struct{})
	got := make(chan error, 1)
	start := make(chan time.Time, 1)
	go func() {
		var once atomic.Bool
		lb, err := b.Acquire(ctx, "r", 30*time.Second, tenure.OnWait(func(*tenure.HeldError, time.Duration) {
			if !once.Swap(true) {
				close(waiting)
			}
		}))
		if err == nil {
			start <- time.Now()
			err = lb.Release(ctx)
		}
		got <- err
	}()
	<-waiting
	key := prefix + "lease:r"
	if v := s.Client().Get(ctx, key).Val(); !strings.HasSuffix(v, "+") {
		t.Fatalf("lease value %q after a waiter's attempt: no mark", v)
	}
	if err := la.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, "r", la.Owner(), la.Token(), 40*time.Second); err != nil {
		t.Fatal(err)
	}
	if errs := s.RenewBatch(ctx, []driver.Renewal{{Resource: "r", Owner: la.Owner(), Token: la.Token(), TTL: 30 * time.Second}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if v := s.Client().Get(ctx, key).Val(); !strings.HasSuffix(v, "+") {
		t.Fatalf("lease value %q after renewals: the mark is gone", v)
	}
	if rec, err := s.Get(ctx, "r"); err != nil || rec.Owner != la.Owner() || rec.TTL != 30*time.Second {
		t.Fatalf("Get of a marked lease: %+v, %v", rec, err)
	}
	if recs, err := s.List(ctx, ""); err != nil || len(recs) != 1 || recs[0].Owner != la.Owner() {
		t.Fatalf("List of a marked lease: %+v, %v", recs, err)
	}
	released := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Not woken, the waiter gives up when ctx ends.
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	t.Logf("waiter granted %v after the release", (<-start).Sub(released))

	// A holder watching its own lease.
	// Its clock never moves: no renewal tells it, only the watch.
	w := testserver.Locker(t, s, tenure.WithReleaseWatch(), tenure.WithClock(clock.NewFake()))
	lw, err := w.TryAcquire(ctx, "w", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for !strings.HasSuffix(s.Client().Get(ctx, prefix+"lease:w").Val(), "+") {
		if ctx.Err() != nil {
			t.Fatal("a watched lease was never marked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rec, err := s.Get(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx, "w", rec.Owner, rec.Token); err != nil { // an operator's forced release
		t.Fatal(err)
	}
	select {
	case <-lw.Done():
		if !errors.Is(lw.Err(), tenure.ErrNotHolder) {
			t.Fatalf("watched lease ended with %v", lw.Err())
		}
	case <-ctx.Done():
		t.Fatal("the holder did not learn of the forced release")
	}
}

// TestWaitersHandDown: several blocked Acquires of one Store, on clocks
// that never move, are handed the resource one after the other by releases alone:
// a lease granted while others of the Store still wait is marked from its
// grant, so its release wakes the next (a lease granted unmarked would
// leave them asleep).
func TestWaitersHandDown(t *testing.T) {
	s, _ := prefixed(t)
	ctx := testserver.Ctx(t)
	holder := testserver.Locker(t, s)
	lh, err := holder.TryAcquire(ctx, "r", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	var waiting sync.WaitGroup
	granted := make(chan error, n)
	for i := 0; i < n; i++ {
		waiting.Add(1)
		go func() {
			var once sync.Once
			// Its clock never moves: only a notification wakes it.
			lk := testserver.Locker(t, s, tenure.WithClock(clock.NewFake()))
			l, err := lk.Acquire(ctx, "r", 30*time.Second, tenure.OnWait(func(*tenure.HeldError, time.Duration) { once.Do(waiting.Done) }))
			if err == nil {
				err = l.Release(ctx)
			}
			once.Do(waiting.Done)
			granted <- err
		}()
	}
	waiting.Wait()
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// No deadline of the test's own: a waiter not woken gives up when ctx
	// ends, with an error that says so.
	for i := 0; i < n; i++ {
		if err := <-granted; err != nil {
			t.Fatalf("%d of %d waiters granted; the next one: %v", i, n, err)
		}
	}
}

// TestFirstSubscribeWakesNobody: the first Subscribe of a Store starts its
// pub/sub connection; nothing can have been missed before it listened (the
// caller tries again after Subscribe returns), so the subscriber is not
// woken. A wake-up then would send that waiter to the store for nothing
// and, in a queue of waiters, let a later one subscribe ahead of it.
func TestFirstSubscribeWakesNobody(t *testing.T) {
	s, prefix := prefixed(t)
	ctx := testserver.Ctx(t)
	ch, stop, err := s.Subscribe(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// The listening connection handles its messages in order: once a
	// release published after the subscription reaches "second", anything
	// the subscription's confirmation set off has been done.
	ch2, stop2, err := s.Subscribe(ctx, "second")
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	if err := s.Client().Publish(ctx, prefix+"released", "second").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch2:
	case <-ctx.Done():
		t.Fatal("the release of \"second\" never arrived")
	}
	select {
	case <-ch:
		t.Fatal("the first subscriber was woken though nothing was released")
	default:
	}
}
