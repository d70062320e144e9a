package main

// What the commands that inspect and free leases (status, list, release)
// share: the store opened without creating anything, the JSON form of a
// lease, and safe table cells.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/store"
)

// leaseJSON is a lease as status and list print it with --json. A slot
// lease of a semaphore has the semaphore's resource, its slot and number of
// slots too, and its marker lease the semaphore's resource and number of
// slots. The status of a semaphore has the number of slots (the marker's
// when no slot is held), the number held and the slot leases (holders).
type leaseJSON struct {
	Resource    string `json:"resource"`
	Held        bool   `json:"held"`
	Owner       string `json:"owner,omitempty"`
	OwnerID     string `json:"owner_id,omitempty"`
	Value       string `json:"value,omitempty"`
	Token       uint64 `json:"token,omitempty"`
	TTLMs       int64  `json:"ttl_ms,omitempty"`
	RemainingMs int64  `json:"remaining_ms,omitempty"`

	Semaphore string      `json:"semaphore,omitempty"`
	Slot      int         `json:"slot,omitempty"`
	Slots     int         `json:"slots,omitempty"`
	SlotsHeld int         `json:"slots_held,omitempty"`
	Holders   []leaseJSON `json:"holders,omitempty"`

	// Mode is "shared" for a shared holder's lease (Lock names the resource
	// it shares); in status, the mode of the holder of RESOURCE's own lease
	// (see gateMode).
	Mode          string      `json:"mode,omitempty"`
	Lock          string      `json:"lock,omitempty"`
	SharedHeld    int         `json:"shared_held,omitempty"`
	SharedHolders []leaseJSON `json:"shared_holders,omitempty"`
}

func toJSON(rec tenure.Record) leaseJSON {
	id, value := naming.ParseCandidate(rec.Owner)
	j := leaseJSON{
		Resource:    rec.Resource,
		Held:        true,
		Owner:       rec.Owner,
		OwnerID:     id,
		Value:       value,
		Token:       rec.Token,
		TTLMs:       rec.TTL.Milliseconds(),
		RemainingMs: rec.Remaining.Milliseconds(),
	}
	if sem, slot, slots, ok := semaphoreOf(rec.Resource); ok {
		j.Semaphore, j.Slot, j.Slots = sem, slot, slots
	} else if sem, slots, ok := markerOf(rec); ok {
		j.Semaphore, j.Slots = sem, slots
	} else if of, ok := naming.ParseSharedName(rec.Resource); ok {
		j.Mode, j.Lock = "shared", of
	}
	return j
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fail(exitSoftware, "write JSON: %v", err)
	}
	return nil
}

// withStore opens the store to inspect it (creating nothing) and runs f.
// Where there is no tenure store yet, f gets one that holds no lease (see
// noLeases).
func (a *app) withStore(f func(ctx context.Context, s driver.Store) error) error {
	u, err := a.parseStore()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	s, err := a.inspectStore(ctx, u)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, ok := s.(noLeases); !ok {
		s = noLeases{Store: s, url: u.String()}
	}
	return f(ctx, s)
}

// inspectStore opens the store of u to inspect it, creating nothing. Where
// there is no tenure store (no SQLite file; a server store whose schema
// tenure init has not created) it returns one that holds no lease: status,
// list, release and leader then answer as of an empty store.
func (a *app) inspectStore(ctx context.Context, u *store.URL) (driver.Store, error) {
	s, err := a.openStore(ctx, u, true)
	var ee *exitError
	if errors.As(err, &ee) && ee.code == exitNoStore {
		a.log.Info("no tenure store at the URL yet: no lease is held there", "store", u.String())
		return noLeases{url: u.String()}, nil
	}
	return s, err
}

// errNoStoreYet is why a lease is not held where there is no store.
var errNoStoreYet = errors.New("there is no tenure store at the URL yet")

// noLeases is a store as status, list, release and leader see it where
// there may be no tenure store yet (they create none): with Store nil
// (nothing could be opened), or where Store answers that its schema does
// not exist (driver.ErrNoStore), it holds no lease. url is the store's
// URL, redacted, for messages.
type noLeases struct {
	driver.Store
	url string
}

// missing returns the error of a lease that is not held because there is
// no store.
func (s noLeases) missing(resource string) error {
	return fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, resource, errNoStoreYet)
}

func (s noLeases) Get(ctx context.Context, resource string) (tenure.Record, error) {
	if s.Store == nil {
		return tenure.Record{}, s.missing(resource)
	}
	rec, err := s.Store.Get(ctx, resource)
	if errors.Is(err, driver.ErrNoStore) {
		return tenure.Record{}, s.missing(resource)
	}
	return rec, err
}

func (s noLeases) List(ctx context.Context, prefix string) ([]tenure.Record, error) {
	if s.Store == nil {
		return nil, nil
	}
	recs, err := s.Store.List(ctx, prefix)
	if errors.Is(err, driver.ErrNoStore) {
		return nil, nil
	}
	return recs, err
}

func (s noLeases) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (tenure.Record, error) {
	if s.Store == nil {
		return tenure.Record{}, fmt.Errorf("%w: %w", driver.ErrNoStore, errNoStoreYet)
	}
	return s.Store.Acquire(ctx, resource, owner, ttl)
}

func (s noLeases) Renew(ctx context.Context, resource, owner string, token uint64, ttl time.Duration) error {
	if s.Store == nil {
		return driver.NotHolder(nil)
	}
	return s.Store.Renew(ctx, resource, owner, token, ttl)
}

func (s noLeases) Release(ctx context.Context, resource, owner string, token uint64) error {
	if s.Store == nil {
		return driver.NotHolder(nil)
	}
	return s.Store.Release(ctx, resource, owner, token)
}

func (s noLeases) Close() error {
	if s.Store == nil {
		return nil
	}
	return s.Store.Close()
}

func tokenCell(t uint64) string {
	if t == 0 {
		return "-"
	}
	return strconv.FormatUint(t, 10)
}

// durCell formats a TTL or a time left; "-" when the store does not say.
func durCell(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmtDur(d)
}
