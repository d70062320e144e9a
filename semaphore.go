package tenure

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

// MaxSlots is the largest number of slots of a Semaphore.
const MaxSlots = 1000

// ErrSlotsMismatch means that holders of a semaphore disagree on its number
// of slots: the resource has slots held or kept (Lease.ReleaseAfter) by
// holders of another number, or its marker names another number. Nothing
// was acquired. Changing the number of slots is an operator action: stop
// the holders (or wait until none is left, or free their slots with
// `tenure release --force`), then start them all with the new number once
// the marker expired (30 s, or the holders' slot TTL if that is
// longer, after the last holder stopped).
var ErrSlotsMismatch = errors.New("tenure: semaphore holders disagree on the number of slots")

// Semaphore is a counting lease: at most Slots holders of one resource at
// once, across every process that uses the same store, resource and number
// of slots. Each slot is a lease of its own, named R/slot-I-of-N (slot I of
// a semaphore of N slots on resource R, as `tenure list` shows it: for
// example "backups/slot-2-of-3"), with the lease's whole contract, renewed, trusted and lost by the same rules as a
// plain lease of the same TTL: a context cancelled the moment it can no
// longer be trusted, and a fencing token that strictly increases per slot.
// A resource protected by a semaphore keeps the highest token it has seen
// for each slot lease name (SlotLease.Resource(), which names the number of
// slots too) and rejects lower ones for that name. On stores whose tokens
// come from one counter per store or cluster (SQLite, PostgreSQL, Redis on
// one server or under Sentinel, Cassandra's native mode, etcd's revisions)
// tokens also increase across names, so a slot's token never goes back
// when the number of slots changes; on MySQL (a token follows its row and
// the database's clock), a Redis Cluster (a counter per hash slot),
// Kubernetes (a token follows its own Lease object's versions) and the
// memory store, compare tokens per name only.
//
// A Semaphore works on every store, without store code: a slot is granted by
// the store's own atomic acquire, with point operations and one List.
// Holders agree on the number of slots in two ways. (1) A marker lease,
// named R/slots, that every holder of N slots acquires with the same owner
// string ("tenure semaphore of N slots") before it takes a slot: a store
// renews a live lease for the owner string that holds it, so holders of one
// number share the marker, and one of another number finds it held and gets
// ErrSlotsMismatch. A slot is granted only within 30 s·(1−ρ) of that
// marker acquire, while no other number can hold the marker. (2) After the
// marker, before it takes a slot, a holder lists the resource's slot leases
// and gets ErrSlotsMismatch when any slot of another number is held or kept.
// Together these keep the number for as long as any slot of it is held or
// kept, whatever the slots' TTLs and however long ago the marker was last
// renewed: a holder of another number that takes the marker after it expired
// still finds their slots. While a slot is held, its holder also renews the
// marker (with its slot's TTL, at least 30 s), so that holders of
// another number are refused by the marker itself; the marker expires at
// most 30 s (or the longest slot TTL) after the last holder stopped,
// and is never released.
//
// It is safe for concurrent use. Make one with Locker.Semaphore.
type Semaphore struct {
	lk       *Locker
	resource string
	slots    int
}

// SlotLease is a lease on one slot of a Semaphore.
type SlotLease struct {
	*Lease
	// Slot is the slot's number, from 1 to the semaphore's number of slots.
	Slot int
}

// SlotsHeldError reports that every slot of a semaphore is held. It matches
// ErrHeld with errors.Is.
type SlotsHeldError struct {
	Resource string
	Slots    int
	// Holders are the slots' leases, by slot.
	Holders []Record
}

// Error lists the holders; the names from the store are quoted.
func (e *SlotsHeldError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tenure: all %d slots of %q are held:", e.Slots, e.Resource)
	for i, h := range e.Holders {
		if i > 0 {
			b.WriteString(",")
		}
		slot, _, _ := naming.ParseSlotName(h.Resource)
		fmt.Fprintf(&b, " slot %d by %q (token %d", slot, h.Owner, h.Token)
		if h.Remaining > 0 {
			fmt.Fprintf(&b, ", %s left", h.Remaining.Round(time.Millisecond))
		}
		b.WriteString(")")
	}
	return b.String()
}

// Is reports whether target is ErrHeld.
func (e *SlotsHeldError) Is(target error) bool { return target == ErrHeld }

// slotsPrefix is the prefix of every slot name of resource, whatever the
// number of slots.
func slotsPrefix(resource string) string { return resource + "/slot-" }

// Semaphore returns a semaphore of slots slots (1 to MaxSlots) on resource.
// The resource's slot names must be valid resource names (so the resource
// may be a little shorter than MaxResourceLen). It makes no I/O; the error
// wraps ErrInvalidResource for a bad name and is plain for a bad number.
func (lk *Locker) Semaphore(resource string, slots int) (*Semaphore, error) {
	if slots < 1 || slots > MaxSlots {
		return nil, errorf("tenure: semaphore %q: %d slots; want 1 to %d", resource, slots, MaxSlots)
	}
	if err := driver.ValidateResource(resource); err != nil {
		return nil, err
	}
	if err := driver.ValidateResource(naming.SlotName(resource, slots, slots)); err != nil {
		return nil, errorf("tenure: semaphore %q: its slot names are too long: %w", resource, err)
	}
	return &Semaphore{lk: lk, resource: resource, slots: slots}, nil
}

// Resource returns the semaphore's resource.
func (s *Semaphore) Resource() string { return s.resource }

// Slots returns the semaphore's number of slots.
func (s *Semaphore) Slots() int { return s.slots }

// Holders returns the live leases on the semaphore's slots, whatever number
// of slots their holders were started with, sorted by name.
func (s *Semaphore) Holders(ctx context.Context) ([]Record, error) {
	if !s.lk.begin() {
		return nil, ErrClosed
	}
	defer s.lk.done()
	recs, err := s.lk.store.List(ctx, slotsPrefix(s.resource))
	if err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, r := range recs {
		if i := strings.LastIndex(r.Resource, "/slot-"); i == len(s.resource) {
			if _, _, ok := naming.ParseSlotName(r.Resource); ok {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// markerTTL is the TTL with which a holder of a slot of ttl acquires and
// renews the marker: never below naming.MarkerTTL, so that no holder
// shortens the marker under a slot grant in progress.
func markerTTL(ttl time.Duration) time.Duration { return max(naming.MarkerTTL, ttl) }

// marker acquires (or renews, for the owner string every holder of this
// number of slots shares) the semaphore's marker lease for ttl. It returns
// an error wrapping ErrSlotsMismatch when holders of another number of
// slots hold it.
//
// The marker's owner string is shared, so a marker acquire whose outcome is
// unknown (a lost answer; on Cassandra, contention among holders renewing
// it at once) is simply made again, up to three times while ctx lasts:
// whichever of them was applied, the marker is this number's.
func (s *Semaphore) marker(ctx context.Context, ttl time.Duration) (Record, error) {
	var rec Record
	var err error
	for try := 0; try < 3; try++ {
		rec, err = s.lk.store.Acquire(ctx, naming.MarkerName(s.resource), naming.MarkerOwner(s.slots), ttl)
		if !errors.Is(err, ErrUnknownOutcome) || ctx.Err() != nil {
			break
		}
	}
	var held *HeldError
	switch {
	case err == nil:
		return rec, nil
	case errors.As(err, &held):
		if n := naming.MarkerSlots(held.Holder.Owner); n > 0 {
			return Record{}, fmt.Errorf("%w: %q is a semaphore of %d slots (its marker %q says so), and this one was asked for %d; the number of slots changes only once no slot of the other number is held or kept and the marker expired",
				ErrSlotsMismatch, s.resource, n, naming.MarkerName(s.resource), s.slots)
		}
		return Record{}, errorf("tenure: semaphore %q: its marker is not a semaphore holder's: %w", s.resource, err)
	default:
		return Record{}, errorf("tenure: semaphore %q: marker: %w", s.resource, err)
	}
}

// slotsHeld lists the semaphore's slot leases, held or kept, and returns
// them by slot, or an error wrapping ErrSlotsMismatch when any has another
// number of slots.
func (s *Semaphore) slotsHeld(ctx context.Context) (map[int]Record, error) {
	recs, err := s.lk.store.List(ctx, slotsPrefix(s.resource))
	if err != nil {
		return nil, errorf("tenure: semaphore %q: list its slots: %w", s.resource, err)
	}
	held := make(map[int]Record, len(recs))
	for _, r := range recs {
		if strings.LastIndex(r.Resource, "/slot-") != len(s.resource) {
			continue
		}
		slot, n, ok := naming.ParseSlotName(r.Resource)
		switch {
		case !ok:
		case n != s.slots:
			return nil, fmt.Errorf("%w: %q has a slot of %d held by %q (%q), and this one was asked for %d slots; the number of slots changes only once no slot of the other number is held or kept",
				ErrSlotsMismatch, s.resource, n, r.Owner, r.Resource, s.slots)
		default:
			held[slot] = r
		}
	}
	return held, nil
}

// TryAcquire makes one attempt to acquire a free slot for ttl: it
// acquires the marker, lists the slots (see Semaphore), and tries the free
// ones in a random order, which spreads contenders over them, then the
// held ones, one store call each, until one is granted. It returns a *SlotsHeldError (errors.Is ErrHeld) naming the
// holders when every slot is held (or kept), an error wrapping
// ErrSlotsMismatch when holders with another number of slots exist, and
// otherwise what Locker.TryAcquire returns. Bad input is refused before
// any I/O, and after Close it returns ErrClosed without I/O.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration) (*SlotLease, error) {
	if err := s.lk.CheckTTL(ttl); err != nil {
		return nil, err
	}
	if !s.lk.begin() {
		return nil, ErrClosed
	}
	defer s.lk.done()
	return s.tryAcquire(ctx, ttl)
}

func (s *Semaphore) tryAcquire(ctx context.Context, ttl time.Duration) (*SlotLease, error) {
	lk := s.lk
	// A slot may be granted until window: while the marker is this
	// number's, whoever renewed it since (each with naming.MarkerTTL at least).
	tMarker := lk.clock.Now()
	window := tMarker.Add(lk.trust(naming.MarkerTTL))
	wctx, cancel := lk.bounded(ctx, lk.trust(naming.MarkerTTL))
	defer cancel()
	mttl := markerTTL(ttl)
	mrec, err := s.marker(wctx, mttl)
	if err != nil {
		return nil, err
	}
	held, err := s.slotsHeld(wctx)
	if err != nil {
		return nil, err
	}
	// The free slots first, in a random order; then the held ones, each
	// asked too: one may have been freed since the list, and an acquire
	// that finds a slot held marks it as waited for on the stores whose
	// releases notify only then (PostgreSQL, Redis).
	order := make([]int, 0, s.slots)
	for _, i := range rand.Perm(s.slots) {
		if _, ok := held[i+1]; !ok {
			order = append(order, i+1)
		}
	}
	for _, i := range rand.Perm(s.slots) {
		if _, ok := held[i+1]; ok {
			order = append(order, i+1)
		}
	}
	e := &SlotsHeldError{Resource: s.resource, Slots: s.slots}
	for _, slot := range order {
		l, err := lk.TryAcquire(wctx, naming.SlotName(s.resource, slot, s.slots), ttl)
		var h *HeldError
		switch {
		case err == nil:
			now := lk.clock.Now()
			if !now.Before(window) {
				// The answer came after the window: holders of another
				// number may hold the marker now. Free the slot.
				_ = l.Release(context.WithoutCancel(ctx))
				return nil, errorf("tenure: semaphore %q: slot %d was granted %v after the marker was acquired, past the %v within which the number of slots is sure; released it: %w",
					s.resource, slot, now.Sub(tMarker), lk.trust(naming.MarkerTTL), ErrLeaseLost)
			}
			m := newLease(lk, context.WithoutCancel(ctx), mrec.Resource, mrec.Owner, mttl, mrec.Token, tMarker, tMarker.Add(lk.trust(mttl)))
			m.isMarker = true
			l.setMarker(m, now)
			return &SlotLease{Lease: l, Slot: slot}, nil
		case errors.As(err, &h):
			e.Holders = append(e.Holders, h.Holder)
		default:
			return nil, err
		}
	}
	slices.SortFunc(e.Holders, func(a, b Record) int { return strings.Compare(a.Resource, b.Resource) })
	return nil, e
}

// Acquire blocks until a slot is granted for ttl or ctx ends, waiting
// between attempts as Locker.Acquire does (backoff with full jitter, or a
// release notification of any slot where the store sends them). OnSlotsWait
// options see the holders after each attempt that found every slot held.
// When ctx ends first, the error wraps ctx's error and the last
// *SlotsHeldError. ErrSlotsMismatch, bad input and a closed Locker end the
// wait at once.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration, opts ...AcquireOption) (*SlotLease, error) {
	var ac acquireConfig
	for _, o := range opts {
		if o != nil { // a nil option chooses nothing
			o(&ac)
		}
	}
	if err := s.lk.CheckTTL(ttl); err != nil {
		return nil, err
	}
	// Counted as a whole, so that Close waits until its subscriptions ended.
	if !s.lk.begin() {
		return nil, ErrClosed
	}
	defer s.lk.done()
	// Subscribe once every slot was found held (see Locker.Acquire), then
	// try again at once.
	w := &slotWaker{}
	granted := 0
	defer func() { w.end(granted) }()
	start := s.lk.clock.Now()
	var lastErr error
	for attempt := 0; ; attempt++ {
		w.attempt()
		l, err := s.TryAcquire(ctx, ttl)
		if err == nil {
			granted = l.Slot
			return l, nil
		}
		if !w.subscribed && errors.Is(err, ErrHeld) && w.subscribe(ctx, s) {
			w.attempt()
			if l, err = s.TryAcquire(ctx, ttl); err == nil {
				granted = l.Slot
				return l, nil
			}
		}
		var held *SlotsHeldError
		var one *HeldError
		var remaining time.Duration // until the first slot's lease would expire, when the store said
		switch {
		case errors.As(err, &held):
			w.settled()
			lastErr = err
			for i, h := range held.Holders {
				if i == 0 || h.Remaining < remaining {
					remaining = h.Remaining
				}
			}
			if ac.onSlotsWait != nil {
				ac.onSlotsWait(held, s.lk.clock.Now().Sub(start))
			}
		case errors.As(err, &one):
			lastErr = err
		case ctx.Err() != nil && lastErr != nil:
			// ctx ended during an attempt of a wait (see Locker.Acquire).
			return nil, fmt.Errorf("%w (gave up waiting after %v: %w)", lastErr, s.lk.clock.Now().Sub(start).Round(time.Millisecond), err)
		case attempt == 0 || !transient(err) || errors.Is(err, ErrSlotsMismatch) || ctx.Err() != nil:
			return nil, err
		default:
			lastErr = err
			s.lk.log.Warn("semaphore acquire attempt failed; retrying", "resource", s.resource, "err", err)
		}
		if _, err := s.lk.wait(ctx, s.lk.waitDelay(attempt, w.notify != nil, remaining), w.notify); err != nil {
			if errors.Is(err, ErrClosed) {
				return nil, err
			}
			return nil, fmt.Errorf("%w (gave up waiting after %v: %w)", lastErr, s.lk.clock.Now().Sub(start).Round(time.Millisecond), err)
		}
	}
}

// maxSubscribedSlots bounds the subscriptions of a waiting Acquire; with
// more slots it polls.
const maxSubscribedSlots = 16

// slotWaker is a waiting Semaphore.Acquire's subscriptions to the release
// notifications of its slots, one per slot, merged into one channel. A
// release of a slot wakes one waiter of that slot (driver.Hub), so a waiter
// that was woken by several slots, or that gives up, owes the wake-ups it
// did not act on to the other waiters: as many waiters must be woken as
// slots were freed. A wake-up is owed from the attempt that follows it
// until an attempt that finds every slot held; a grant settles the granted
// slot's own. Ending the subscriptions passes the owed wake-ups on (see
// driver.Notifier).
type slotWaker struct {
	subscribed bool
	notify     chan struct{} // nil: not subscribed (polling)
	subs       []*slotSub    // by slot, from 1
	cancel     context.CancelFunc
	forwarders sync.WaitGroup
}

type slotSub struct {
	stop   func()
	giveUp context.CancelFunc // ends the subscription's context: passes a wake-up on
	woken  atomic.Bool        // a wake-up arrived since the last attempt began
	taken  bool               // a wake-up that an attempt began after is not settled
}

// subscribe subscribes to the release notifications of every slot, where
// the store sends them and the semaphore has at most maxSubscribedSlots
// slots, and reports whether it did. It is tried once.
func (w *slotWaker) subscribe(ctx context.Context, s *Semaphore) bool {
	w.subscribed = true
	n, ok := s.lk.store.(driver.Notifier)
	if !ok || s.slots > maxSubscribedSlots {
		return false
	}
	w.notify = make(chan struct{}, 1)
	fctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	for slot := 1; slot <= s.slots; slot++ {
		sctx, giveUp := context.WithCancel(ctx)
		ch, stop, err := n.Subscribe(sctx, naming.SlotName(s.resource, slot, s.slots))
		if err != nil {
			giveUp()
			s.lk.log.Warn("release notifications unavailable; polling", "resource", s.resource, "err", err)
			w.end(0)
			w.notify = nil
			return false
		}
		sub := &slotSub{stop: stop, giveUp: giveUp}
		w.subs = append(w.subs, sub)
		w.forwarders.Add(1)
		go func() {
			defer w.forwarders.Done()
			for {
				select {
				case <-fctx.Done():
					return
				case <-ch:
					sub.woken.Store(true)
					select {
					case w.notify <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return true
}

// attempt records that an attempt begins: it acts on the wake-ups that
// arrived so far.
func (w *slotWaker) attempt() {
	for _, sub := range w.subs {
		if sub.woken.Swap(false) {
			sub.taken = true
		}
	}
}

// settled records that an attempt found every slot held: the wake-ups it
// acted on are used.
func (w *slotWaker) settled() {
	for _, sub := range w.subs {
		sub.taken = false
	}
}

// end ends the subscriptions, after a grant of slot granted (0: none),
// passing on every wake-up owed.
func (w *slotWaker) end(granted int) {
	if w.cancel == nil {
		return
	}
	w.cancel()
	w.forwarders.Wait() // every wake-up received is recorded
	for i, sub := range w.subs {
		if (sub.taken && i+1 != granted) || sub.woken.Load() {
			sub.giveUp()
		}
		sub.stop()
		sub.giveUp()
	}
	w.subs, w.cancel = nil, nil
}

// OnSlotsWait sets a function that Semaphore.Acquire calls after each
// attempt that found every slot held, with the holders and the time waited
// so far.
func OnSlotsWait(f func(held *SlotsHeldError, waited time.Duration)) AcquireOption {
	return func(c *acquireConfig) { c.onSlotsWait = f }
}
