package etcd

import "time"

// SetListenCheck sets s's bound on a watch's silence (ListenCheck); call
// it before the first Subscribe.
func SetListenCheck(s *Store, d time.Duration) { s.listenCheck = d }
