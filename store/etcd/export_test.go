package etcd

import clientv3 "go.etcd.io/etcd/client/v3"

// Client returns the store's etcd client.
func (s *Store) Client() *clientv3.Client { return s.cli }
