package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/tenure-go/tenure/driver"
)

// batchSize bounds the leases of one renewal statement.
const batchSize = 500

// RenewBatch implements driver.BatchRenewer: up to 500 renewals in one
// UPDATE statement joined to the list of leases (one round trip, one
// transaction), each lease settled as Renew would settle it: nil when
// renewed, an error wrapping driver.ErrLeaseLost (driver.NotHolder, naming
// the current holder when there is one) when that grant no longer holds it,
// and otherwise the statement's error, the same for every lease of the
// statement (driver.UnknownOutcome when its answer was lost). When the
// statement changed fewer rows than it was given leases, a second one reads
// their holders. A lease given twice gets the same answer twice. Each lease
// is validated before any I/O; an invalid one gets its error and the
// others are renewed.
func (s *Store) RenewBatch(ctx context.Context, leases []driver.Renewal) []error {
	errs := make([]error, len(leases))
	type key struct {
		resource, owner string
		token           uint64
	}
	first := make(map[key]int, len(leases)) // lease -> its row
	row := make([]int, len(leases))         // lease -> row, -1 when invalid
	var rows []driver.Renewal               // distinct valid leases
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
		first[k] = len(rows)
		row[i] = len(rows)
		rows = append(rows, r)
	}
	rowErr := make([]error, len(rows))
	for lo := 0; lo < len(rows); lo += batchSize {
		hi := min(lo+batchSize, len(rows))
		s.renewChunk(ctx, rows[lo:hi], rowErr[lo:hi])
	}
	for i := range leases {
		if errs[i] == nil {
			errs[i] = rowErr[row[i]]
		}
	}
	return errs
}

// renewChunk renews distinct leases in one statement and sets errs[i] for
// each.
func (s *Store) renewChunk(ctx context.Context, leases []driver.Renewal, errs []error) {
	var b strings.Builder
	args := make([]any, 0, 4*len(leases))
	for i, l := range leases {
		if i == 0 {
			b.WriteString("SELECT ? AS r, ? AS o, ? AS k, ? AS ttl")
		} else {
			b.WriteString(" UNION ALL SELECT ?, ?, ?, ?")
		}
		args = append(args, l.Resource, l.Owner, l.Token, micros(l.TTL))
	}
	q := fmt.Sprintf(`UPDATE %[1]s l JOIN (%[2]s) b ON l.resource = b.r AND l.owner = b.o AND l.token = b.k
SET l.ttl_us = b.ttl, l.expires_at = %[3]s + INTERVAL b.ttl MICROSECOND
WHERE l.expires_at > %[3]s`, s.table, b.String(), now)
	label := fmt.Sprintf("%d leases", len(leases))
	holders := map[string]holderRow{}
	var changed int64
	err := s.with(ctx, "renew", label, func(c *sql.Conn) error {
		res, err := c.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		if changed, err = res.RowsAffected(); err != nil || changed == int64(len(leases)) {
			return err
		}
		// Fewer changed rows than leases: read the holders of all of them
		// (a row renewed by this statement reads as its grant's).
		clear(holders)
		in := make([]any, len(leases))
		for i, l := range leases {
			in[i] = l.Resource
		}
		rows, err := c.QueryContext(ctx, fmt.Sprintf(`SELECT resource, owner, token, COALESCE(ttl_us, 0), %s FROM %s WHERE resource IN (%s) AND %s`,
			remaining(""), s.table, placeholders(len(in)), live("")), in...)
		if err != nil {
			return errReadAfterWrite{err}
		}
		defer rows.Close()
		for rows.Next() {
			var (
				r []byte
				h holderRow
			)
			if err := rows.Scan(&r, &h.owner, &h.token, &h.ttlUs, &h.remainUs); err != nil {
				return errReadAfterWrite{err}
			}
			holders[string(r)] = h
		}
		if err := rows.Err(); err != nil {
			return errReadAfterWrite{err}
		}
		return nil
	})
	if err != nil {
		if _, ok := err.(errReadAfterWrite); ok {
			// The statement's outcome is known but not per lease: the
			// holders could not be read. Each lease gets the error.
			err = s.failed("renew", label, err)
		} else {
			err = s.writeErr("renew", label, err)
		}
		for i := range errs {
			errs[i] = err
		}
		return
	}
	if changed == int64(len(leases)) {
		return
	}
	for i, l := range leases {
		h, ok := holders[l.Resource]
		switch {
		case ok && string(h.owner) == l.Owner && h.token == l.Token:
			errs[i] = nil
		case ok:
			rec := h.record(l.Resource)
			errs[i] = fmt.Errorf("mysql store: renew %q: %w", l.Resource, driver.NotHolder(&rec))
		default:
			errs[i] = fmt.Errorf("mysql store: renew %q: %w", l.Resource, driver.NotHolder(nil))
		}
	}
}
