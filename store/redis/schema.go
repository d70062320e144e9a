package redis

import (
	"context"
	"fmt"
	"strconv"
)

// leaseKey is the key of the lease on resource: <prefix>lease:<resource>,
// and on a cluster <prefix>lease:{<resource>}, the resource its hash tag.
func (s *Store) leaseKey(resource string) string {
	if s.cluster != nil {
		return s.prefix + "lease:{" + resource + "}"
	}
	return s.prefix + "lease:" + resource
}

// counterKey is the token counter that grants on the lease key leaseKey
// use: the store's one counter, and on a cluster the counter of the lease
// key's hash slot, <prefix>token:{<tag>} with the tag of that slot (see
// slotTag), so that a lease and its counter share a slot and move
// together.
func (s *Store) counterKey(leaseKey string) string {
	if s.cluster != nil {
		return s.prefix + "token:{" + slotTag(keySlot(leaseKey)) + "}"
	}
	return s.counter
}

// The keys of the layout of earlier versions.
func (s *Store) oldCounterKey(resource string) string { return s.prefix + "token:" + resource }
func (s *Store) oldIndexKey() string                  { return s.prefix + "index" }

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
	if s.cluster != nil {
		return 0, nil // no earlier version ran on a cluster
	}
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
				if err := raiseScript.Run(ctx, s.single, []string{s.counter}, strconv.FormatUint(top, 10)).Err(); err != nil {
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
