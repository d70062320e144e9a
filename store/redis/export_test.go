package redis

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// KeySlot is keySlot, for the tests of package redis_test.
var KeySlot = keySlot

// SetOnRedirect makes runOne call f with each answer it follows (ASK,
// MOVED, TRYAGAIN, NOSCRIPT), and returns the function that stops it.
func SetOnRedirect(f func(msg string)) func() {
	onRedirect.Store(&f)
	return func() { onRedirect.Store(nil) }
}

// Client returns the store's go-redis client: the client of the server or
// of Sentinel's master; nil on a cluster (see ClusterClient).
func (s *Store) Client() *redis.Client { return s.single }

// ClusterClient returns the store's go-redis cluster client, or nil when
// the store is not on a cluster.
func (s *Store) ClusterClient() *redis.ClusterClient { return s.cluster }

// SetListenCheck sets s's bound on the pub/sub connection's silence
// (ListenCheck); call it before the first Subscribe.
func SetListenCheck(s *Store, d time.Duration) { s.listenCheck = d }

// LoadReleaseScript loads the release script on c (a cluster node), as the
// store's first release there does after a NOSCRIPT answer.
func LoadReleaseScript(ctx context.Context, c *redis.Client) error {
	return releaseScript.Load(ctx, c).Err()
}
