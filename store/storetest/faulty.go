package storetest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// Fault is what a Faulty store does to one kind of operation.
type Fault int

// Faults.
const (
	// Pass forwards the call to the real store.
	Pass Fault = iota
	// Fail returns ErrInjected without calling the real store (connection
	// refused).
	Fail
	// Hang blocks until the call's context ends, without calling the real
	// store (a black-holed network), then returns an unknown outcome.
	Hang
	// DropReply calls the real store, then loses its answer, whatever it
	// was: the operation is applied (if the store accepted it) but the caller
	// sees an unknown outcome (a CAS write timeout after the write was
	// applied).
	DropReply
	// DropRequest loses the request: nothing is applied and the caller sees
	// an unknown outcome.
	DropRequest
	// Late holds the request back: the caller sees an unknown outcome at
	// once (it gave up waiting), and the store applies the request only
	// when DeliverLate is called: a request delivered after its sender gave
	// up, which a linearizable store may do.
	Late
)

// Operation names for Faulty.Set.
const (
	OpAcquire = "acquire"
	OpRenew   = "renew"
	OpRelease = "release"
	OpGet     = "get"
	OpKeep    = "keep"
)

// ErrInjected is the error a Faulty store returns for Fail.
var ErrInjected = errors.New("storetest: injected failure (connection refused)")

// Faulty wraps a real store and injects faults between the caller and it, as
// a network between a client and its store would. With every fault at Pass
// it behaves exactly like the store it wraps. It is safe for concurrent use.
type Faulty struct {
	driver.Store

	mu     sync.Mutex
	faults map[string]Fault
	counts map[string]int // faults left before an operation passes again; 0 = forever
	hook   func(op string)
	after  func(op string)
	calls  map[string]int
	hung   int
	late   []func()
	only   func(op, resource string) bool
}

// NewFaulty wraps s.
func NewFaulty(s driver.Store) *Faulty {
	return &Faulty{Store: s, faults: map[string]Fault{}, counts: map[string]int{}, calls: map[string]int{}}
}

// Set makes op fail with f from now on (n = 0) or for its next n calls.
func (f *Faulty) Set(op string, fault Fault, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[op] = fault
	f.counts[op] = n
}

// Only limits faults to the calls for which match returns true (nil: all
// calls); the others pass.
func (f *Faulty) Only(match func(op, resource string) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.only = match
}

// DeliverLate applies, in order, every request that a Late fault held back,
// and returns how many there were. Their answers are lost.
func (f *Faulty) DeliverLate() int {
	f.mu.Lock()
	late := f.late
	f.late = nil
	f.mu.Unlock()
	for _, call := range late {
		call()
	}
	return len(late)
}

// Heal makes every operation pass again.
func (f *Faulty) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.faults)
	clear(f.counts)
}

// OnCall sets a function called at the start of every call with the
// operation's name (before the fault is applied).
func (f *Faulty) OnCall(hook func(op string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = hook
}

// AfterCall sets a function called when a call returns, with the
// operation's name (after the fault is applied).
func (f *Faulty) AfterCall(hook func(op string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.after = hook
}

// Calls returns how many calls of op reached the Faulty store.
func (f *Faulty) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *Faulty) fault(op, resource string) Fault {
	f.mu.Lock()
	f.calls[op]++
	hook := f.hook
	fault := f.faults[op]
	if fault != Pass && f.only != nil && !f.only(op, resource) {
		fault = Pass
	} else if fault != Pass && f.counts[op] > 0 {
		f.counts[op]--
		if f.counts[op] == 0 {
			f.faults[op] = Pass
		}
	}
	f.mu.Unlock()
	if hook != nil {
		hook(op)
	}
	return fault
}

// Hung returns how many calls are blocked in a Hang fault right now.
func (f *Faulty) Hung() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hung
}

func apply[T any](ctx context.Context, f *Faulty, op, resource string, call func(ctx context.Context) (T, error)) (T, error) {
	defer func() {
		f.mu.Lock()
		after := f.after
		f.mu.Unlock()
		if after != nil {
			after(op)
		}
	}()
	var zero T
	switch f.fault(op, resource) {
	case Fail:
		return zero, ErrInjected
	case Hang:
		f.mu.Lock()
		f.hung++
		f.mu.Unlock()
		<-ctx.Done()
		f.mu.Lock()
		f.hung--
		f.mu.Unlock()
		return zero, driver.UnknownOutcome(context.Cause(ctx))
	case DropRequest:
		return zero, driver.UnknownOutcome(errors.New("storetest: request lost"))
	case DropReply:
		_, _ = call(ctx) // applied (or refused) by the store; the answer, whatever it was, is lost
		return zero, driver.UnknownOutcome(errors.New("storetest: reply lost"))
	case Late:
		f.mu.Lock()
		f.late = append(f.late, func() { _, _ = call(context.Background()) })
		f.mu.Unlock()
		return zero, driver.UnknownOutcome(errors.New("storetest: request delayed in the network"))
	}
	return call(ctx)
}

// Acquire implements driver.Store.
func (f *Faulty) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (tenure.Record, error) {
	return apply(ctx, f, OpAcquire, resource, func(ctx context.Context) (tenure.Record, error) {
		return f.Store.Acquire(ctx, resource, owner, ttl)
	})
}

// Renew implements driver.Store.
func (f *Faulty) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	_, err := apply(ctx, f, OpRenew, resource, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, f.Store.Renew(ctx, resource, owner, token, ttl)
	})
	return err
}

// Keep implements driver.Keeper when the wrapped store does; faults of
// OpKeep apply. Over a store without it, Keep fails without I/O.
func (f *Faulty) Keep(ctx context.Context, resource, owner string, token uint64, keeper string, ttl time.Duration) error {
	k, ok := f.Store.(driver.Keeper)
	if !ok {
		return errors.New("storetest: the wrapped store does not implement driver.Keeper")
	}
	_, err := apply(ctx, f, OpKeep, resource, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, k.Keep(ctx, resource, owner, token, keeper, ttl)
	})
	return err
}

// Release implements driver.Store.
func (f *Faulty) Release(ctx context.Context, resource, owner string, token uint64) error {
	_, err := apply(ctx, f, OpRelease, resource, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, f.Store.Release(ctx, resource, owner, token)
	})
	return err
}

// Get implements driver.Store.
func (f *Faulty) Get(ctx context.Context, resource string) (tenure.Record, error) {
	return apply(ctx, f, OpGet, resource, func(ctx context.Context) (tenure.Record, error) { return f.Store.Get(ctx, resource) })
}
