package sqlite

import (
	"context"
	"time"
)

// WithClocks returns cfg with the host clock (its epoch and the time on it)
// and the wall clock replaced; nil keeps the default.
func WithClocks(cfg Config, host func() (string, time.Duration, error), wall func() time.Time) Config {
	cfg.hostClock, cfg.wallClock = host, wall
	return cfg
}

// SweepNow deletes the rows of s's file that hold no live lease, as the
// sweep that runs once a minute does, and returns how many it deleted.
func SweepNow(ctx context.Context, s *Store) (int, error) { return s.sweepOnce(ctx) }

// WriterSynchronous returns the writer connection's PRAGMA synchronous:
// 1 (NORMAL) or 2 (FULL).
func WriterSynchronous(ctx context.Context, s *Store) (int, error) {
	var n int
	err := s.conn.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&n)
	return n, err
}

// SetNetworkFS makes Open see every directory as on the file system that
// fs names ("" for a local one), until the returned function restores it.
func SetNetworkFS(fs string) func() {
	old := fsOf
	fsOf = func(string) string { return fs }
	return func() { fsOf = old }
}
