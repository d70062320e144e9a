package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tenure-go/tenure/driver"
)

// Writes go through one connection per Store, in group commits: a writer
// goroutine (started when work arrives, gone when there is none) takes every
// operation queued since its last transaction, up to maxBatchOps, and runs
// them one after the other in one BEGIN IMMEDIATE transaction, with one
// COMMIT (one fsync of the write-ahead log) for all of them. Each operation
// stays atomic and reads the host clock when its turn comes, inside the
// transaction, after the lock is held; none is reported done before the
// COMMIT returned. With 64 clients writing at once, SQLite's lock is taken
// once per batch instead of 64 times, and nobody sleeps in the busy
// handler.

// maxBatchOps and maxBatchUnits bound the operations of one transaction,
// and the leases they touch (a batch renewal counts one per lease), so that
// a transaction stays short (about 6 µs of CPU per lease) and a backlog is
// worked off in order instead of piling into one long transaction that
// everyone waits for.
const (
	maxBatchOps   = 256
	maxBatchUnits = 4096
)

// bctx runs the statements of a transaction: no caller's context may cut
// short a transaction that carries other callers' operations (a caller that
// gives up before its operation is taken returns at once; see
// Store.submit).
var bctx = context.Background()

// States of an op.
const (
	opQueued    int32 = iota
	opTaken           // in a transaction: its outcome is the transaction's
	opWithdrawn       // its caller gave up before it was taken: it never runs
)

type opKind uint8

const (
	opAcquire opKind = iota
	opRenew
	opRelease
	opRenewBatch
	opSweep
	opKeep
	opUnreserve
)

// An op is one write operation waiting for, or inside, a transaction.
type op struct {
	kind     opKind
	resource string
	units    int // leases touched: the renewals of a batch, else 1
	run      func(b *batch) error
	state    atomic.Int32
	done     chan struct{}
	// err is the result of run, or the transaction's failure; for
	// opRenewBatch, errs holds one result per lease.
	err  error
	errs []error
}

// setAll sets the result of an op that did not run, or whose transaction
// failed before COMMIT: err for every lease of a batch renewal that had no
// error of its own yet (a bad input keeps its error).
func (o *op) setAll(err error, onlyOK bool) {
	if o.kind != opRenewBatch {
		if !onlyOK || o.err == nil {
			o.err = err
		}
		return
	}
	for i, e := range o.errs {
		if (!onlyOK || e == nil) && !errors.Is(e, driver.ErrInvalidResource) && !errors.Is(e, driver.ErrInvalidOwner) && !errors.Is(e, driver.ErrInvalidTTL) {
			o.errs[i] = err
		}
	}
}

// replaced sets the result of an op whose file was found deleted or
// replaced: loss for renewals and releases, a plain error for the others.
func (o *op) replaced(rerr error) {
	switch o.kind {
	case opRenew, opRelease, opKeep:
		verb := map[opKind]string{opRenew: "renew", opRelease: "release", opKeep: "keep"}[o.kind]
		o.err = fmt.Errorf("sqlite store: %s %q: %w: %w", verb, o.resource, rerr, driver.ErrLeaseLost)
	case opRenewBatch:
		o.setAll(fmt.Errorf("sqlite store: renew: %w: %w", rerr, driver.ErrLeaseLost), false)
	case opAcquire:
		o.err = fmt.Errorf("sqlite store: acquire %q: %w", o.resource, rerr)
	default:
		o.err = fmt.Errorf("sqlite store: %w", rerr)
	}
}

// submit queues o for the writer and waits for its result. It returns nil
// when o ran (its result is in o), and the context's error when ctx ended
// before o was taken into a transaction: o never runs, a definite answer.
// Once o is in a transaction (the lock is held; what is left is local
// work and the COMMIT's fsync), submit waits for the transaction's end
// whatever ctx does, so that an operation never takes effect after its
// call returned, and its outcome is known.
func (s *Store) submit(ctx context.Context, o *op) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqlite store: %w", err)
	}
	o.done = make(chan struct{})
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	s.queue = append(s.queue, o)
	if !s.running {
		s.running = true
		s.wg.Add(1)
		go s.writeLoop()
	}
	s.mu.Unlock()
	select {
	case <-o.done:
		return nil
	case <-ctx.Done():
	}
	if o.state.CompareAndSwap(opQueued, opWithdrawn) {
		return fmt.Errorf("sqlite store: %w", ctx.Err())
	}
	<-o.done
	return nil
}

// errClosed is what a closed Store answers: it matches
// driver.ErrStoreUnusable, so that a Locker waiting on it stops.
var errClosed = fmt.Errorf("sqlite store: closed (%w)", driver.ErrStoreUnusable)

// writeLoop runs transactions until the queue is empty.
func (s *Store) writeLoop() {
	defer s.wg.Done()
	var ops []*op
	for {
		s.mu.Lock()
		n, units := 0, 0
		for n < len(s.queue) && n < maxBatchOps && (n == 0 || units+max(s.queue[n].units, 1) <= maxBatchUnits) {
			units += max(s.queue[n].units, 1)
			n++
		}
		if n == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		ops = append(ops[:0], s.queue[:n]...)
		rest := copy(s.queue, s.queue[n:])
		clear(s.queue[rest:])
		s.queue = s.queue[:rest]
		s.mu.Unlock()
		s.runBatch(ops)
		clear(ops)
		s.maybeSweep()
		s.maybeCheckpoint()
	}
}

// batch is the state of one transaction.
type batch struct {
	s *Store
	// fatal is an error of SQLite inside the transaction: the transaction
	// is rolled back and every operation in it fails.
	fatal error
	// counter is the last token granted, read at the first grant.
	counter                   int64
	counterRead, counterDirty bool
}

// runBatch runs ops in one transaction and delivers their results.
func (s *Store) runBatch(ops []*op) {
	deliver := func(list []*op) {
		for _, o := range list {
			close(o.done)
		}
	}
	// Errors before any op is taken: nothing was written.
	early := func(err error) {
		for _, o := range ops {
			o.setAll(err, false)
		}
		deliver(ops)
	}
	if err := s.gate.lock(s.busyTimeout); err != nil {
		early(fmt.Errorf("sqlite store: begin: %w", err))
		return
	}
	defer s.gate.unlock()
	if errp := s.gone.Load(); errp != nil {
		for _, o := range ops {
			o.replaced(*errp)
		}
		deliver(ops)
		return
	}
	if err := s.setSync(ops); err != nil {
		early(s.writeErr("begin", err))
		return
	}
	if _, err := s.w.begin.ExecContext(bctx); err != nil {
		early(s.writeErr("begin", err))
		return
	}
	taken := ops[:0]
	for _, o := range ops {
		if o.state.CompareAndSwap(opQueued, opTaken) {
			taken = append(taken, o)
		}
	}
	b := &batch{s: s}
	for _, o := range taken {
		if err := o.run(b); o.kind != opRenewBatch {
			o.err = err
		}
		if b.fatal != nil {
			break
		}
	}
	if b.fatal == nil && b.counterDirty {
		if _, err := s.w.counterSet.ExecContext(bctx, b.counter); err != nil {
			b.fatal = err
		}
	}
	if b.fatal != nil {
		s.w.rollback.ExecContext(bctx)
		err := s.writeErr("write", b.fatal)
		for _, o := range taken {
			o.setAll(err, false)
		}
		deliver(taken)
		return
	}
	if _, err := s.w.commit.ExecContext(bctx); err != nil {
		// The transaction may or may not have been made durable.
		s.w.rollback.ExecContext(bctx)
		uerr := driver.UnknownOutcome(fmt.Errorf("sqlite store: commit: %w", err))
		for _, o := range taken {
			if o.kind == opAcquire {
				// A HeldError read inside the transaction is still what
				// was there; anything else is unknown.
				var held *driver.HeldError
				if errors.As(o.err, &held) {
					continue
				}
			}
			o.setAll(uerr, true)
		}
	}
	// One stat per transaction, after it: a write that went to a file that
	// is no longer at the path is reported as such, never as done.
	if err := s.checkFile(); err != nil {
		if errors.Is(err, ErrFileReplaced) {
			for _, o := range taken {
				o.replaced(err)
			}
		} else {
			uerr := driver.UnknownOutcome(err)
			for _, o := range taken {
				o.setAll(uerr, true)
			}
		}
	}
	deliver(taken)
}

// setSync chooses how the COMMIT of a transaction of ops is made durable.
// A transaction that may grant a lease (or raise the token counter) commits
// with synchronous=FULL: the write-ahead log is fsynced before anyone is
// told, so a granted token survives a power loss and the counter never
// goes back. A transaction of renewals and releases only commits with
// synchronous=NORMAL, without an fsync: SQLite keeps it through a crash of
// any process, and only a crash of the operating system can lose it, which
// reboots the host and so expires every lease anyway (the boot id). The
// log is still fsynced at every checkpoint and at the next FULL commit.
func (s *Store) setSync(ops []*op) error {
	full := false
	for _, o := range ops {
		if o.kind == opAcquire || o.kind == opSweep {
			full = true
			break
		}
	}
	if full == s.syncFull {
		return nil
	}
	// Not a prepared statement: SQLite applies PRAGMA synchronous when it
	// compiles the statement, not when it runs it.
	q := `PRAGMA synchronous = NORMAL`
	if full {
		q = `PRAGMA synchronous = FULL`
	}
	if _, err := s.conn.ExecContext(bctx, q); err != nil {
		return err
	}
	s.syncFull = full
	return nil
}

// exec runs a statement of the transaction and returns the rows it changed.
func (b *batch) exec(st *sql.Stmt, args ...any) (int64, error) {
	res, err := st.ExecContext(bctx, args...)
	if err != nil {
		b.fatal = err
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		b.fatal = err
	}
	return n, err
}

// clock reads the host clock, inside the transaction.
func (b *batch) clock() (string, int64, error) {
	epoch, now, err := b.s.clock()
	if err != nil {
		return "", 0, err
	}
	return epoch, now.Milliseconds(), nil
}

// row reads the row of resource; found is false when there is none.
func (b *batch) row(resource string) (r row, found bool, err error) {
	r, err = scanRow(b.s.w.row.QueryRowContext(bctx, resource))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return row{}, false, nil
	case err != nil:
		b.fatal = err
		return row{}, false, fmt.Errorf("sqlite store: read %q: %w", resource, err)
	}
	return r, true, nil
}

// maxToken bounds the tokens the store hands out (2^62, about 146,000 years
// of microseconds), far below where int64 arithmetic could overflow.
const maxToken = 1 << 62

// nextToken returns the token of a new grant of a resource whose row is r
// (found: there is one): max(counter + 1, the wall clock in microseconds,
// the row's token + 1), the token policy: one counter per file, with a
// floor that survives the loss of the file (see the package
// documentation). The counter is written once per transaction.
func (b *batch) nextToken(resource string, r row, found bool) (int64, error) {
	if err := b.loadCounter(); err != nil {
		return 0, err
	}
	t := max(b.counter+1, b.s.wall().UnixMicro())
	if tok, ok := r.token.(int64); found && ok && tok > 0 {
		if tok >= maxToken {
			return 0, fmt.Errorf("sqlite store: acquire %q: its row holds the fencing token %d, beyond the largest tenure hands out (2^62), "+
				"and tokens never go back: the row was not written by tenure; delete it (DELETE FROM tenure_leases WHERE resource = '...') "+
				"only if nothing relies on that token", resource, tok)
		}
		t = max(t, tok+1)
	}
	if t > maxToken {
		return 0, fmt.Errorf("sqlite store: acquire %q: the fencing token counter in tenure_meta (%d) is beyond the largest token tenure hands out (2^62); "+
			"it was not written by tenure", resource, b.counter)
	}
	b.counter, b.counterDirty = t, true
	return t, nil
}

// loadCounter reads the counter, once per transaction. A missing or
// non-integer counter counts as 0 (the wall-clock floor then keeps tokens
// above those granted before) and is written at COMMIT.
func (b *batch) loadCounter() error {
	if b.counterRead {
		return nil
	}
	var v any
	err := b.s.w.counterGet.QueryRowContext(bctx).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		b.fatal = err
		return fmt.Errorf("sqlite store: read the token counter: %w", err)
	}
	if c, ok := v.(int64); ok {
		b.counter = c
	}
	b.counterRead = true
	return nil
}

// notHolder is the error of a renewal or release of resource that changed
// nothing: the live lease, read in the same transaction, names its holder.
func (b *batch) notHolder(op, resource, epoch string, now int64) error {
	r, found, err := b.row(resource)
	if err != nil {
		return err
	}
	if found && r.live(epoch, now) {
		rec := r.record(resource, now)
		return fmt.Errorf("sqlite store: %s %q: %w", op, resource, driver.NotHolder(&rec))
	}
	return fmt.Errorf("sqlite store: %s %q: %w", op, resource, driver.NotHolder(nil))
}

// Expired rows (a holder that died without releasing) are deleted by a
// sweep, at most once per sweepEvery per Store (the first one sweepEvery
// after Open, at the Store's first write after that): the rows are found by a
// read outside the write lock, then deleted in the writer's next
// transaction, each only if it is still not live, with the counter raised
// to its token (so a row that another tool wrote with a token above the
// counter keeps its floor).
const (
	sweepEvery = time.Minute
	sweepMax   = 1000
)

// maybeSweep starts a sweep when one is due.
func (s *Store) maybeSweep() {
	s.mu.Lock()
	if s.mustExist || s.closed || s.sweeping || time.Since(s.swept) < sweepEvery {
		s.mu.Unlock()
		return
	}
	s.sweeping = true
	s.wg.Add(1)
	s.mu.Unlock()
	go s.sweep()
}

func (s *Store) sweep() {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		s.sweeping, s.swept = false, time.Now()
		s.mu.Unlock()
	}()
	s.sweepOnce(s.closing)
}

// sweepOnce deletes up to sweepMax rows that are not live leases, and
// returns how many it deleted.
func (s *Store) sweepOnce(ctx context.Context) (int, error) {
	epoch, now, err := s.clock()
	if err != nil {
		return 0, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT resource FROM tenure_leases WHERE NOT `+liveSQL+` LIMIT `+fmt.Sprint(sweepMax),
		epoch, now.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("sqlite store: sweep: %w", err)
	}
	var names []string
	for rows.Next() {
		var name string
		if rows.Scan(&name) == nil {
			names = append(names, name)
		}
	}
	rows.Close()
	lapsed := 0
	if s.w.sweepReserved != nil {
		err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM tenure_waiting WHERE epoch <> ?1 OR expires_ms <= ?2`,
			epoch, now.Milliseconds()).Scan(&lapsed)
		if err != nil {
			return 0, fmt.Errorf("sqlite store: sweep: %w", err)
		}
	}
	if len(names) == 0 && lapsed == 0 {
		return 0, nil
	}
	deleted := 0
	o := &op{kind: opSweep, units: len(names), run: func(b *batch) error {
		epoch, now, err := b.clock()
		if err != nil {
			return err
		}
		if lapsed > 0 {
			// Reservations of waiters that stopped asking.
			if _, err := b.exec(s.w.sweepReserved, epoch, now); err != nil {
				return fmt.Errorf("sqlite store: sweep: %w", err)
			}
		}
		if err := b.loadCounter(); err != nil {
			return err
		}
		for _, name := range names {
			var tok any
			err := s.w.sweep.QueryRowContext(bctx, epoch, now, name).Scan(&tok)
			switch {
			case errors.Is(err, sql.ErrNoRows): // live again, or gone
			case err != nil:
				b.fatal = err
				return fmt.Errorf("sqlite store: sweep: %w", err)
			default:
				deleted++
				if t, ok := tok.(int64); ok && t > b.counter && t < maxToken {
					b.counter, b.counterDirty = t, true
				}
			}
		}
		return nil
	}}
	if err := s.submit(ctx, o); err != nil {
		return 0, err
	}
	if o.err != nil {
		return 0, o.err
	}
	return deleted, nil
}

// Checkpoints (copying the write-ahead log into the database file, with an
// fsync of each) run in the background, on a connection of their own, at
// most once per checkpointEvery while the Store writes: a PASSIVE
// checkpoint runs alongside the writer's transactions instead of inside the
// COMMIT that happens to cross SQLite's threshold, where it held up every
// operation of that transaction (50 to 230 ms measured with 100,000 leases
// on this machine's shared disk). The writer still checkpoints by itself
// past autoCheckpointPages, should the background fall behind.
const (
	checkpointEvery     = time.Second
	autoCheckpointPages = 10000
)

// maybeCheckpoint starts a background checkpoint when one is due.
func (s *Store) maybeCheckpoint() {
	s.mu.Lock()
	if s.mustExist || s.closed || s.checkpointing || time.Since(s.checkpointed) < checkpointEvery {
		s.mu.Unlock()
		return
	}
	s.checkpointing = true
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		// Errors are the writer's to see; a checkpoint that could not run
		// is made by the writer itself later.
		s.db.ExecContext(s.closing, `PRAGMA wal_checkpoint(PASSIVE)`)
		s.mu.Lock()
		s.checkpointing, s.checkpointed = false, time.Now()
		s.mu.Unlock()
	}()
}
