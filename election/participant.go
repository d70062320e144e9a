package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// Defaults of ParticipantOptions, Jaeger's adaptive sampling defaults.
const (
	DefaultLeaderLeaseRefreshInterval   = 5 * time.Second
	DefaultFollowerLeaseRefreshInterval = 60 * time.Second
)

// ParticipantOptions configures a Participant. The fields have the names of
// Jaeger's ElectionParticipantOptions; Logger is a *slog.Logger where
// Jaeger's is a *zap.Logger (go.uber.org/zap/exp/zapslog adapts one to the
// other).
type ParticipantOptions struct {
	// LeaderLeaseRefreshInterval is how often the leader renews its lease
	// (default 5 s). It must be shorter than TTL·(1−ρ), the
	// FollowerLeaseRefreshInterval less 1%.
	LeaderLeaseRefreshInterval time.Duration
	// FollowerLeaseRefreshInterval is how often a follower tries to take the
	// lease, and the lease's TTL, as in Jaeger (default 60 s). The store may
	// limit it: at least 1 s on Cassandra.
	FollowerLeaseRefreshInterval time.Duration
	// Logger receives the participant's logs and those of the tenure.Locker
	// underneath (renewal failures, a lost lease, a failed release). With
	// nil, the Locker's logs are discarded, and an error that stops the
	// participant is logged with slog.Default().
	Logger *slog.Logger
	// Identity is the participant's readable id (default "HOST:PID").
	Identity string
}

// Participant is a drop-in for Jaeger's DistributedElectionParticipant: it
// has the method set of Jaeger's ElectionParticipant (Start, Close,
// IsLeader), and NewParticipant has the shape of Jaeger's
// NewElectionParticipant. Unlike Jaeger's, whose loop keeps the last answer
// when a lock call fails, so that a leader that cannot reach its store goes
// on leading, IsLeader is false as soon as the lease's local deadline
// passes without a confirmed renewal. Its methods are safe for concurrent
// use.
type Participant struct {
	c        *Candidate
	log      *slog.Logger // nil: slog.Default() at the time of logging
	resource string

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	closed  bool
	started bool
	err     error // what stopped the loop, if it stopped by itself
}

// NewParticipant returns a participant in the election on resourceName,
// with its lease in store (tenure's counterpart of Jaeger's lock; on
// Cassandra, a ModeJaeger store shares the election with Jaeger collectors).
// Zero intervals mean the defaults. It checks the options without any I/O
// and returns an error wrapping tenure.ErrInvalidResource,
// tenure.ErrInvalidTTL or tenure.ErrInvalidOwner, with the reason, for
// every configuration that could never lead: among them a
// FollowerLeaseRefreshInterval the store cannot keep as a TTL (below 1 s on
// Cassandra) and a LeaderLeaseRefreshInterval that is not shorter than
// FollowerLeaseRefreshInterval·(1−ρ), ρ = tenure.DefaultDriftBound (leader
// 995 ms with follower 1 s, for example). Jaeger's constructor accepts
// these; its participant then never leads, or loses the lock between
// refreshes.
func NewParticipant(store driver.Store, resourceName string, options ParticipantOptions) (*Participant, error) {
	if options.LeaderLeaseRefreshInterval == 0 {
		options.LeaderLeaseRefreshInterval = DefaultLeaderLeaseRefreshInterval
	}
	if options.FollowerLeaseRefreshInterval == 0 {
		options.FollowerLeaseRefreshInterval = DefaultFollowerLeaseRefreshInterval
	}
	c, err := New(store, Config{
		Resource:    resourceName,
		Identity:    options.Identity,
		TTL:         options.FollowerLeaseRefreshInterval,
		RetryPeriod: options.FollowerLeaseRefreshInterval,
	}, tenure.WithRenewInterval(options.LeaderLeaseRefreshInterval), tenure.WithLogger(options.Logger))
	if err != nil {
		return nil, fmt.Errorf("election: participant with LeaderLeaseRefreshInterval %v and FollowerLeaseRefreshInterval %v (the lease's TTL): %w",
			options.LeaderLeaseRefreshInterval, options.FollowerLeaseRefreshInterval, err)
	}
	return &Participant{c: c, log: options.Logger, resource: resourceName}, nil
}

func (p *Participant) logger() *slog.Logger {
	if p.log != nil {
		return p.log
	}
	return slog.Default()
}

// Start begins campaigning in the background and returns at once. It
// returns an error when the participant was started before or closed.
//
// Every configuration error is returned by NewParticipant, so the loop
// normally runs until Close. Should it stop by itself (the store refused the
// configuration after all, for example a store without a
// driver.TTLChecker that rejects the TTL), the participant stops leading for
// good: the error is logged at once, at level Error, and returned by Err and
// by Close.
func (p *Participant) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("election: participant closed")
	}
	if p.started {
		return errors.New("election: participant already started")
	}
	p.started = true
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		err := p.c.Run(ctx)
		if ctx.Err() != nil {
			return // stopped by Close
		}
		if err == nil {
			err = errors.New("election: the participant's campaign ended")
		}
		err = fmt.Errorf("election: participant on %q stopped and will not lead: %w", p.resource, err)
		p.logger().Error("election participant stopped", "resource", p.resource, "err", err)
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
	}()
	return nil
}

// IsLeader reports whether this participant leads now (see
// Candidate.IsLeader).
func (p *Participant) IsLeader() bool { return p.c.IsLeader() }

// Lease returns the current term's lease (for its fencing token), or nil
// when not leading. Jaeger's interface has no counterpart.
func (p *Participant) Lease() *tenure.Lease { return p.c.Lease() }

// Err returns the error that stopped the participant's loop by itself (see
// Start), or nil while it runs, before Start and after Close stopped it.
func (p *Participant) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Close stops campaigning and, when leading, forfeits the lease (a failed
// release is logged; the lease then expires by its TTL), so another
// participant takes over within one follower interval without waiting out
// the TTL. It waits for the loop to end, a store call in flight being
// cancelled and the release bounded by tenure.DefaultReleaseTimeout. It
// returns the error that had stopped the loop by itself, if any
// (see Start), and nil otherwise. It is idempotent: later calls return nil.
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
	return p.Err()
}
