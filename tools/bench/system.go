package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// Operations.
const (
	OpAcquire = "acquire"
	OpRenew   = "renew"
	OpRelease = "release"
)

// A System is a way to take leases that the benchmark measures: tenure's
// Locker on a store, or a baseline (the Jaeger protocol, a raw LWT).
type System interface {
	Name() string
	// Ops lists the operations it supports, in cycle order.
	Ops() []string
	// NewClient returns an independent client (its own owner).
	NewClient(id string) (Client, error)
}

// A Client holds at most one lease at a time. Acquire returns an error
// matching tenure.ErrHeld when another owner holds the resource.
type Client interface {
	Acquire(ctx context.Context, resource string, ttl time.Duration) error
	Renew(ctx context.Context) error
	Release(ctx context.Context) error
	Close()
}

// lockerSystem is tenure: one Locker per client on a shared store. Acquire
// is one TryAcquire, Renew is Lease.Renew (a renewal outside the
// background schedule, which the long TTL keeps from running), Release is
// Lease.Release.
type lockerSystem struct {
	store driver.Store
	opts  []tenure.Option
	// fresh makes every acquire take a resource never used before (the
	// resource name given, plus a counter), as the raw-LWT floor does.
	fresh bool
}

func (s *lockerSystem) Name() string {
	if s.fresh {
		return "tenure-new-names"
	}
	return "tenure"
}

func (s *lockerSystem) newNames() bool { return s.fresh }

func (s *lockerSystem) Ops() []string { return []string{OpAcquire, OpRenew, OpRelease} }

func (s *lockerSystem) NewClient(id string) (Client, error) {
	lk, err := tenure.New(s.store, append([]tenure.Option{tenure.WithOwnerID(id)}, s.opts...)...)
	if err != nil {
		return nil, err
	}
	return &lockerClient{lk: lk, fresh: s.fresh}, nil
}

type lockerClient struct {
	lk    *tenure.Locker
	lease *tenure.Lease
	fresh bool
	n     int
}

func (c *lockerClient) Acquire(ctx context.Context, resource string, ttl time.Duration) error {
	if c.fresh {
		c.n++
		resource = fmt.Sprintf("%s/%d", resource, c.n)
	}
	l, err := c.lk.TryAcquire(ctx, resource, ttl)
	if err != nil {
		return err
	}
	c.lease = l
	return nil
}

func (c *lockerClient) Renew(ctx context.Context) error {
	if c.lease == nil {
		return errors.New("bench: renew without a lease")
	}
	return c.lease.Renew(ctx)
}

func (c *lockerClient) Release(ctx context.Context) error {
	if c.lease == nil {
		return errors.New("bench: release without a lease")
	}
	err := c.lease.Release(ctx)
	c.lease = nil
	return err
}

func (c *lockerClient) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.lk.Close(ctx)
}
