package cassandra

import "sync"

// tokenCache remembers the last fencing token seen per resource, so that an
// acquire of a free resource can name the expected token in its first
// conditional write. A stale or missing entry costs one more round trip,
// never correctness: the conditional write checks the token in the store.
type tokenCache struct {
	mu  sync.Mutex
	max int
	m   map[string]uint64
}

func newTokenCache(max int) *tokenCache {
	return &tokenCache{max: max, m: make(map[string]uint64)}
}

func (c *tokenCache) get(resource string) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.m[resource]
	return t, ok
}

// set records token as the last one seen on resource (0 means nothing is
// known and removes the entry).
func (c *tokenCache) set(resource string, token uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if token == 0 {
		delete(c.m, resource)
		return
	}
	if _, ok := c.m[resource]; !ok && len(c.m) >= c.max {
		// Drop about an eighth of the entries, in Go's random map order.
		n := c.max/8 + 1
		for k := range c.m {
			delete(c.m, k)
			if n--; n == 0 {
				break
			}
		}
	}
	c.m[resource] = token
}
