package election

import (
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

// MaxValueLen is the longest value a candidate may publish (Config.Value),
// in bytes.
const MaxValueLen = naming.MaxValueLen

// lockerID returns the readable id of a candidate's Locker: the identity
// (tenure.DefaultOwnerID() when empty), and the encoded value after a
// separator when there is one. The error wraps tenure.ErrInvalidOwner.
func lockerID(identity, value string) (string, error) {
	if identity == "" {
		identity = tenure.DefaultOwnerID()
	}
	return naming.CandidateID(identity, value)
}

// Leader is the holder of an election's lease, as the store reported it.
// Every string in it comes from another process: print it escaped.
type Leader struct {
	// Identity is the leader's readable id (Config.Identity).
	Identity string
	// Value is the value the leader published (Config.Value), or "" when it
	// published none.
	Value string
	// Owner is the owner string of the leader's grant, as the store keeps
	// it: the identity, the encoded value, a nonce and the grant's number.
	Owner string
	// Token is the fencing token of the leader's term; 0 on a store mode
	// that keeps no tokens (Cassandra's Jaeger-compatible mode).
	Token uint64
	// TTL is the TTL the leader last wrote, where the store keeps it;
	// otherwise 0.
	TTL time.Duration
	// Remaining is the time that was left before the store would expire the
	// lease unless renewed, as the store saw it when it answered; 0 when the
	// store does not say.
	Remaining time.Duration
}

// leaderOf returns the leader that a store's record of an election's lease
// names.
func leaderOf(rec driver.Record) Leader {
	id, v := naming.ParseCandidate(rec.Owner)
	return Leader{Identity: id, Value: v, Owner: rec.Owner, Token: rec.Token, TTL: rec.TTL, Remaining: rec.Remaining}
}

// sameTerm reports whether a and b are the same term of one leader: the
// same fencing token, or, where the store keeps none, the same owner
// string. An empty Leader (nobody leads) is the same only as another.
func sameTerm(a, b Leader) bool {
	if a.Owner == "" || b.Owner == "" {
		return a.Owner == b.Owner
	}
	if a.Token != 0 || b.Token != 0 {
		return a.Token == b.Token
	}
	return a.Owner == b.Owner
}
