package redis

import (
	"context"
	"fmt"

	"github.com/tenure-go/tenure/driver"
)

// RenewBatch implements driver.BatchRenewer: the leases are renewed as
// Renew would, by one script call per maxBatch leases (the core sends at
// most 1,000; with WaitReplicas, the calls and one WAIT in one pipeline);
// on a cluster, one script call per
// hash slot and maxBatch leases, in one pipeline per master, the masters
// in parallel. Each lease gets its own answer; an error of a call itself
// (UnknownOutcome when the answer was lost) is every lease's of that call.
// Redis runs a call's renewals one after the other without serving other
// clients, about a microsecond each.
func (s *Store) RenewBatch(ctx context.Context, leases []driver.Renewal) []error {
	errs := make([]error, len(leases))
	var groups [][]int // indexes of leases, per call
	if s.cluster == nil {
		var idx []int
		for i, r := range leases {
			if errs[i] = ttls.ValidateAcquire(r.Resource, r.Owner, r.TTL); errs[i] == nil {
				idx = append(idx, i)
			}
		}
		for len(idx) > 0 {
			chunk := idx[:min(len(idx), maxBatch)]
			idx = idx[len(chunk):]
			groups = append(groups, chunk)
		}
	} else {
		bySlot := map[int][]int{}
		var order []int
		for i, r := range leases {
			if errs[i] = ttls.ValidateAcquire(r.Resource, r.Owner, r.TTL); errs[i] == nil {
				slot := keySlot(s.leaseKey(r.Resource))
				if len(bySlot[slot]) == maxBatch {
					groups = append(groups, bySlot[slot])
					bySlot[slot] = nil
				}
				if bySlot[slot] == nil {
					order = append(order, slot)
				}
				bySlot[slot] = append(bySlot[slot], i)
			}
		}
		for _, slot := range order {
			if len(bySlot[slot]) > 0 {
				groups = append(groups, bySlot[slot])
				bySlot[slot] = nil
			}
		}
	}
	calls := make([]*call, len(groups))
	for g, chunk := range groups {
		keys := make([]string, len(chunk))
		args := make([]any, len(chunk), 2*len(chunk))
		same := true
		first := driver.Milliseconds(leases[chunk[0]].TTL)
		for j, i := range chunk {
			r := leases[i]
			ms := driver.Milliseconds(r.TTL)
			same = same && ms == first
			keys[j] = s.leaseKey(r.Resource)
			args[j] = leaseValue(r.Token, r.Owner, ms)
		}
		// The TTLs: one for all when they are the same (the usual case).
		if same {
			args = append(args, first)
		} else {
			for _, i := range chunk {
				args = append(args, driver.Milliseconds(leases[i].TTL))
			}
		}
		calls[g] = &call{sc: renewBatchScript, keys: keys, args: args}
	}
	if s.cluster == nil && s.waitN == 0 || len(calls) == 1 {
		// One call after the other (one server: a thousand leases a call).
		for _, c := range calls {
			c.res, c.acked, c.waitErr, c.err = s.write(ctx, c.sc, c.keys, c.args...)
		}
	} else {
		s.runCalls(ctx, calls, s.waitN > 0)
	}
	for g, chunk := range groups {
		c := calls[g]
		answers, ok := c.res.([]any)
		err := c.err
		if err == nil && (!ok || len(answers) != len(chunk)) {
			err = fmt.Errorf("unexpected reply %v", c.res)
		}
		for j, i := range chunk {
			if err != nil {
				errs[i] = writeErr("renew", leases[i].Resource, err)
			} else {
				errs[i] = s.confirm("renew", leases[i].Resource, answers[j], c.acked, c.waitErr)
			}
		}
	}
	return errs
}
