package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-go/tenure/driver"
)

// listen keeps the one connection per Store that LISTENs on the release
// channel, and fans notifications out to subscribers (driver.Hub, which
// starts it at the first Subscribe and stops it at Close). It reconnects
// with capped backoff when the connection fails; after every (re)connection
// it wakes every subscriber, since releases may have been missed meanwhile.
func (s *Store) listen(ctx context.Context) {
	delay := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx)
		s.hub.SetListening(false, err)
		if ctx.Err() != nil {
			return
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// listenOnce connects, LISTENs, and dispatches notifications until the
// connection fails or ctx ends.
func (s *Store) listenOnce(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, s.connTO+time.Second)
	conn, err := pgx.ConnectConfig(cctx, s.connCfg)
	cancel()
	if err != nil {
		return fmt.Errorf("postgres store: listener: connect: %w", err)
	}
	defer conn.Close(context.Background())
	cctx, cancel = context.WithTimeout(ctx, s.connTO+time.Second)
	_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize())
	cancel()
	if err != nil {
		return fmt.Errorf("postgres store: listener: LISTEN: %w", err)
	}
	s.hub.SetListening(true, nil)
	s.hub.WakeAll() // anything released while we were not listening
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("postgres store: listener: %w", err)
		}
		s.hub.Wake(n.Payload)
	}
}

// Subscribe implements driver.Notifier: the channel receives a value
// (coalesced, never blocking the sender) when a lease on resource is
// released through any store on this table, and after the listening
// connection was re-established. It waits until the Store's listening
// connection is up (at most twice the connect timeout plus a second, and
// ctx), so that a release right after Subscribe returns is seen; if it
// cannot be set up, Subscribe returns an error and the caller polls. A
// notification is only a hint: expiry sends none. The returned function
// ends the subscription; it is idempotent.
func (s *Store) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	ch, stop, err := s.hub.Subscribe(ctx, resource, 2*s.connTO+time.Second)
	if err != nil && !errors.Is(err, driver.ErrInvalidResource) {
		err = fmt.Errorf("postgres store: %w", err)
	}
	return ch, stop, err
}

// Watch implements driver.Watcher: every release notification of resource
// wakes the watcher (Subscribe wakes one waiter per release).
func (s *Store) Watch(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	ch, stop, err := s.hub.Watch(ctx, resource, 2*s.connTO+time.Second)
	if err != nil && !errors.Is(err, driver.ErrInvalidResource) {
		err = fmt.Errorf("postgres store: %w", err)
	}
	return ch, stop, err
}
