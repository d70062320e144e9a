package tenure

import (
	"log/slog"
	"time"

	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/internal/backoff"
	"github.com/tenure-go/tenure/internal/lockeropts"
)

// Defaults.
const (
	// DefaultDriftBound is ρ, the bound on how much faster the store's
	// clock may run than the client's: a lease is trusted for TTL·(1−ρ)
	// after the request that confirmed it was sent.
	DefaultDriftBound = 0.01
	// DefaultRetryBase is the upper bound of the first retry delay.
	DefaultRetryBase = 50 * time.Millisecond
	// DefaultRetryInterval is the largest delay between two attempts of a
	// blocking Acquire (and between renewal retries): the "retry interval"
	// of the liveness promise.
	DefaultRetryInterval = time.Second
	// DefaultMaxConcurrentRenewals bounds the renewal calls that background
	// renewal makes at once for one Locker, not counting calls that have
	// been waiting for the store longer than StuckCallAfter.
	DefaultMaxConcurrentRenewals = 64
	// DefaultReleaseTimeout bounds the release that Do makes after its
	// function returns.
	DefaultReleaseTimeout = 10 * time.Second
	// StuckCallAfter is the least time a background store call must take
	// before it stops counting against WithMaxConcurrentRenewals: a call
	// that hangs (a black-holed connection, a row lock, a frozen server)
	// then no longer holds up the renewals of other leases. The threshold
	// grows to four times the 90th percentile of recent calls (at most 10
	// s), so a store that is slow for everyone is not sent more calls at
	// once; and a pool never runs more than 16 times its bound of calls,
	// stuck or not.
	StuckCallAfter = 100 * time.Millisecond
)

// Option configures a Locker.
type Option func(*config)

type config struct {
	ownerID       string
	clock         clock.Clock
	renewInterval time.Duration
	retry         backoff.Policy
	rho           float64
	logger        *slog.Logger
	onLost        func(*Lease, error)
	maxRenewals   int
	watchRelease  bool
	telemetry     telemetryConfig
}

// newConfig applies opts to the defaults: the one place where a Locker's
// defaults are chosen. It does not validate (New does).
func newConfig(opts []Option) config {
	c := config{
		rho:         DefaultDriftBound,
		retry:       backoff.Policy{Base: DefaultRetryBase, Cap: DefaultRetryInterval},
		maxRenewals: DefaultMaxConcurrentRenewals,
	}
	for _, o := range opts {
		if o != nil { // a nil option chooses nothing
			o(&c)
		}
	}
	if c.ownerID == "" {
		c.ownerID = DefaultOwnerID()
	}
	if c.clock == nil {
		c.clock = clock.Real()
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// The packages built on a Locker (election) read its clock, logger and
// meter provider from the options that made it.
func init() {
	lockeropts.Read = func(opts any) lockeropts.Settings {
		c := newConfig(opts.([]Option))
		return lockeropts.Settings{OwnerID: c.ownerID, Clock: c.clock, Logger: c.logger, MeterProvider: c.telemetry.meters}
	}
}

// WithOwnerID sets the readable part of the owner (default DefaultOwnerID,
// "HOST:PID"). A random nonce is always appended, so two Lockers given the
// same id still exclude each other.
func WithOwnerID(id string) Option { return func(c *config) { c.ownerID = id } }

// WithClock sets the clock used for deadlines, renewal and backoff (default
// clock.Real(), which counts time spent suspended on Linux). Tests pass a
// *clock.Fake.
func WithClock(c clock.Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithRenewInterval sets a fixed interval between renewals. Zero (the
// default) renews every TTL/3. The interval must end at least
// MinRenewWindow before TTL·(1−ρ), or TryAcquire returns ErrInvalidTTL
// (see Locker.Timing).
func WithRenewInterval(d time.Duration) Option { return func(c *config) { c.renewInterval = d } }

// WithRetry sets the backoff of a blocking Acquire and of renewal retries:
// delays drawn uniformly from [0, min(max, base·2^attempt)] (full jitter).
// max is the retry interval (default 1 s); base defaults to 50 ms.
func WithRetry(base, max time.Duration) Option {
	return func(c *config) { c.retry = backoff.Policy{Base: base, Cap: max} }
}

// WithDriftBound sets ρ (default 0.01), the bound on how much faster the
// store's clock may run than this process's: a lease is trusted for
// TTL·(1−ρ) after the confirming request was sent. It must be in [0, 0.5).
func WithDriftBound(rho float64) Option { return func(c *config) { c.rho = rho } }

// WithLogger sets the structured logger. The default discards everything.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithOnLost sets a function called once, in its own goroutine, for every
// lease of this Locker that is lost (not for leases released by their
// holder), with the cause (which wraps ErrLeaseLost; see LostError).
func WithOnLost(f func(lease *Lease, cause error)) Option {
	return func(c *config) { c.onLost = f }
}

// WithMaxConcurrentRenewals bounds the background renewal calls that run at
// once (default 64). Calls waiting for the store longer than StuckCallAfter
// do not count, so leases whose calls hang never hold up the renewal of
// others; when renewals must queue, the one whose deadline is nearest goes
// first.
func WithMaxConcurrentRenewals(n int) Option { return func(c *config) { c.maxRenewals = n } }

// WithReleaseWatch makes every lease watch its resource's release
// notifications, on stores that send them (driver.Notifier: PostgreSQL,
// Redis, etcd and Kubernetes; MySQL, which has no notifications, polls the
// watched rows every poll interval, 50 ms by default), and renew at once
// when one arrives. A lease freed or taken by someone else (an operator's
// forced release, say) is then lost within a round trip of the
// notification (a poll interval on MySQL) instead of at the next renewal.
// It costs one subscription per lease; stores without notifications
// (SQLite, Cassandra) ignore it.
func WithReleaseWatch() Option { return func(c *config) { c.watchRelease = true } }
