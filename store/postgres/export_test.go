package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-go/tenure/driver"
)

// GetIn runs Get's statement in tx, so that a test can hold the
// statement's snapshot while other sessions commit and the clock moves on.
func GetIn(ctx context.Context, s *Store, tx pgx.Tx, resource string) (driver.Record, error) {
	return s.get(ctx, tx, resource)
}

// ListIn runs List's statement in tx.
func ListIn(ctx context.Context, s *Store, tx pgx.Tx, prefix string) ([]driver.Record, error) {
	return s.list(ctx, tx, prefix)
}

// GateWaiting returns how many of s's statements wait for a connection:
// releases, and the others.
func GateWaiting(s *Store) (releases, others int) {
	s.gate.mu.Lock()
	defer s.gate.mu.Unlock()
	return len(s.gate.first), len(s.gate.others)
}

// Closing reports whether Close was called on s.
func (s *Store) Closing() bool { return s.closed.Load() }

// Pool returns the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// SetListenCheck sets s's bound on the listening connection's silence
// (ListenCheck); call it before the first Subscribe.
func SetListenCheck(s *Store, d time.Duration) { s.listenCheck = d }
