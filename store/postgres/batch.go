package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-go/tenure/driver"
)

// RenewBatch implements driver.BatchRenewer: every renewal in one UPDATE
// statement over unnested arrays (one round trip, one transaction), each
// lease settled as Renew would settle it: nil when renewed, an error
// wrapping driver.ErrLeaseLost (driver.NotHolder, naming the current holder
// when there is one) when that grant no longer holds it, and otherwise the
// statement's error, the same for every lease (driver.UnknownOutcome when
// its answer was lost). A lease given twice gets the same answer twice.
// Each lease is validated before any I/O; an invalid one gets its error and
// the others are renewed.
func (s *Store) RenewBatch(ctx context.Context, leases []driver.Renewal) []error {
	errs := make([]error, len(leases))
	type key struct {
		resource, owner string
		token           uint64
	}
	var (
		first             = make(map[key]int, len(leases)) // lease -> its row in the arrays
		row               = make([]int, len(leases))       // lease -> row, -1 when invalid
		resources, owners []string
		tokens, ttlMs     []int64
		rowLease          []int // row -> first lease
	)
	for i, r := range leases {
		row[i] = -1
		if errs[i] = ttls.ValidateAcquire(r.Resource, r.Owner, r.TTL); errs[i] != nil {
			continue
		}
		k := key{r.Resource, r.Owner, r.Token}
		if j, ok := first[k]; ok {
			row[i] = j
			continue
		}
		first[k] = len(resources)
		row[i] = len(resources)
		rowLease = append(rowLease, i)
		resources = append(resources, r.Resource)
		owners = append(owners, r.Owner)
		tokens = append(tokens, int64(r.Token))
		ttlMs = append(ttlMs, driver.Milliseconds(r.TTL))
	}
	if len(resources) == 0 {
		return errs
	}
	rowErr := make([]error, len(resources))
	label := fmt.Sprintf("%d leases", len(resources))
	err := s.with(ctx, "renew", label, func(c *pgxpool.Conn) error {
		clear(rowErr)
		rows, err := c.Query(ctx, s.sql.renewBatch, s.args(resources, owners, tokens, ttlMs)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				i int64
				h holderRow
			)
			if err := rows.Scan(&i, &h.owner, &h.token, &h.ttlMs, &h.remainMs); err != nil {
				return err
			}
			j := int(i) - 1
			if j < 0 || j >= len(resources) || rowErr[j] != nil {
				return fmt.Errorf("answer for row %d of %d", i, len(resources))
			}
			l := leases[rowLease[j]]
			rowErr[j] = fmt.Errorf("postgres store: renew %q: %w", l.Resource, notHolder(l.Resource, l.Owner, l.Token, h))
		}
		return rows.Err()
	})
	if err != nil {
		err = s.writeErr("renew", label, err)
	}
	for i := range leases {
		if errs[i] != nil {
			continue
		}
		if err != nil {
			errs[i] = err
		} else {
			errs[i] = rowErr[row[i]]
		}
	}
	return errs
}
