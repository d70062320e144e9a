package cassandra

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/driver"
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

// statements are the store's CQL, with the validated keyspace and table
// names spliced in once; every value is a bound parameter.
type statements struct {
	// ModeNative
	grantNewInsert, grantNewOwner   string // batch: a never-seen resource
	grantFreeOwner, grantFreeToken  string // batch: a free resource with a known token
	renew, release, get, list, find string
	// Reservations (reserve.go): a free resource granted only when no
	// waiter reserved it, or only to its waiter; a waiter's reservation.
	grantFreeUnreserved, grantFreeReserved, reserve, unreserve, findWaiter string
	// ModeJaeger
	jInsert, jUpdate, jDelete string
	// jMarker gives the row's liveness the hold's TTL, in Keep's batch.
	jMarker string
}

func newStatements(r resolved) statements {
	t := quote(r.keyspace) + "." + quote(r.table)
	if r.Mode == ModeJaeger {
		return statements{
			// The three statements of Jaeger's lock, on the same table shape.
			jInsert: `INSERT INTO ` + t + ` (name, owner) VALUES (?, ?) IF NOT EXISTS USING TTL ?`,
			jUpdate: `UPDATE ` + t + ` USING TTL ? SET owner = ? WHERE name = ? IF owner = ?`,
			jDelete: `DELETE FROM ` + t + ` WHERE name = ? IF owner = ?`,
			jMarker: `INSERT INTO ` + t + ` (name) VALUES (?) USING TTL ?`,
			get:     `SELECT owner, TTL(owner) AS remaining FROM ` + t + ` WHERE name = ?`,
			list:    `SELECT name, owner, TTL(owner) AS remaining FROM ` + t,
			find:    `SELECT name, owner FROM ` + t + ` WHERE name = ?`,
		}
	}
	// Every statement that writes fencing_token or write_id without the
	// lease's TTL says USING TTL 0: a table created or altered with
	// default_time_to_live would otherwise give those cells its default
	// TTL, and a token that expires lets the next grant start over.
	// Cassandra applies each statement's own TTL inside a conditional batch
	// (TestTokenIgnoresDefaultTTL).
	return statements{
		grantNewInsert: `INSERT INTO ` + t + ` (resource, fencing_token) VALUES (?, ?) IF NOT EXISTS USING TTL 0`,
		grantNewOwner:  `UPDATE ` + t + ` USING TTL ? SET owner = ?, ttl_ms = ?, write_id = ? WHERE resource = ?`,
		grantFreeOwner: `UPDATE ` + t + ` USING TTL ? SET owner = ?, ttl_ms = ?, write_id = ? WHERE resource = ? IF owner = null AND fencing_token = ?`,
		grantFreeToken: `UPDATE ` + t + ` USING TTL 0 SET fencing_token = ? WHERE resource = ?`,
		// renew (and keep) applies only over the write it was built from
		// (see casRenew).
		renew:               `UPDATE ` + t + ` USING TTL ? SET owner = ?, ttl_ms = ?, write_id = ? WHERE resource = ? IF owner = ? AND fencing_token = ? AND write_id = ?`,
		release:             `UPDATE ` + t + ` USING TTL 0 SET owner = null, ttl_ms = null, write_id = ? WHERE resource = ? IF owner = ? AND fencing_token = ?`,
		grantFreeUnreserved: `UPDATE ` + t + ` USING TTL ? SET owner = ?, ttl_ms = ?, write_id = ? WHERE resource = ? IF owner = null AND fencing_token = ? AND waiter = null`,
		grantFreeReserved: `UPDATE ` + t + ` USING TTL ? SET owner = ?, ttl_ms = ?, write_id = ?, waiter = null WHERE resource = ? ` +
			`IF owner = null AND fencing_token = ? AND waiter IN (null, ?)`,
		reserve:    `UPDATE ` + t + ` USING TTL ? SET waiter = ? WHERE resource = ? IF waiter IN (null, ?)`,
		unreserve:  `UPDATE ` + t + ` SET waiter = null WHERE resource = ? IF waiter = ?`,
		findWaiter: `SELECT waiter FROM ` + t + ` WHERE resource = ?`,
		get:        `SELECT owner, fencing_token, ttl_ms, write_id, TTL(owner) AS remaining FROM ` + t + ` WHERE resource = ?`,
		list:       `SELECT resource, owner, fencing_token, ttl_ms, TTL(owner) AS remaining FROM ` + t,
		find:       `SELECT resource, owner, fencing_token, ttl_ms, write_id FROM ` + t + ` WHERE resource = ?`,
	}
}

// quote returns a validated, lower-case identifier as a quoted CQL name, so
// that reserved words such as "table" work too.
func quote(ident string) string { return `"` + ident + `"` }

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

// schemaProbeKey is the partition checkSchema reads. Reading one partition
// by key (not a LIMIT 1 scan) keeps Open fast and working on tables full of
// tombstones: a scan that meets more than tombstone_failure_threshold
// (100,000 by default, cassandra.yaml) fails with READ_TOO_MANY_TOMBSTONES,
// and deleted or expired leases leave tombstones until gc_grace_seconds.
const schemaProbeKey = "tenure/schema-probe"

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

// checkSchema reads one partition with every column the mode uses, so that
// a missing keyspace, table or column fails Open with a clear message.
func (s *Store) checkSchema(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	iter := s.session.Query(s.st.find, schemaProbeKey).Consistency(gocql.One).IterContext(qctx)
	err := iter.Close()
	if err == nil {
		return nil
	}
	var inv *gocql.RequestErrInvalid
	if errors.As(err, &inv) {
		// Missing (ErrNoStore), or there but not the mode's table
		// (ErrNotStore)? The schema metadata tells.
		kind := driver.ErrNotStore
		if ks, merr := s.session.KeyspaceMetadata(s.cfg.keyspace); errors.Is(merr, gocql.ErrKeyspaceDoesNotExist) || (merr == nil && ks.Tables[s.cfg.table] == nil) {
			kind = driver.ErrNoStore
		}
		return fmt.Errorf("cassandra store: table %s.%s is missing or lacks the columns of %s mode (create it with cassandra.Init, `tenure init`, or the CQL of cassandra.Schema): %w: %w",
			s.cfg.keyspace, s.cfg.table, s.cfg.Mode, kind, err)
	}
	return fmt.Errorf("cassandra store: check table %s.%s: %w", s.cfg.keyspace, s.cfg.table, err)
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

// Session returns the driver session, for tools and tests that inspect the
// table. Writing to the lease table other than through the Store breaks the
// lease contract.
func (s *Store) Session() *gocql.Session { return s.session }

// row is a lease row as Cassandra returned it, read by column name; absent
// columns and nulls read as zero values. Rows that tenure wrote always have
// a positive token, and an owner (never empty) only together with its TTL;
// rows changed by other tools may not (see Acquire).
type row struct {
	present  bool   // the partition exists
	owner    string // "" when free
	hasOwner bool   // the owner cell is set (tenure never sets it to "")
	token    uint64 // the fencing token; 0 when the cell is null, zero or negative
	// tokenCell is the fencing_token cell as stored, for a condition that
	// must match it: nil when null, else its int64.
	tokenCell any
	ttlMs     int64
	writeID   int64
	// writeIDCell is the write_id cell as stored, for a condition that
	// must match it: nil when null or not in the result, else its int64.
	writeIDCell any
	remaining   int // TTL(owner) in seconds; 0 when unknown or without TTL
	// waiter is the waiter that reserved the resource (driver.Reserver),
	// when the result carried the column and it was set.
	waiter string
}

// newRowMap returns the map a row is scanned into: the columns whose null
// matters get pointer destinations, so that a null reads as a nil pointer
// rather than as a zero value; a column the result did not carry keeps its
// destination (see returned).
func newRowMap() map[string]any {
	return map[string]any{"owner": new(*string), "fencing_token": new(*int64), "write_id": new(*int64), "waiter": new(*string)}
}

// returned reports whether a value of a map from newRowMap came from the
// result (not the destination newRowMap put there).
func returned(v any) bool {
	switch v.(type) {
	case **string, **int64:
		return false
	}
	return true
}

func rowFrom(m map[string]any) row {
	var r row
	for k, v := range m {
		if k != "[applied]" && returned(v) {
			r.present = true
			break
		}
	}
	if o, ok := m["owner"].(*string); ok && o != nil {
		r.owner, r.hasOwner = *o, true
	} else if o, ok := m["owner"].(string); ok && o != "" {
		r.owner, r.hasOwner = o, true
	}
	var t *int64
	switch v := m["fencing_token"].(type) {
	case *int64:
		t = v
	case int64:
		t = &v
	}
	if t != nil {
		r.tokenCell = *t
		if *t > 0 {
			r.token = uint64(*t)
		}
	}
	r.ttlMs = colInt(m["ttl_ms"])
	switch v := m["write_id"].(type) {
	case *int64:
		if v != nil {
			r.writeID, r.writeIDCell = *v, *v
		}
	case int64:
		r.writeID, r.writeIDCell = v, v
	}
	r.remaining = int(colInt(m["remaining"]))
	if returned(m["waiter"]) {
		r.waiter = colString(m["waiter"])
	}
	return r
}

func colString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case *string:
		if v != nil {
			return *v
		}
	}
	return ""
}

func colInt(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case int:
		return int64(v)
	case int32:
		return int64(v)
	case *int64:
		if v != nil {
			return *v
		}
	case *int:
		if v != nil {
			return int64(*v)
		}
	}
	return 0
}

func (r row) String() string {
	tok := "no token"
	switch c := r.tokenCell.(type) {
	case int64:
		tok = fmt.Sprintf("token %d", c)
	}
	switch {
	case !r.present:
		return "no row"
	case !r.hasOwner:
		return "free, last " + tok
	default:
		return fmt.Sprintf("held by %s, %s", quoteForeign(r.owner), tok)
	}
}

// quoteForeign quotes a string read from the cluster for a message, cut to
// 100 bytes: another tool may have written anything there.
func quoteForeign(s string) string {
	if len(s) > 100 {
		return strconv.Quote(s[:100]) + "..."
	}
	return strconv.Quote(s)
}

// record describes the row as a driver.Record.
func (r row) record(resource string) driver.Record {
	rec := driver.Record{Resource: resource, Owner: r.owner, Token: r.token, Remaining: remaining(r.remaining)}
	if r.ttlMs > 0 {
		rec.TTL = time.Duration(r.ttlMs) * time.Millisecond
	}
	return rec
}

func (r row) held(resource string) error {
	return &driver.HeldError{Holder: r.record(resource)}
}

// notHolder is the error of a renewal or release of owner's grant on
// resource that does not hold it; cur is the row the store saw (the
// not-applied result, or a serial read), which names the current holder
// when it has one. It wraps driver.ErrLeaseLost and, with a holder, a
// *driver.HeldError (driver.NotHolder).
func notHolder(op, resource, owner string, cur row, format string, args ...any) error {
	var h *driver.Record
	if cur.hasOwner && cur.owner != owner {
		rec := cur.record(resource)
		h = &rec
	}
	return fmt.Errorf("cassandra store: %s %q: %s: %w", op, resource, fmt.Sprintf(format, args...), driver.NotHolder(h))
}

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
// not written).
const renewAttempts = 4

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

// Acquire implements driver.Store. In ModeNative a grant is one conditional
// batch that sets the owner (with the TTL, see StoreTTL) and the next
// fencing token together; with the last token of the resource in the
// store's cache, acquiring a free resource is one lightweight transaction,
// and never more than two (a stale cache, or a lease of the same owner that
// is renewed). When the second also finds the resource changed hands, the
// result is a *driver.HeldError describing the row it saw; its Holder.Owner
// is empty when the resource was granted and freed again meanwhile.
//
// A new grant's token is max(the last token + 1, the client's clock in
// microseconds since the Unix epoch) (nextToken), so that tokens do not go
// back when a row is deleted by hand. Rows left half-written by other tools
// are repaired by the next grant, which keeps the token floor: a free row
// without a token, or with a zero or negative one, is granted like a free
// row. A row with an owner but no valid token is held until its owner cell
// expires; one whose owner cell never expires (no TTL: tenure never writes
// that) is refused with ErrForeignRow, once a read has shown it.
//
// Errors: driver.ErrInvalidResource, ErrInvalidOwner or ErrInvalidTTL before
// any I/O; *driver.HeldError when another owner holds the resource (Holder
// carries owner and token; Remaining is 0 because Cassandra's
// not-applied result carries no TTL); an error wrapping ErrForeignRow and
// driver.ErrHeld (not a *driver.HeldError) for a holder that never expires;
// an error wrapping driver.ErrUnknownOutcome when the answer was lost and a
// serial read could not show that this very write was applied; other driver
// errors wrapped.
func (s *Store) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (driver.Record, error) {
	if err := driver.ValidateAcquire(resource, owner, ttl); err != nil {
		return driver.Record{}, err
	}
	return s.acquire(ctx, resource, owner, ttl, "", 0)
}

// acquire runs Acquire, or AcquireWaiting when waiter is not empty (the
// reservation lasting wait).
func (s *Store) acquire(ctx context.Context, resource, owner string, ttl time.Duration, waiter string, wait time.Duration) (driver.Record, error) {
	secs, err := StoreTTL(ttl)
	if err != nil {
		return driver.Record{}, err
	}
	if s.closed.Load() {
		return driver.Record{}, errClosed
	}
	if s.cfg.Mode == ModeJaeger {
		return s.acquireJaeger(ctx, resource, owner, ttl, secs)
	}
	g := grant{s: s, resource: resource, owner: owner, ttl: ttl, secs: secs, ttlMs: driver.Milliseconds(ttl), wid: newWriteID(), waiter: waiter}
	if !s.reservations {
		g.waiter = ""
	}
	var res attempt
	last, cached := s.cache.get(resource)
	if cached {
		res = g.free(ctx, int64(last), last)
	} else {
		res = g.fresh(ctx, 0)
	}
	if res.done {
		return res.rec, res.err
	}
	// The first attempt was not applied and its row says why; one more try.
	cur := res.row
	switch {
	case !cur.present:
		// The row was deleted behind our back (an operator); start above
		// the last token this store knows and the clock.
		res = g.fresh(ctx, last)
	case cur.hasOwner && cur.owner == owner && cur.token > 0:
		if cur.writeIDCell != nil { // a whole row (IF NOT EXISTS): the write to renew over
			s.cache.saw(resource, cur)
		}
		res = g.renewal(ctx, cur.token)
	case cur.hasOwner:
		return driver.Record{}, g.heldErr(ctx, cur, wait)
	case g.reservedOther(cur):
		return driver.Record{}, g.reservedErr(cur)
	default:
		// Free: grant it on the row's token cell as it is (possibly null
		// or not positive), above every token known.
		res = g.free(ctx, cur.tokenCell, max(cur.token, last))
	}
	if res.done {
		return res.rec, res.err
	}
	if res.row.hasOwner {
		return driver.Record{}, g.heldErr(ctx, res.row, wait)
	}
	s.cache.set(resource, res.row.token)
	if g.reservedOther(res.row) {
		return driver.Record{}, g.reservedErr(res.row)
	}
	return driver.Record{}, res.row.held(resource)
}

// nextToken returns the fencing token of a new grant on a resource whose
// last known token is last: max(last + 1, the client's clock in
// microseconds since the Unix epoch). The grant's condition (the row's
// token is last, or there is no row) keeps tokens strictly increasing per
// resource whatever the clock says; the clock floor keeps them from going
// back when the row is lost (deleted by hand, or a table dropped and
// created again), unless the granting client's clock is behind the one
// that granted the lost token by more than the time since.
func (s *Store) nextToken(last uint64) uint64 {
	return max(last+1, uint64(max(s.now().UnixMicro(), 0)))
}

// heldCheckAfter is how long the same holder (owner and token) may be
// seen refusing this store's acquires before the store reads its row to
// check that the owner cell expires; see Store.heldErr.
const heldCheckAfter = 30 * time.Second

// ErrForeignRow is wrapped by the error of an Acquire that found the
// resource held by an owner whose cell has no TTL: a row that tenure never
// writes (another tool, or a hand-written UPDATE or INSERT without USING
// TTL), which would otherwise block the resource forever. The error says
// how to free it.
var ErrForeignRow = errors.New("lease row not written by tenure")

// heldErr returns the error of an acquire that found resource held by
// another owner, as the row cur says: a *driver.HeldError naming it, unless
// the holder's owner cell never expires. An owner cell without TTL cannot
// be told from a not-applied result (which carries no TTL), so the store
// reads the row (SERIAL, which also shows Remaining) when the row has no
// valid token (never written so by tenure), and when this store has seen
// the same holder for heldCheckAfter; a holder seen by a read never to
// expire makes this and later acquires fail with ErrForeignRow, until the
// row changes. Normal contention costs no read: holders change or expire
// before heldCheckAfter, or are checked once per heldCheckAfter.
func (s *Store) heldErr(ctx context.Context, resource string, cur row) error {
	now := s.now()
	since, checked, forever := s.cache.seen(resource, cur.owner, cur.token, now)
	if forever {
		return s.foreignHolder(resource, cur)
	}
	if (checked || cur.token > 0) && now.Sub(since) < s.heldCheckAfter {
		return cur.held(resource)
	}
	r, err := s.read(ctx, resource)
	if err != nil || !r.hasOwner || r.owner != cur.owner || r.token != cur.token {
		// The row changed, or the read failed: the next acquire tells.
		return cur.held(resource)
	}
	never := r.remaining <= 0 // TTL() of a live cell with a TTL is at least 1
	s.cache.checked(resource, cur.owner, cur.token, now, never)
	if never {
		return s.foreignHolder(resource, r)
	}
	return r.held(resource)
}

func (s *Store) foreignHolder(resource string, cur row) error {
	return fmt.Errorf("cassandra store: acquire %q: %s, and its owner cell has no TTL, so it never expires: tenure does not write such rows; "+
		"if that holder is gone, free the resource with UPDATE %s.%s SET owner = null, ttl_ms = null WHERE resource = <resource> IF owner = <owner> "+
		"(the next grant continues above the row's token): %w: %w",
		resource, cur, s.cfg.keyspace, s.cfg.table, ErrForeignRow, driver.ErrHeld)
}

// grant is one Acquire in ModeNative.
type grant struct {
	s          *Store
	resource   string
	owner      string
	ttl        time.Duration
	secs       int
	ttlMs, wid int64
	// waiter names the blocking acquire of an AcquireWaiting (driver.
	// Reserver); empty for Acquire, and when the table has no waiter
	// column.
	waiter string
}

// attempt is the result of one conditional write of a grant: done with a
// record or an error, or not applied with the current row.
type attempt struct {
	done bool
	rec  driver.Record
	err  error
	row  row
}

func (g grant) granted(token uint64) attempt {
	g.s.cache.wrote(g.resource, g.owner, token, g.wid)
	return attempt{done: true, rec: driver.Record{
		Resource:  g.resource,
		Owner:     g.owner,
		Token:     token,
		TTL:       g.ttl,
		Remaining: time.Duration(g.secs-1) * time.Second,
	}}
}

// fresh grants a resource that has no row, with a token above last (see
// nextToken).
func (g grant) fresh(ctx context.Context, last uint64) attempt {
	next := g.s.nextToken(last)
	if next > math.MaxInt64 {
		return attempt{done: true, err: fmt.Errorf("cassandra store: acquire %q: fencing tokens exhausted", g.resource)}
	}
	applied, cur, err := g.s.casBatch(ctx,
		batchStmt{g.s.st.grantNewInsert, []any{g.resource, int64(next)}},
		batchStmt{g.s.st.grantNewOwner, []any{g.secs, g.owner, g.ttlMs, g.wid, g.resource}},
	)
	switch {
	case err != nil:
		return g.resolve(ctx, err, func(r row) bool { return !r.present })
	case applied:
		return g.granted(next)
	}
	return attempt{row: cur}
}

// free grants a resource whose row is free with the token cell cell (an
// int64, or nil for null), with a token above last (see nextToken).
func (g grant) free(ctx context.Context, cell any, last uint64) attempt {
	next := g.s.nextToken(last)
	if next > math.MaxInt64 {
		return attempt{done: true, err: fmt.Errorf("cassandra store: acquire %q: fencing tokens exhausted", g.resource)}
	}
	owner := batchStmt{g.s.st.grantFreeOwner, []any{g.secs, g.owner, g.ttlMs, g.wid, g.resource, cell}}
	switch {
	case g.waiter != "":
		owner = batchStmt{g.s.st.grantFreeReserved, []any{g.secs, g.owner, g.ttlMs, g.wid, g.resource, cell, g.waiter}}
	case g.s.reservations:
		owner = batchStmt{g.s.st.grantFreeUnreserved, []any{g.secs, g.owner, g.ttlMs, g.wid, g.resource, cell}}
	}
	applied, cur, err := g.s.casBatch(ctx, owner, batchStmt{g.s.st.grantFreeToken, []any{int64(next), g.resource}})
	switch {
	case err != nil:
		return g.resolve(ctx, err, func(r row) bool { return r.present && !r.hasOwner && r.tokenCell == cell })
	case applied:
		return g.granted(next)
	}
	return attempt{row: cur}
}

// renewal renews the same owner's live lease with token: Acquire by the
// holder is the same lease, renewed.
func (g grant) renewal(ctx context.Context, token uint64) attempt {
	applied, cur, wid, err := g.s.casRenew(ctx, g.secs, g.owner, g.ttlMs, g.resource, g.owner, token)
	g.wid = wid // the write a lost answer's read looks for
	switch {
	case err != nil:
		return g.resolve(ctx, err, func(r row) bool { return r.owner == g.owner && r.token == token })
	case applied:
		return g.granted(token)
	case ours(cur, g.owner, token):
		return attempt{done: true, err: unknownf("acquire", g.resource, errPassed,
			"other writes of this grant passed its renewal %d times; the lease is still this grant's (%s)", renewAttempts, cur)}
	}
	return attempt{row: cur}
}

// resolve settles a grant attempt whose answer was lost. pending reports
// whether, in the row read, the attempt's condition still holds, so that the
// write may yet be applied if it is still on its way.
func (g grant) resolve(ctx context.Context, cause error, pending func(row) bool) attempt {
	cur, err := g.s.resolve(ctx, "acquire", g.resource, cause)
	switch {
	case err != nil:
		return attempt{done: true, err: err}
	case cur.hasOwner && cur.owner == g.owner && cur.writeID == g.wid:
		// This very write was applied, at or after the request was sent.
		a := g.granted(cur.token)
		if cur.remaining > 0 {
			a.rec.Remaining = remaining(cur.remaining) // as the read saw it
		}
		return a
	case pending(cur):
		return attempt{done: true, err: unknownf("acquire", g.resource, cause, "the answer was lost and the write is not applied yet (%s); it may still be", cur)}
	case cur.hasOwner && cur.owner == g.owner:
		return attempt{done: true, err: unknownf("acquire", g.resource, cause, "the answer was lost; this owner holds the resource by another write (%s)", cur)}
	}
	// Another owner holds it, or the resource changed hands: this write's
	// condition can no longer hold.
	if cur.token > 0 {
		g.s.cache.set(g.resource, cur.token)
	}
	return attempt{done: true, err: cur.held(g.resource)}
}

// Renew implements driver.Store: one lightweight transaction that extends
// the lease only if the row still has this owner and fencing token (so it
// never re-creates an expired or replaced lease). Errors:
// ErrInvalidResource, ErrInvalidOwner or ErrInvalidTTL before any I/O; an
// error wrapping driver.ErrLeaseLost when the lease is not this owner's
// with this token (expired, released or replaced), and then also a
// *driver.HeldError naming the current holder when the row has one
// (driver.NotHolder: the not-applied result carries it, at no extra cost;
// its TTL and Remaining are 0, unknown); one wrapping
// driver.ErrUnknownOutcome when the answer was lost and a serial read could
// not show that this write was applied; other driver errors wrapped.
func (s *Store) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if err := driver.ValidateAcquire(resource, owner, ttl); err != nil {
		return err
	}
	secs, err := StoreTTL(ttl)
	if err != nil {
		return err
	}
	if s.cfg.Mode == ModeJaeger {
		return s.renewJaeger(ctx, resource, owner, token, secs)
	}
	if token == 0 || token > math.MaxInt64 {
		return notHolder("renew", resource, owner, row{}, "no lease has token %d", token)
	}
	applied, cur, wid, err := s.casRenew(ctx, secs, owner, driver.Milliseconds(ttl), resource, owner, token)
	if err != nil {
		cur, rerr := s.resolve(ctx, "renew", resource, err)
		switch {
		case rerr != nil:
			return rerr
		case cur.owner == owner && cur.token == token && cur.writeID == wid:
			return nil
		case cur.owner == owner && cur.token == token:
			return unknownf("renew", resource, err, "the answer was lost and the renewal is not applied yet; it may still be")
		}
		return notHolder("renew", resource, owner, cur, "the answer was lost, and the lease is no longer this owner's with token %d (%s)", token, cur)
	}
	if !applied {
		if ours(cur, owner, token) {
			return unknownf("renew", resource, errPassed, "other writes of this grant passed this renewal %d times; the lease is still this grant's (%s)", renewAttempts, cur)
		}
		return notHolder("renew", resource, owner, cur, "not this owner's lease with token %d (%s)", token, cur)
	}
	return nil
}

// Keep implements driver.Keeper: one lightweight transaction, Renew's,
// that writes owner string keeper (with the TTL of the hold, whole seconds
// as Renew rounds them) only if the row still has this owner and fencing
// token. A lost answer is resolved by a serial read, as Renew's is: the
// keeper with this write's id shows it applied. In ModeJaeger, Jaeger's
// conditional update of the owner, in one conditional batch with a write of
// the row's marker with the hold's TTL (so the row ends with the hold, not
// with the lease's TTL); the keeper's string, which no other write uses,
// shows it applied. The hold ends between ⌈TTL⌉ and ⌈TTL⌉ + 1 s after the
// write was applied (StoreTTL): Cassandra's resolution.
func (s *Store) Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error {
	if err := driver.ValidateKeep(resource, owner, keeper, ttl); err != nil {
		return err
	}
	secs, err := StoreTTL(ttl)
	if err != nil {
		return err
	}
	var (
		applied bool
		cur     row
		wid     int64
	)
	if s.cfg.Mode == ModeJaeger {
		if token != 0 {
			return notHolder("keep", resource, owner, row{}, "Jaeger mode keeps no fencing tokens, so no lease has token %d", token)
		}
		// Jaeger's INSERT gave the row's liveness (its row marker) the
		// lease's TTL; the UPDATE that hands the owner cell over does not
		// change it, and a row that lives on without an owner refuses
		// every INSERT ... IF NOT EXISTS. So the hold rewrites the marker
		// with its own TTL, in the same conditional batch: the row ends
		// when the hold does, sooner than the lease would have.
		applied, cur, err = s.casBatch(ctx,
			batchStmt{s.st.jUpdate, []any{secs, keeper, resource, owner}},
			batchStmt{s.st.jMarker, []any{resource, secs}})
	} else {
		if token == 0 || token > math.MaxInt64 {
			return notHolder("keep", resource, owner, row{}, "no lease has token %d", token)
		}
		applied, cur, wid, err = s.casRenew(ctx, secs, keeper, driver.Milliseconds(ttl), resource, owner, token)
	}
	if err != nil {
		cur, rerr := s.resolve(ctx, "keep", resource, err)
		switch {
		case rerr != nil:
			return rerr
		case cur.owner == keeper && cur.token == token && (s.cfg.Mode == ModeJaeger || cur.writeID == wid):
			return nil
		case cur.owner == owner && cur.token == token:
			return unknownf("keep", resource, err, "the answer was lost and the hand-over is not applied yet; it may still be")
		}
		return notHolder("keep", resource, owner, cur, "the answer was lost, and the lease is no longer this owner's with token %d (%s)", token, cur)
	}
	if !applied {
		if s.cfg.Mode != ModeJaeger && ours(cur, owner, token) {
			return unknownf("keep", resource, errPassed, "other writes of this grant passed this hand-over %d times; the lease is still this grant's (%s)", renewAttempts, cur)
		}
		return notHolder("keep", resource, owner, cur, "not this owner's lease with token %d (%s)", token, cur)
	}
	return nil
}

// Release implements driver.Store: one lightweight transaction that frees
// the resource only if the row has this owner and fencing token, and keeps
// the token. Errors: ErrInvalidResource or ErrInvalidOwner before any I/O;
// an error wrapping driver.ErrLeaseLost when the lease is not this owner's
// with this token (including a lease already gone), and then also a
// *driver.HeldError naming the current holder when the row has one
// (driver.NotHolder); one wrapping driver.ErrUnknownOutcome when the
// answer was lost and a serial read could not show the outcome; other
// driver errors wrapped.
func (s *Store) Release(ctx context.Context, resource, owner string, token uint64) error {
	if err := driver.ValidateRelease(resource, owner); err != nil {
		return err
	}
	if s.cfg.Mode == ModeJaeger {
		return s.releaseJaeger(ctx, resource, owner, token)
	}
	if token == 0 || token > math.MaxInt64 {
		return notHolder("release", resource, owner, row{}, "no lease has token %d", token)
	}
	wid := newWriteID()
	applied, cur, err := s.casQuery(ctx, s.st.release, wid, resource, owner, int64(token))
	if err != nil {
		cur, rerr := s.resolve(ctx, "release", resource, err)
		switch {
		case rerr != nil:
			return rerr
		case !cur.hasOwner && cur.token == token && cur.writeID == wid:
			return nil // this release was applied
		case cur.owner == owner && cur.token == token:
			return unknownf("release", resource, err, "the answer was lost and the release is not applied yet; it may still be")
		}
		return notHolder("release", resource, owner, cur, "the answer was lost, and the lease is no longer this owner's with token %d (%s)", token, cur)
	}
	if !applied {
		return notHolder("release", resource, owner, cur, "not this owner's lease with token %d (%s)", token, cur)
	}
	s.cache.saw(resource, row{}) // no lease: no write to renew over
	return nil
}

// Get implements driver.Store with a linearizable (serial) read, so it sees
// every grant, renewal and release that was confirmed before it, and
// completes any in flight. Remaining is a lower bound: Cassandra's TTL() is
// whole seconds (see StoreTTL), so the lease lives up to one second longer;
// it is at least 1 ms for a live lease. Errors: ErrInvalidResource before
// any I/O; an error wrapping driver.ErrNotHeld when no live lease exists;
// driver errors wrapped.
func (s *Store) Get(ctx context.Context, resource string) (driver.Record, error) {
	if err := driver.ValidateResource(resource); err != nil {
		return driver.Record{}, err
	}
	cur, err := s.read(ctx, resource)
	if err != nil {
		return driver.Record{}, fmt.Errorf("cassandra store: get %q: %w", resource, err)
	}
	if cur.token != 0 {
		s.cache.set(resource, cur.token)
	}
	if cur.owner == "" {
		return driver.Record{}, fmt.Errorf("cassandra store: %q: %w", resource, driver.ErrNotHeld)
	}
	return cur.record(resource), nil
}

// List implements driver.Store. It scans the whole table at the commit
// consistency (QUORUM or LOCAL_QUORUM), page by page, and keeps the live
// leases whose resource starts with prefix, sorted by resource: Cassandra
// cannot select a range of partition keys by prefix. It is meant for
// operators and tools, not for hot paths; each page is bounded by the
// configured Timeout and the whole scan by ctx. A scan reads the tombstones
// that released (Jaeger mode) and expired leases leave until
// gc_grace_seconds; past tombstone_failure_threshold (100,000 by default)
// Cassandra fails it with READ_TOO_MANY_TOMBSTONES. Errors: an invalid prefix
// (ErrInvalidResource) before any I/O; driver errors wrapped.
func (s *Store) List(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := driver.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	iter := s.session.Query(s.st.list).
		Consistency(s.cfg.CommitConsistency).
		Idempotent(true).
		PageSize(1000).
		IterContext(ctx)
	var out []driver.Record
	for {
		m := newRowMap()
		if !iter.MapScan(m) {
			break
		}
		name := colString(m["resource"])
		if s.cfg.Mode == ModeJaeger {
			name = colString(m["name"])
		}
		cur := rowFrom(m)
		if cur.owner == "" || !strings.HasPrefix(name, prefix) {
			continue
		}
		out = append(out, cur.record(name))
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("cassandra store: list %q: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out, nil
}

// ModeJaeger.

func (s *Store) acquireJaeger(ctx context.Context, resource, owner string, ttl time.Duration, secs int) (driver.Record, error) {
	granted := driver.Record{Resource: resource, Owner: owner, TTL: ttl, Remaining: time.Duration(secs-1) * time.Second}
	applied, cur, err := s.casQuery(ctx, s.st.jInsert, resource, owner, secs)
	if err != nil {
		return driver.Record{}, s.resolveJaegerGrant(ctx, resource, owner, err)
	}
	if applied {
		return granted, nil
	}
	if cur.owner != owner {
		return driver.Record{}, cur.held(resource)
	}
	// Held by this owner: the same lease, renewed with Jaeger's update.
	applied, cur, err = s.casQuery(ctx, s.st.jUpdate, secs, owner, resource, owner)
	if err != nil {
		return driver.Record{}, s.resolveJaegerGrant(ctx, resource, owner, err)
	}
	if applied {
		return granted, nil
	}
	return driver.Record{}, cur.held(resource)
}

// resolveJaegerGrant settles a grant in ModeJaeger whose answer was lost.
// Without a per-write id, a row that names this owner does not prove that
// this write made it (an earlier write of the same owner may have), so that
// case stays unknown; the Locker then retries, which renews the lease with
// a confirmed write.
func (s *Store) resolveJaegerGrant(ctx context.Context, resource, owner string, cause error) error {
	cur, err := s.resolve(ctx, "acquire", resource, cause)
	switch {
	case err != nil:
		return err
	case cur.owner == owner:
		return unknownf("acquire", resource, cause, "the answer was lost; this owner holds the resource, but in Jaeger mode a read cannot tell which write made it")
	case cur.owner == "":
		return unknownf("acquire", resource, cause, "the answer was lost and the resource is free; the write may still be applied")
	}
	return cur.held(resource)
}

func (s *Store) renewJaeger(ctx context.Context, resource, owner string, token uint64, secs int) error {
	if token != 0 {
		return notHolder("renew", resource, owner, row{}, "Jaeger mode keeps no fencing tokens, so no lease has token %d", token)
	}
	applied, cur, err := s.casQuery(ctx, s.st.jUpdate, secs, owner, resource, owner)
	if err != nil {
		cur, rerr := s.resolve(ctx, "renew", resource, err)
		switch {
		case rerr != nil:
			return rerr
		case cur.owner == owner:
			return unknownf("renew", resource, err, "the answer was lost; this owner still holds the lease, but in Jaeger mode a read cannot tell whether this renewal was applied")
		}
		return notHolder("renew", resource, owner, cur, "the answer was lost, and the lease is no longer this owner's (%s)", cur)
	}
	if !applied {
		return notHolder("renew", resource, owner, cur, "not this owner's lease (%s)", cur)
	}
	return nil
}

func (s *Store) releaseJaeger(ctx context.Context, resource, owner string, token uint64) error {
	if token != 0 {
		return notHolder("release", resource, owner, row{}, "Jaeger mode keeps no fencing tokens, so no lease has token %d", token)
	}
	applied, cur, err := s.casQuery(ctx, s.st.jDelete, resource, owner)
	if err != nil {
		cur, rerr := s.resolve(ctx, "release", resource, err)
		switch {
		case rerr != nil:
			return rerr
		case cur.owner == owner:
			return unknownf("release", resource, err, "the answer was lost and the release is not applied yet; it may still be")
		}
		// Gone or someone else's: this delete, or the TTL, freed it. A
		// retry answers ErrLeaseLost, which the Locker takes as released
		// after an unknown outcome.
		return unknownf("release", resource, err, "the answer was lost; this owner no longer holds the lease (%s), but in Jaeger mode a read cannot tell whether this release or the TTL freed it", cur)
	}
	if !applied {
		return notHolder("release", resource, owner, cur, "not this owner's lease (%s)", cur)
	}
	return nil
}
