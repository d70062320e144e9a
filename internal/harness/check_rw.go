package harness

import (
	"sort"
	"time"
)

// rwHolders checks the shared/exclusive invariant over the holds of each
// shared/exclusive lock (docs/design.md): never an exclusive holder beside
// any other holder of the resource, whether both trust their leases
// (rw-trust) or both work (rw-work), and fencing tokens that strictly
// increase in grant order across both modes (rw-token-order); and that no
// hold of the lock begins within a confirmed ReleaseAfter hold of an
// exclusive holder, nor an exclusive one within a shared holder's
// (hold-broken).
//
// A shared holder trusts its lease from the answer of the acquire of its
// own lease (its registration), which the store applied while the request
// held the gate; an exclusive holder from the moment AcquireExclusive
// returned, once it had seen no shared holder left while it held the gate
// (its gate's acquire was answered earlier, but until then it was a
// request, not a holder).
func (r *Report) rwHolders(ts []*Tenure, deletions []Fault, outside func(a, b *Tenure, end int64) string) {
	byLock := map[string][]*Tenure{}
	var locks []string
	for _, t := range ts {
		if t.RW == "" {
			continue
		}
		if _, ok := byLock[t.RW]; !ok {
			locks = append(locks, t.RW)
		}
		byLock[t.RW] = append(byLock[t.RW], t)
		if t.Mode == "exclusive" {
			r.ExclusiveGrants++
		} else {
			r.SharedGrants++
		}
	}
	sort.Strings(locks)
	for _, lock := range locks {
		lts := byLock[lock]
		for _, kind := range []string{"rw-trust", "rw-work"} {
			r.rwOverlaps(lock, kind, lts, outside)
		}
		r.rwTokenOrder(lock, lts, outside)
		r.rwHolds(lock, lts, deletions)
	}
}

// rwStart is when a holder of a shared/exclusive lock begins to trust its
// lease (see rwHolders).
func rwStart(t *Tenure) int64 {
	if t.Mode == "exclusive" {
		return t.Granted
	}
	return t.Reply
}

// rwInterval is a holder's trust window or work.
type rwInterval struct {
	t          *Tenure
	start, end int64
}

// rwOverlaps checks the overlaps of trust windows (rw-trust) or of work
// (rw-work) of the holders lts of lock, with an exclusive hold on either
// side.
func (r *Report) rwOverlaps(lock, kind string, lts []*Tenure, outside func(a, b *Tenure, end int64) string) {
	var ivs []rwInterval
	for _, t := range lts {
		s, e := rwStart(t), t.End
		if kind == "rw-work" {
			if len(t.Steps) == 0 {
				continue
			}
			s, e = t.Steps[0], t.Steps[len(t.Steps)-1]
		}
		ivs = append(ivs, rwInterval{t, s, e})
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].start < ivs[j].start })
	var active []rwInterval
	for _, x := range ivs {
		kept := active[:0]
		for _, a := range active {
			if a.end >= x.start {
				kept = append(kept, a)
			}
		}
		active = kept
		shared := 0
		for _, a := range active {
			if a.t.Mode != "exclusive" {
				shared++
			}
			if a.t.Mode != "exclusive" && x.t.Mode != "exclusive" {
				continue
			}
			end := min(a.end, x.end)
			if k := outside(a.t, x.t, end); k != "" {
				r.outsideContract(k, "%q: %s hold of %s (token %d) overlaps the %s hold of %s (token %d) by %v",
					lock, a.t.Mode, a.t.Owner, a.t.Token, x.t.Mode, x.t.Owner, x.t.Token, nsDur(end-x.start))
				continue
			}
			r.violate(kind, "%q: %s hold of %s (token %d) in [%d, %d] overlaps the %s hold of %s (token %d) in [%d, %d] by %v",
				lock, a.t.Mode, a.t.Owner, a.t.Token, a.start, a.end, x.t.Mode, x.t.Owner, x.t.Token, x.start, x.end, nsDur(end-x.start))
		}
		active = append(active, x)
		if kind == "rw-trust" && x.t.Mode != "exclusive" {
			r.MostShared = max(r.MostShared, shared+1)
		}
	}
}

// rwTokenOrder checks that tokens strictly increase in grant order, across
// both modes: a shared holder's is its gate grant's, and gate grants
// follow one another.
func (r *Report) rwTokenOrder(lock string, lts []*Tenure, outside func(a, b *Tenure, end int64) string) {
	byStart := append([]*Tenure(nil), lts...)
	sort.SliceStable(byStart, func(i, j int) bool { return rwStart(byStart[i]) < rwStart(byStart[j]) })
	for i := 1; i < len(byStart); i++ {
		a, b := byStart[i-1], byStart[i]
		if b.Token > a.Token {
			continue
		}
		if k := outside(a, b, min(a.End, b.End)); k != "" {
			r.outsideContract(k, "%q: token %d (%s) granted after token %d (%s)", lock, b.Token, b.Mode, a.Token, a.Mode)
			continue
		}
		r.violate("rw-token-order", "%q: token %d granted to %s (%s, at %d) after token %d granted to %s (%s, at %d)",
			lock, b.Token, b.Owner, b.Mode, rwStart(b), a.Token, a.Owner, a.Mode, rwStart(a))
	}
}

// rwHolds checks the holds (ReleaseAfter) of lock: an exclusive holder's
// keeps everyone out, a shared holder's keeps exclusive holders out. A
// hold begins when the store applies it, after its holder began releasing
// (Release), and lasts at least until HeldUntil; no grant of the other
// kind can begin between the two (a gate held or kept is never granted,
// and an exclusive request lists kept shares too).
func (r *Report) rwHolds(lock string, lts []*Tenure, deletions []Fault) {
	for _, h := range lts {
		if h.HeldUntil == 0 {
			continue
		}
		for _, t := range lts {
			if t == h || (h.Mode != "exclusive" && t.Mode != "exclusive") {
				continue
			}
			s := rwStart(t)
			if s <= h.Release || s >= h.HeldUntil {
				continue
			}
			if k := deletedDuring(deletions, h.Release, s); k != "" {
				r.outsideContract(k, "%q: %s (token %d) granted inside the hold of %s (token %d)", lock, t.Owner, t.Token, h.Owner, h.Token)
				continue
			}
			r.violate("hold-broken", "%q: %s holder %s (token %d) granted at %d, inside the %s hold of %s (token %d) confirmed at %d, which lasts until %d at least",
				lock, t.Mode, t.Owner, t.Token, s, h.Mode, h.Owner, h.Token, h.HeldConfirmed, h.HeldUntil)
		}
	}
}

func nsDur(ns int64) string { return time.Duration(ns).Round(time.Microsecond).String() }
