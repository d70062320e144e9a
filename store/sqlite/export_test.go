package sqlite

import "context"

// SweepNow deletes the rows of s's file that hold no live lease, as the
// sweep that runs once a minute does, and returns how many it deleted.
func SweepNow(ctx context.Context, s *Store) (int, error) { return s.sweepOnce(ctx) }
