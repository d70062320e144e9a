package cassandra

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/backoff"
)

// newWriteID returns the id of one conditional write: max(the last id this
// process returned + 1, the wall clock in microseconds since the Unix
// epoch), so ids strictly increase in the order the process makes them
// and, in practice, differ across processes. A write's id is written with
// the lease, so that
//
//   - a read after a lost answer can tell whether that very write was
//     applied (the row has its owner, token and id), and
//   - a renewal applies only over the write it was built from (casRenew).
//
// Ids are not compared for order: hosts' clocks differ, and hosts may share
// an owner string (a semaphore's marker).
func newWriteID() int64 {
	for {
		last := lastWriteID.Load()
		id := max(last+1, time.Now().UnixMicro())
		if lastWriteID.CompareAndSwap(last, id) {
			return id
		}
	}
}

// errPassed is the cause of a renewal or hand-over that other writes of the
// same grant kept passing (casRenew): it was not applied, and the lease is
// still the grant's, but under a write this call did not make.
var errPassed = errors.New("not applied: other writes of this grant kept passing it")

// lastWriteID is the last id newWriteID returned in this process.
var lastWriteID atomic.Int64

// renewAttempts bounds casRenew's tries: one may be spent learning the
// write to renew over (a shared owner string, or a lease this store has
// not written); after each later loss the call waits as backoff.Passed
// says, so that handles renewing one shared lease at once (every holder of
// a semaphore renews its marker) spread out instead of passing each other
// again.
const renewAttempts = 10

// renewArgs returns the renew statement's arguments: the lease held by
// (owner, token) under the write with id expect (an int64, or nil for a
// null cell) goes to newOwner for secs, with write id wid.
func renewArgs(secs int, newOwner string, ttlMs, wid int64, resource, owner string, token uint64, expect any) []any {
	return []any{secs, newOwner, ttlMs, wid, resource, owner, int64(token), expect}
}

// casRenew runs the renew statement, giving resource's lease held by
// (owner, token) to newOwner (owner itself for a renewal) for secs, with
// a fresh write id, only over the row's last write as this store last saw
// it. It returns the last try's write id.
//
// Why: Cassandra fixes a write's time, from which the cell's expiry
// counts, when the coordinator starts the statement, and keeps it through
// the Paxos rounds it retries under contention (Cassandra 5.0:
// BatchStatement/ModificationStatement take nowInSeconds once, and
// CQL3CasRequest builds every attempt's cells from it). A renewal given up
// by its client (unknown outcome) may so apply after a newer renewal, with
// an expiry up to its own start time + TTL: earlier than the one the
// holder trusts. A renewal conditioned on the write it saw applies only if
// no write was applied since; every write it could follow was applied
// before it was sent, so the newest applied renewal is also the one that
// started last, whatever the hosts' clocks say (an order of ids from
// clocks would not be: a host whose clock is ahead, renewing a shared
// owner string, would pass a newer renewal from a host behind).
//
// A renewal that finds the row still (owner, token) under another write
// (a concurrent Renew or Keep of the grant, another holder of a shared
// owner string, or none seen yet by this store) tries again over that
// write, up to renewAttempts times.
func (s *Store) casRenew(ctx context.Context, secs int, newOwner string, ttlMs int64, resource, owner string, token uint64) (applied bool, cur row, wid int64, err error) {
	expect, _ := s.cache.lastWrite(resource, owner, token)
	for i := 1; ; i++ {
		wid = newWriteID()
		applied, cur, err = s.casQuery(ctx, s.st.renew, renewArgs(secs, newOwner, ttlMs, wid, resource, owner, token, expect)...)
		switch {
		case err != nil:
			return applied, cur, wid, err
		case applied:
			s.cache.wrote(resource, newOwner, token, wid)
			return applied, cur, wid, nil
		}
		s.cache.saw(resource, cur)
		if i == renewAttempts || !passed(cur, owner, token, expect) {
			return applied, cur, wid, nil
		}
		if i > 1 {
			if err := backoff.Passed.Wait(ctx, i-2); err != nil {
				return false, cur, wid, fmt.Errorf("cassandra store: renew %q: %w", resource, err)
			}
		}
		expect = cur.writeIDCell
	}
}

// passed reports whether a renewal over the write with id expect that was
// not applied found the lease still (owner, token), under another write.
func passed(cur row, owner string, token uint64, expect any) bool {
	return ours(cur, owner, token) && cur.writeIDCell != expect
}

// ours reports whether the row cur is the lease held by (owner, token).
func ours(cur row, owner string, token uint64) bool {
	return cur.hasOwner && cur.owner == owner && cur.token == token
}

// definitelyNotApplied reports whether err proves that a conditional write
// was never executed: the coordinator refused it before Paxos began
// (unavailable replicas, overload, bootstrapping), the request was invalid,
// or the driver never sent it. Every other error (timeouts, CAS write
// timeouts and CAS_WRITE_UNKNOWN, lost connections, cancellations, write
// failures) leaves the outcome unknown.
func definitelyNotApplied(err error) bool {
	var (
		unavail *gocql.RequestErrUnavailable
		over    *gocql.RequestErrOverloaded
		boot    *gocql.RequestErrBootstrapping
		inv     *gocql.RequestErrInvalid
		syn     *gocql.RequestErrSyntax
		unauth  *gocql.RequestErrUnauthorized
		conf    *gocql.RequestErrConfig
		cred    *gocql.RequestErrCredentials
	)
	switch {
	case errors.As(err, &unavail), errors.As(err, &over), errors.As(err, &boot), errors.As(err, &inv),
		errors.As(err, &syn), errors.As(err, &unauth), errors.As(err, &conf), errors.As(err, &cred):
		return true
	case errors.Is(err, gocql.ErrNoConnections), errors.Is(err, gocql.ErrSessionClosed),
		errors.Is(err, gocql.ErrNoStreams), errors.Is(err, gocql.ErrQueryArgLength):
		return true
	}
	return false
}

// casQuery runs one conditional statement (one lightweight transaction) and
// returns whether it was applied and, when not, the current row. The
// statement is sent once: never retried by the driver.
func (s *Store) casQuery(ctx context.Context, stmt string, args ...any) (bool, row, error) {
	qctx, explain, cancel := s.boundWrite(ctx)
	defer cancel()
	m := newRowMap()
	applied, err := s.session.Query(stmt, args...).
		Consistency(s.cfg.CommitConsistency).
		SerialConsistency(s.cfg.SerialConsistency).
		Idempotent(false). // never retried nor sent speculatively,
		RetryPolicy(nil).  // whatever a ClusterHook set
		MapScanCASContext(qctx, m)
	if err = explain(err); err != nil {
		return false, row{}, err
	}
	return applied, rowFrom(m), nil
}

// boundWrite returns the context for one conditional write, a function
// that explains an error the write returned, and the function that releases
// the context. The write's time is split with what follows it when its
// answer is lost (the serial read that resolves it on another node and, for
// the caller, say a Locker renewing a lease, another try there):
//
//   - once half of the time left on ctx has passed, the write is given up as
//     soon as its coordinator has been silent (a request unanswered, and no
//     answer to anything) for a quarter of the time left (at least
//     stallAfter), so that a frozen coordinator costs about half the time
//     left;
//   - a coordinator that still answers, if slowly (a node just restarted,
//     or collecting garbage, that usually applies the write), is waited for
//     up to three quarters of the time left, and never longer than
//     Timeout.
//
// A write still waiting for a connection or for its statement to be
// prepared (no coordinator yet) runs to the second bound.
//
// A write that is given up is not lost by that: the serial read finds it
// applied (its write id) or completes it, or reports the outcome unknown.
func (s *Store) boundWrite(ctx context.Context) (context.Context, func(error) error, context.CancelFunc) {
	hard, soft := s.writeBounds(ctx)
	silence := max(stallAfter, soft/2) // soft is half the time left
	probe := &writeProbe{}
	qctx, giveUp := context.WithCancelCause(context.WithValue(ctx, probeKey{}, probe))
	tctx, cancelTimeout := context.WithTimeout(qctx, hard)
	var (
		mu      sync.Mutex
		timer   *time.Timer
		stopped bool
	)
	if soft > 0 {
		var check func()
		check = func() {
			if id, ok := probe.coordinator(); ok && s.stalls.silent(id) >= silence {
				giveUp(errCoordinatorStalled)
				return
			}
			mu.Lock()
			if !stopped {
				timer = time.AfterFunc(stallAfter/5, check)
			}
			mu.Unlock()
		}
		mu.Lock()
		timer = time.AfterFunc(soft, check)
		mu.Unlock()
	}
	explain := func(err error) error {
		if err != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil && errors.Is(context.Cause(qctx), errCoordinatorStalled) {
			id, _ := probe.coordinator()
			return fmt.Errorf("%w (node %s)", errCoordinatorStalled, id)
		}
		return err
	}
	release := func() {
		mu.Lock()
		stopped = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancelTimeout()
		giveUp(nil)
	}
	return tctx, explain, release
}

// writeBounds returns the longest a conditional write may take (Timeout,
// and at most three quarters of the time left on ctx) and from when it is
// given up if its coordinator stopped answering (half the time left; 0 when
// ctx has no deadline or the first bound comes first).
func (s *Store) writeBounds(ctx context.Context) (hard, soft time.Duration) {
	hard = s.cfg.Timeout
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		hard = min(hard, left*3/4)
		if left/2 < hard {
			soft = left / 2
		}
	}
	return hard, soft
}

// errCoordinatorStalled is why a conditional write was given up when its
// coordinator stopped answering.
var errCoordinatorStalled = fmt.Errorf("cassandra store: the coordinator stopped answering: %w", context.DeadlineExceeded)

type batchStmt struct {
	stmt string
	args []any
}

// casBatch runs a single-partition conditional batch: one lightweight
// transaction.
func (s *Store) casBatch(ctx context.Context, stmts ...batchStmt) (bool, row, error) {
	qctx, explain, cancel := s.boundWrite(ctx)
	defer cancel()
	b := s.session.Batch(gocql.UnloggedBatch).
		Consistency(s.cfg.CommitConsistency).
		SerialConsistency(s.cfg.SerialConsistency).
		RetryPolicy(nil) // its entries are not idempotent: never retried
	for _, st := range stmts {
		b.Query(st.stmt, st.args...)
	}
	m := newRowMap()
	applied, iter, err := b.MapExecCASContext(qctx, m)
	if iter != nil {
		if cerr := iter.Close(); err == nil {
			err = cerr
		}
	}
	if err = explain(err); err != nil {
		return false, row{}, err
	}
	return applied, rowFrom(m), nil
}

// read returns the resource's row from a linearizable (SERIAL or
// LOCAL_SERIAL) read, which also completes any Paxos round in flight on it.
// A read is safe to send more than once: when its coordinator has not
// answered after a quarter of Timeout or of the time left (a node that
// stopped answering, and the very one that lost a write's answer, often),
// the driver sends it to a second node as well (speculative execution);
// nodes that stopped answering are tried last anyway (hosts.go); when an
// attempt fails,
// the driver tries the next replica, within 2·Timeout in all; and when it
// failed at once because its connection had just broken while the pool had
// not noticed yet, it is sent once more.
func (s *Store) read(ctx context.Context, resource string) (row, error) {
	r, err := s.readOnce(ctx, resource)
	if err != nil && connectionLost(err) && ctx.Err() == nil {
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return row{}, err
		}
		r, err = s.readOnce(ctx, resource)
	}
	return r, err
}

func (s *Store) readOnce(ctx context.Context, resource string) (row, error) {
	qctx, cancel := context.WithTimeout(ctx, 2*s.cfg.Timeout)
	defer cancel()
	m := newRowMap()
	err := s.session.Query(s.st.get, resource).
		Consistency(s.cfg.SerialConsistency).
		Idempotent(true).
		RetryPolicy(&gocql.SimpleRetryPolicy{NumRetries: 1}).
		SetSpeculativeExecutionPolicy(s.speculation(qctx)).
		MapScanContext(qctx, m)
	if errors.Is(err, gocql.ErrNotFound) {
		return row{}, nil
	}
	if err != nil {
		return row{}, err
	}
	return rowFrom(m), nil
}

// speculation is the speculative execution of a read bounded by ctx: a
// second request to another node when the first has not answered within a
// quarter of Timeout or of the time left, whichever is shorter (at least
// minSpeculationDelay).
func (s *Store) speculation(ctx context.Context) gocql.SpeculativeExecutionPolicy {
	dl, ok := ctx.Deadline()
	if !ok {
		return s.speculate
	}
	d := max(time.Until(dl)/4, minSpeculationDelay)
	if d >= s.speculate.TimeoutDelay {
		return s.speculate
	}
	return &gocql.SimpleSpeculativeExecution{NumAttempts: 1, TimeoutDelay: d}
}

// minSpeculationDelay is the shortest wait before a read is sent to a
// second node.
const minSpeculationDelay = 20 * time.Millisecond

// connectionLost reports whether err says that a connection broke (as
// opposed to a timeout), so that the request failed at once.
func connectionLost(err error) bool {
	var op *net.OpError
	return errors.Is(err, gocql.ErrConnectionClosed) || errors.Is(err, gocql.ErrNoConnections) ||
		errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		(errors.As(err, &op) && !op.Timeout())
}

// resolve settles a conditional write whose answer was lost (cause): it
// reads the row at serial consistency. When the write may not have been
// sent, or the read fails too, or ctx has ended, it returns an error
// wrapping driver.ErrUnknownOutcome; a write that was certainly never
// executed returns the cause as it is.
func (s *Store) resolve(ctx context.Context, op, resource string, cause error) (row, error) {
	if definitelyNotApplied(cause) {
		return row{}, fmt.Errorf("cassandra store: %s %q: %w", op, resource, cause)
	}
	if ctx.Err() != nil {
		return row{}, driver.UnknownOutcome(fmt.Errorf("cassandra store: %s %q: %w (no time left to read the outcome)", op, resource, cause))
	}
	r, err := s.read(ctx, resource)
	if err != nil {
		return row{}, driver.UnknownOutcome(fmt.Errorf("cassandra store: %s %q: %w; the serial read to resolve it failed too: %w", op, resource, cause, err))
	}
	if s.cfg.Mode == ModeNative {
		s.cache.saw(resource, r)
	}
	return r, nil
}

func unknownf(op, resource string, cause error, format string, args ...any) error {
	return driver.UnknownOutcome(fmt.Errorf("cassandra store: %s %q: %s: %w", op, resource, fmt.Sprintf(format, args...), cause))
}
