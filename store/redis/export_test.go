package redis

import "time"

// SetListenCheck sets s's bound on the pub/sub connection's silence
// (ListenCheck); call it before the first Subscribe.
func SetListenCheck(s *Store, d time.Duration) { s.listenCheck = d }
