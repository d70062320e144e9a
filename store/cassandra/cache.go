package cassandra

import (
	"sync"
	"time"
)

// tokenCache remembers, per resource, the last fencing token seen, so that
// an acquire of a free resource can name the expected token in its first
// conditional write; the lease's last write seen (owner, token and write
// id), so that a renewal can name the write it renews over (casRenew); and
// the holder last seen, so that a holder whose row never expires can be
// told from one that keeps renewing (see Store.heldErr). A stale or missing
// entry costs one more round trip, never correctness: the conditional
// write checks the token and write id in the store.
type tokenCache struct {
	mu  sync.Mutex
	max int
	m   map[string]cacheEntry
}

type cacheEntry struct {
	token uint64 // highest valid token seen; 0 when unknown

	// The lease's last write seen: its owner, token and write id cell
	// (an int64, or nil for null); writeOwner is "" when unknown.
	writeOwner string
	writeToken uint64
	writeID    any

	// The holder last seen by an acquire that was refused: its owner and
	// token (0 when its row had none), since when this store has seen it
	// hold, and whether a read showed that its owner cell never expires.
	holder      string
	holderToken uint64
	since       time.Time
	checked     bool
	forever     bool
}

func newTokenCache(max int) *tokenCache {
	return &tokenCache{max: max, m: make(map[string]cacheEntry)}
}

func (c *tokenCache) get(resource string) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[resource]
	return e.token, ok && e.token > 0
}

// set records token as seen on resource. It only raises the entry's
// token: answers of concurrent calls arrive in no order, and a lower token
// read before a grant must not replace that grant's (a fresh grant after
// the row was deleted starts above it; see Store.nextToken). 0 records
// nothing.
func (c *tokenCache) set(resource string, token uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[resource]
	if token == 0 || (ok && e.token >= token) {
		return
	}
	e = c.entry(resource)
	e.token = token
	c.m[resource] = e
}

// lastWrite returns the id cell of the last write seen of resource's lease
// held by (owner, token); ok is false when none is known, and id is then
// nil.
func (c *tokenCache) lastWrite(resource, owner string, token uint64) (id any, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[resource]
	if e.writeOwner == "" || e.writeOwner != owner || e.writeToken != token {
		return nil, false
	}
	return e.writeID, true
}

// wrote records an applied write of resource's lease: now held by (owner,
// token) under write id.
func (c *tokenCache) wrote(resource, owner string, token uint64, id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(resource)
	e.writeOwner, e.writeToken, e.writeID = owner, token, id
	if token > e.token {
		e.token = token
	}
	c.m[resource] = e
}

// saw records the row of resource as a not-applied result or a read
// showed it: the write it names, when it holds a lease and carries its
// write id; else it forgets the write. Answers arrive in no order, so this
// may record a write older than the row's: that costs the next renewal one
// more try.
func (c *tokenCache) saw(resource string, r row) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[resource]
	if !r.hasOwner || r.token == 0 || r.writeIDCell == nil {
		if ok && e.writeOwner != "" {
			e.writeOwner, e.writeToken, e.writeID = "", 0, nil
			c.m[resource] = e
		}
		return
	}
	e = c.entry(resource)
	e.writeOwner, e.writeToken, e.writeID = r.owner, r.token, r.writeIDCell
	if r.token > e.token {
		e.token = r.token
	}
	c.m[resource] = e
}

// seen records that an acquire found resource held by holder with token
// (0: the row has no valid token) at now, and returns since when this
// store has seen that very holder hold it, and whether it was found never
// to expire (checked: a read of its row was made).
func (c *tokenCache) seen(resource, holder string, token uint64, now time.Time) (since time.Time, checked, forever bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(resource)
	if token > e.token { // only raised, as set does
		e.token = token
	}
	if e.holder != holder || e.holderToken != token || e.since.IsZero() {
		e.holder, e.holderToken, e.since, e.checked, e.forever = holder, token, now, false, false
	}
	c.m[resource] = e
	return e.since, e.checked, e.forever
}

// checked records the result of a read of holder's row: its owner cell
// never expires (forever), or it does, and then the holder counts as seen
// from now on.
func (c *tokenCache) checked(resource, holder string, token uint64, now time.Time, forever bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(resource)
	e.holder, e.holderToken, e.since, e.checked, e.forever = holder, token, now, true, forever
	c.m[resource] = e
}

// entry returns resource's entry, making room for it first when it is new
// and the cache is full. c.mu must be held.
func (c *tokenCache) entry(resource string) cacheEntry {
	e, ok := c.m[resource]
	if !ok && len(c.m) >= c.max {
		// Drop about an eighth of the entries, in Go's random map order.
		n := c.max/8 + 1
		for k := range c.m {
			delete(c.m, k)
			if n--; n == 0 {
				break
			}
		}
	}
	return e
}
