package redis

import "time"

// KeySlot is keySlot, for the tests of package redis_test.
var KeySlot = keySlot

// SetOnRedirect makes runOne call f with each answer it follows (ASK,
// MOVED, TRYAGAIN, NOSCRIPT), and returns the function that stops it.
func SetOnRedirect(f func(msg string)) func() {
	onRedirect.Store(&f)
	return func() { onRedirect.Store(nil) }
}

// SetListenCheck sets s's bound on the pub/sub connection's silence
// (ListenCheck); call it before the first Subscribe.
func SetListenCheck(s *Store, d time.Duration) { s.listenCheck = d }
