package etcd

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Client returns the store's etcd client.
func (s *Store) Client() *clientv3.Client { return s.cli }

// SetListenCheck sets s's bound on a watch's silence (ListenCheck); call
// it before the first Subscribe.
func SetListenCheck(s *Store, d time.Duration) { s.listenCheck = d }
