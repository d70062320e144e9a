package election

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tenure-go/tenure/driver"
)

// ParticipantOptions configures a Participant, with the names of Jaeger's
// ElectionParticipantOptions.
type ParticipantOptions struct {
	// LeaderLeaseRefreshInterval is how often the leader renews its lease
	// (Jaeger's default: 5 s).
	LeaderLeaseRefreshInterval time.Duration
	// FollowerLeaseRefreshInterval is how often a follower tries to take the
	// lease, and the lease's TTL, as in Jaeger (default: 60 s). It must be
	// longer than LeaderLeaseRefreshInterval.
	FollowerLeaseRefreshInterval time.Duration
	// Identity is the participant's readable id (default "HOST:PID").
	Identity string
}

// Participant is a drop-in for Jaeger's DistributedElectionParticipant:
// Start, Close and IsLeader. Unlike Jaeger's, whose loop keeps the last
// answer when a lock call fails, so a leader that cannot reach its store
// goes on leading, IsLeader is false as soon as the lease's local deadline
// passes without a confirmed renewal.
type Participant struct {
	c *Candidate

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	closed  bool
	started bool
}

// NewParticipant returns a participant in the election on resource, with
// its lease in store.
func NewParticipant(store driver.Store, resource string, opts ParticipantOptions) (*Participant, error) {
	if opts.LeaderLeaseRefreshInterval == 0 {
		opts.LeaderLeaseRefreshInterval = 5 * time.Second
	}
	if opts.FollowerLeaseRefreshInterval == 0 {
		opts.FollowerLeaseRefreshInterval = 60 * time.Second
	}
	if opts.LeaderLeaseRefreshInterval >= opts.FollowerLeaseRefreshInterval {
		return nil, errors.New("election: the leader refresh interval must be shorter than the follower refresh interval (the lease's TTL)")
	}
	c, err := New(store, Config{
		Resource:      resource,
		Identity:      opts.Identity,
		TTL:           opts.FollowerLeaseRefreshInterval,
		RetryPeriod:   opts.FollowerLeaseRefreshInterval,
		RenewInterval: opts.LeaderLeaseRefreshInterval,
	})
	if err != nil {
		return nil, err
	}
	return &Participant{c: c}, nil
}

// Start begins campaigning in the background. It returns an error when the
// participant was started before or closed.
func (p *Participant) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.started {
		return errors.New("election: participant already started or closed")
	}
	p.started = true
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		_ = p.c.Run(ctx)
	}()
	return nil
}

// IsLeader reports whether this participant leads now (see
// Candidate.IsLeader).
func (p *Participant) IsLeader() bool { return p.c.IsLeader() }

// Close stops campaigning and, when leading, forfeits the lease so another
// participant takes over without waiting out the TTL. It is idempotent.
func (p *Participant) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	<-done
	return nil
}
