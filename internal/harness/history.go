// Package harness is tenure's fault-injection safety harness, in the spirit
// of Jepsen's lock tests: real worker processes contend for one resource in a
// real store while an orchestrator injects faults (paused and killed
// processes, a stuck SQLite writer, a faulty network, killed or paused
// Cassandra nodes), every worker records its history as JSON lines on the
// host's monotonic clock, and a checker verifies the lease contract over the
// histories: mutual exclusion, increasing fencing tokens, no work after a
// deadline, liveness figures, and linearizability of the store operations
// against a timed lease model (porcupine).
//
// See docs/safety.md.
package harness

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Never is the time of an event that never happens (the reply of an
// operation whose outcome is unknown and may take effect at any later time).
const Never = int64(math.MaxInt64)

// MonoNow reads CLOCK_MONOTONIC in nanoseconds: the reference clock of every
// history, shared by all the processes of one host.
func MonoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("harness: CLOCK_MONOTONIC: %v", err))
	}
	return ts.Nano()
}

// MonoOf converts a time.Time that carries Go's monotonic reading (such as
// tenure.Lease.Deadline on the real clock) to CLOCK_MONOTONIC nanoseconds.
// Go's monotonic clock is CLOCK_MONOTONIC with another origin, so the
// conversion is an offset, measured as time.Until(t) between two reads of
// CLOCK_MONOTONIC; the reads are retried until they were taken within
// MonoOfError of each other, so that a pause (SIGSTOP) or a preemption
// between them cannot shift the result by more than MonoOfError/2.
func MonoOf(t time.Time) int64 {
	best, bestSpan := int64(0), int64(math.MaxInt64)
	for i := 0; i < 1000; i++ {
		a := MonoNow()
		u := time.Until(t)
		b := MonoNow()
		if b-a < bestSpan {
			best, bestSpan = a+(b-a)/2+int64(u), b-a
		}
		if bestSpan <= int64(MonoOfError) {
			break
		}
	}
	return best
}

// MonoOfError bounds the error of MonoOf (twice over). The checker allows it
// when it compares a work step with a deadline.
const MonoOfError = 2 * time.Microsecond

// Event kinds of a worker history.
const (
	EvStart    = "start"    // the worker started: Owner (the Locker's), PID, Worker, TTL, Unsafe, Workload, Sem, Slots, RW
	EvCall     = "call"     // a store call was sent: ID, Op, Resource, Owner (the grant's owner string), Token (renew, release), TTL
	EvReturn   = "ret"      // a store call returned: ID, Res, Token, Holder, HolderToken, Err
	EvWait     = "wait"     // a blocking Acquire started
	EvGrant    = "grant"    // Acquire returned a lease: Resource, Owner (the grant's), Token, Send, Reply, Deadline; Sem, Slots, Slot for a semaphore slot; RW, Mode for a shared/exclusive lock
	EvDeadline = "deadline" // the lease's deadline changed: Token, Deadline
	EvStep     = "step"     // a work step, stamped before the check that passed: Token, Deadline
	EvLost     = "lost"     // the worker saw the lease lost: Token, Err
	EvRelease  = "release"  // the worker began releasing: Token
	EvReleased = "released" // Release returned: Token, Err ("" on success)
	EvAcqErr   = "acqerr"   // Acquire returned an error other than a grant: Err
	EvEnded    = "ended"    // the lease's Done channel was seen closed (lost or released), at T or before: Token
	EvExit     = "exit"     // the worker exits on its own (Err says why)
	EvHold     = "hold"     // ReleaseAfter returned (TTL: the hold; Err: its error): the lease ended locally, kept in the store
	EvGone     = "gone"     // written by the orchestrator: the process was reaped at T (Err: "killed" or its exit status)
)

// Store call results.
const (
	ResGranted  = "granted"
	ResHeld     = "held"
	ResReserved = "reserved" // Acquire refused a free resource that another waiter reserved (driver.Reserver): Holder names the waiter
	ResRenewed  = "renewed"
	ResReleased = "released"
	ResLost     = "lost"
	ResGot      = "got"     // Get found a live lease: Holder, HolderToken
	ResNotHeld  = "notheld" // Get found none
	ResKept     = "kept"    // Keep (ReleaseAfter) handed the lease to its keeper
	ResUnknown  = "unknown"
	ResError    = "error"
)

// Store operations.
const (
	OpAcquire = "acquire"
	OpRenew   = "renew"
	OpRelease = "release"
	OpGet     = "get"
	// OpKeep hands the lease of Owner and Token to the owner string Keeper
	// for TTL (driver.Keeper: Lease.ReleaseAfter).
	OpKeep = "keep"
	// OpDelete is an operator's deletion of the lease record of Resource
	// (key-delete), and OpReset the replacement of the whole store
	// (store-reset: a new SQLite file), every resource at once; the
	// orchestrator records them in histories/operator.jsonl.
	OpDelete = "delete"
	OpReset  = "reset"
	// OpTerm is an election of a new leader in an etcd cluster, seen by the
	// orchestrator between the call and the answer (a new raft term).
	OpTerm = "term"
)

// Event is one line of a worker history. T is always CLOCK_MONOTONIC
// nanoseconds.
type Event struct {
	Ev          string `json:"ev"`
	T           int64  `json:"t"`
	ID          int64  `json:"id,omitempty"`
	Op          string `json:"op,omitempty"`
	Resource    string `json:"r,omitempty"` // call, grant: the lease's name (a slot's name for a semaphore slot)
	Owner       string `json:"owner,omitempty"`
	Keeper      string `json:"keeper,omitempty"`   // call of keep: the owner string that keeps the lease
	Workload    string `json:"workload,omitempty"` // start: lease, reacquire, semaphore or rwlock
	Sem         string `json:"sem,omitempty"`      // start (semaphore workload), grant of a slot: the semaphore's resource
	Slots       int    `json:"slots,omitempty"`    // the same: its number of slots
	Slot        int    `json:"slot,omitempty"`     // grant of a slot: its number
	RW          string `json:"rw,omitempty"`       // start (rwlock workload), grant: the shared/exclusive lock's resource
	Mode        string `json:"mode,omitempty"`     // grant of a shared/exclusive lock: shared or exclusive
	Token       uint64 `json:"token,omitempty"`
	TTL         int64  `json:"ttl,omitempty"` // nanoseconds
	Res         string `json:"res,omitempty"`
	Holder      string `json:"holder,omitempty"`
	HolderToken uint64 `json:"htoken,omitempty"`
	Send        int64  `json:"send,omitempty"`
	Reply       int64  `json:"reply,omitempty"`
	Deadline    int64  `json:"deadline,omitempty"`
	PID         int    `json:"pid,omitempty"`
	Worker      int    `json:"worker,omitempty"`
	Unsafe      bool   `json:"unsafe,omitempty"`
	Err         string `json:"err,omitempty"`
}

// Recorder appends events to a history file, one JSON line per write(2) on
// a file opened with O_APPEND, so that a SIGKILLed process leaves every line
// it wrote (the kernel has them) and nothing torn. It is safe for concurrent
// use.
type Recorder struct {
	mu     sync.Mutex
	f      *os.File
	nextID int64
	err    error
}

// NewRecorder creates (or appends to) the history file at path.
func NewRecorder(path string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("harness: history: %w", err)
	}
	return &Recorder{f: f}, nil
}

// Record writes e. The first write error is kept (Err) and later events are
// dropped: a history with a hole must not pass for a complete one.
func (r *Recorder) Record(e Event) {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // Event has only plain fields
	}
	b = append(b, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return
	}
	if _, err := r.f.Write(b); err != nil {
		r.err = err
	}
}

// newID returns a fresh store-call id.
func (r *Recorder) newID() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	return r.nextID
}

// Err returns the first write error.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Close closes the file.
func (r *Recorder) Close() error { return r.f.Close() }

// AppendEvent appends one event to the history at path (the orchestrator
// uses it to note that it killed the worker that wrote the file).
func AppendEvent(path string, e Event) error {
	r, err := NewRecorder(path)
	if err != nil {
		return err
	}
	r.Record(e)
	if err := r.Err(); err != nil {
		r.Close()
		return err
	}
	return r.Close()
}
