package cassandra

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/storeclient"
)

// Store is a driver.Store on Apache Cassandra (or ScyllaDB). It is safe for
// concurrent use by many goroutines; many processes and hosts share leases
// through the cluster. Open one Store per process and share it: each holds
// a driver session with its own connection pools.
type Store struct {
	cfg     resolved
	session *gocql.Session
	// stalls follows the requests in flight to each node (hosts.go).
	stalls *stallTracker
	st     statements
	// reservations: the native table has the waiter column
	// (driver.Reserver); a table of an earlier version, until Init adds
	// it, keeps none.
	reservations bool
	cache        *tokenCache
	// now is the clock of the token floor and of heldErr (time.Now; tests
	// change it).
	now func() time.Time
	// heldCheckAfter is heldCheckAfter (tests change it).
	heldCheckAfter time.Duration
	// speculate sends a read to a second replica when the first has not
	// answered within a quarter of Timeout (reads only: they are idempotent);
	// see speculation.
	speculate *gocql.SimpleSpeculativeExecution

	closeOnce sync.Once
	closed    atomic.Bool // Close was called
}

// Open connects to the cluster and returns a Store. It checks that the
// keyspace and table exist with the columns the mode needs; when they do
// not, it creates them if cfg.CreateSchema is set (see Init), and otherwise
// returns an error that says to run Init. It returns an error wrapping
// ErrBadConfig for a configuration that cannot work, and the driver's error
// (wrapped) when the cluster cannot be reached; it gives up when ctx ends or
// after (len(Hosts)+1)·ConnectTimeout + Timeout, whichever comes first.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	session, stalls, err := connect(ctx, r)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: r, session: session, stalls: stalls, st: newStatements(r), cache: newTokenCache(r.TokenCacheSize),
		now: time.Now, heldCheckAfter: heldCheckAfter,
		speculate: &gocql.SimpleSpeculativeExecution{NumAttempts: 1, TimeoutDelay: max(r.Timeout/4, minSpeculationDelay)}}
	if r.CreateSchema {
		if err := createSchema(ctx, r, session); err != nil {
			session.Close()
			return nil, err
		}
	}
	if err := s.checkSchema(ctx); err != nil {
		session.Close()
		return nil, err
	}
	if r.Mode == ModeNative {
		ok, err := s.hasWaiterColumn(ctx)
		if err != nil {
			session.Close()
			return nil, err
		}
		s.reservations = ok
	}
	return s, nil
}

// connect creates the driver session, bounded by ctx and by the
// configuration's timeouts (gocql's NewSession takes no context).
func connect(ctx context.Context, r resolved) (*gocql.Session, *stallTracker, error) {
	cluster, stalls, err := r.cluster()
	if err != nil {
		return nil, nil, err
	}
	bound := time.Duration(len(r.Hosts)+1)*r.ConnectTimeout + r.Timeout
	type result struct {
		s   *gocql.Session
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := cluster.CreateSession()
		done <- result{s, err}
	}()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	abandon := func() {
		// Close the session if it ever comes up, so nothing leaks.
		go func() {
			if res := <-done; res.s != nil {
				res.s.Close()
			}
		}()
	}
	select {
	case res := <-done:
		if res.err != nil {
			return nil, nil, fmt.Errorf("cassandra store: connect to %s: %w", r.hostList(), res.err)
		}
		return res.s, stalls, nil
	case <-ctx.Done():
		abandon()
		return nil, nil, fmt.Errorf("cassandra store: connect to %s: %w", r.hostList(), context.Cause(ctx))
	case <-timer.C:
		abandon()
		return nil, nil, fmt.Errorf("cassandra store: connect to %s: no session after %v", r.hostList(), bound)
	}
}

// hostList names the contact points with their ports, for messages.
func (r resolved) hostList() string {
	hosts := make([]string, len(r.Hosts))
	for i, h := range r.Hosts {
		if _, _, err := net.SplitHostPort(h); err == nil {
			hosts[i] = h
		} else {
			hosts[i] = net.JoinHostPort(h, strconv.Itoa(r.Port))
		}
	}
	return strings.Join(hosts, ",")
}

// Close closes the driver session. It does not release leases. It is safe
// to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.session.Close()
	})
	return nil
}

// errClosed is what a closed Store answers: it matches
// driver.ErrStoreUnusable, so that a Locker waiting on it stops.
var errClosed = fmt.Errorf("cassandra store: closed (%w)", driver.ErrStoreUnusable)

// Mode returns the store's mode.
func (s *Store) Mode() Mode { return s.cfg.Mode }

// Keyspace returns the keyspace the store uses (lower case).
func (s *Store) Keyspace() string { return s.cfg.keyspace }

// Table returns the table the store uses (lower case).
func (s *Store) Table() string { return s.cfg.table }

// The driver session, for tenure's own tests, harness and benchmarks, which
// inspect the table. Writing to the lease table other than through the
// Store breaks the lease contract.
func init() { storeclient.Register(func(s *Store) *gocql.Session { return s.session }) }
