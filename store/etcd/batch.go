package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-go/tenure/driver"
)

// RenewBatch implements driver.BatchRenewer: the grants this Store made,
// renewed with their TTL, need at most one keep-alive per shared etcd lease
// (only when its last one is older than the margin) and are checked
// together.
//
// Where a batch holds fewer than listAtLeast grants of one shared etcd
// lease, their keys are checked as Renew checks one: one Txn per MaxTxnOps
// keys, each key's mod_revision compared, at most maxChecks such Txns in
// flight per Store. Where it holds more, the batch renews them on the
// keep-alive alone and starts (at most every tenth of the TTL, from 1 s to
// 5 s) a listing of the keys attached to that etcd lease in the background;
// a grant whose key a listing did not show is read before its renewal is
// reported (by the batch, when the listing answers while the batch runs,
// and otherwise by its next renewal). So a key deleted by hand is found at
// the next renewal in small batches, and within a tenth of the TTL and the
// next renewal in large ones: on etcd 3.4,
// reading 10,000 keys a second in Txns held up the server's writes (checks
// of 128 keys took 15 s while 100,000 leases were being taken), and listing
// them for every batch cost the client more CPU than it had. A key found
// changed is read again in a linearizable Txn whose else branch tells the
// lost leases and their holders. Other renewals run as Renew.
func (s *Store) RenewBatch(ctx context.Context, leases []driver.Renewal) []error {
	errs := make([]error, len(leases))
	begin := s.clock.Now()
	var own []renewItem
	var other []int
	for i, r := range leases {
		if err := ttls.ValidateAcquire(r.Resource, r.Owner, r.TTL); err != nil {
			errs[i] = err
			continue
		}
		if g := s.lookup(s.key(r.Resource), r.Owner, r.Token); g != nil && g.ss.secs == wholeSeconds(r.TTL) {
			own = append(own, renewItem{i, g})
		} else {
			other = append(other, i)
		}
	}
	// Every renewal below writes its own answer; until it does, it is not
	// confirmed (a nil error would say renewed).
	for _, it := range own {
		errs[it.i] = errNotSettled
	}
	var wg sync.WaitGroup
	if len(other) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range other {
				r := leases[i]
				errs[i] = s.Renew(ctx, r.Resource, r.Owner, r.Token, r.TTL)
			}
		}()
	}
	// One keep-alive (at most) per shared etcd lease, covering the longest
	// TTL renewed on it.
	need := map[*session]time.Time{}
	bySession := map[*session][]renewItem{}
	for _, it := range own {
		n := begin.Add(leases[it.i].TTL)
		if t, ok := need[it.g.ss]; !ok || n.After(t) {
			need[it.g.ss] = n
		}
		bySession[it.g.ss] = append(bySession[it.g.ss], it)
	}
	kas := make(map[*session]*keepAlive, len(need))
	for ss, n := range need {
		kas[ss] = ss.start(n)
	}
	var byTxn []renewItem
	for ss, items := range bySession {
		if len(items) < listAtLeast {
			byTxn = append(byTxn, items...)
			continue
		}
		ss.audit()
		var listed []renewItem
		s.mu.Lock()
		for _, it := range items {
			if it.g.suspect {
				byTxn = append(byTxn, it)
			} else {
				listed = append(listed, it)
			}
		}
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A grant that a listing marks suspect while the batch runs (the
			// listing answered while an earlier settle waited for the
			// keep-alive) has its key read before its renewal is reported,
			// whether or not it was settled already: every item gets an
			// answer of its own, and none is confirmed past a listing that
			// found its key changed.
			var late []renewItem
			for _, it := range listed {
				if s.isSuspect(it.g) {
					late = append(late, it)
					continue
				}
				errs[it.i] = s.settle(ctx, it.g, kas[ss])
				if errs[it.i] == nil && s.isSuspect(it.g) {
					late = append(late, it)
				}
			}
			s.checkItems(ctx, late, errs, kas)
		}()
	}
	s.checkItems(ctx, byTxn, errs, kas)
	wg.Wait()
	return errs
}

// errNotSettled is a batch renewal's answer until the batch settles it:
// never a nil (renewed) by omission.
var errNotSettled = errors.New("etcd store: renewal not settled")

// renewItem is one renewal of a batch: its index and its grant.
type renewItem struct {
	i int
	g *grant
}

// listAtLeast is the number of a batch's grants on one shared etcd lease
// from which the batch relies on listings of the etcd lease's keys instead
// of reading each key.
const listAtLeast = 128

// checkItems checks the keys of items with Txns of at most MaxTxnOps keys
// (at most maxChecks in flight per Store) and settles each renewal in
// errs. It returns when all are settled.
func (s *Store) checkItems(ctx context.Context, items []renewItem, errs []error, kas map[*session]*keepAlive) {
	var wg sync.WaitGroup
	for lo := 0; lo < len(items); lo += s.maxTxnOps {
		part := items[lo:min(lo+s.maxTxnOps, len(items))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs := make([]*grant, len(part))
			for j, it := range part {
				gs[j] = it.g
			}
			var resp *clientv3.TxnResponse
			var err error
			select {
			case s.checks <- struct{}{}:
				resp, err = s.check(ctx, gs)
				<-s.checks
			case <-ctx.Done():
				err = ctxErr(ctx)
			}
			for j, it := range part {
				g := it.g
				switch {
				case err != nil:
					errs[it.i] = fmt.Errorf("etcd store: renew %q: %w", g.resource, err)
				case resp.Succeeded:
					s.clearSuspect(g)
					errs[it.i] = s.settle(ctx, g, kas[g.ss])
				default:
					if kv := firstKV(resp, j); kv != nil && kv.ModRevision == g.mod {
						s.clearSuspect(g)
						errs[it.i] = s.settle(ctx, g, kas[g.ss])
					} else {
						s.forget(g)
						errs[it.i] = notHolder("renew", g.resource, g.owner, uint64(g.token), kv)
					}
				}
			}
		}()
	}
	wg.Wait()
}

// isSuspect reports whether a listing found g's key changed since a read
// last found it as the Store left it.
func (s *Store) isSuspect(g *grant) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return g.suspect
}

// clearSuspect records that a read found g's key as the Store left it.
func (s *Store) clearSuspect(g *grant) {
	s.mu.Lock()
	g.suspect = false
	s.mu.Unlock()
}
