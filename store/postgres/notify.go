package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-go/tenure/driver"
)

// ProbeWait bounds how long the listening connection waits for the check
// notification it sent through the pool: twenty times as long as sending it
// took, at least MinProbeWait. When none arrives in time (a transaction
// pooler between the Store and the server), release notifications are
// given up for RecheckAfter: Subscribe fails at once and waiters poll.
const (
	ProbeWait    = 3 * time.Second
	MinProbeWait = 500 * time.Millisecond
	RecheckAfter = time.Minute
)

// probePrefix starts the payload of check notifications.
const probePrefix = "tenure listener check "

// errUnreachable is the error of a check notification that never arrived.
var errUnreachable = errors.New("a notification sent through the pool did not reach the listening connection " +
	"(a transaction pooler, such as PgBouncer in transaction mode, cannot carry LISTEN): waiters poll")

// errPooled is the error of a Store that already found a transaction pooler
// (its named prepared statements failed): LISTEN cannot work through it.
var errPooled = errors.New("the store's statements go through a transaction pooler (named prepared statements failed), " +
	"which cannot carry LISTEN: waiters poll")

// ListenCheck bounds how long the listening connection may be silent: a
// connection that received nothing for ListenCheck is pinged (an empty
// statement), and one whose ping is not answered within ListenCheck is
// closed and replaced, with a warning in the Store's log. So a connection
// that went half-open (a NAT or firewall that forgot it, a server host that
// vanished without a reset) is replaced within 2×ListenCheck of its last
// message, and every waiter then asks the store again (a release during
// the dead period is not lost).
const ListenCheck = 5 * time.Second

// listen keeps the one connection per Store that LISTENs on the release
// channel, and fans notifications out to subscribers (driver.Hub, which
// starts it at the first Subscribe and stops it at Close). It reconnects
// with capped backoff when the connection fails or falls silent
// (ListenCheck); after every (re)connection it wakes every subscriber,
// since releases may have been missed meanwhile, and it logs the loss and
// the reconnection. When notifications cannot reach it, it says so
// (Subscribe then fails at once) and checks again after RecheckAfter.
func (s *Store) listen(ctx context.Context) {
	delay := 50 * time.Millisecond
	var lost error // why the last listening connection ended; nil before the first
	for ctx.Err() == nil {
		listened, err := s.listenOnce(ctx, lost)
		s.hub.SetListening(false, err)
		if ctx.Err() != nil {
			return
		}
		if listened {
			delay = 50 * time.Millisecond
			lost = err
			s.log.Warn("postgres store: release notifications: the listening connection ended; reconnecting", "err", err)
		}
		wait := delay
		if errors.Is(err, errUnreachable) || errors.Is(err, errPooled) {
			s.setNotifyDown(err)
			wait = RecheckAfter
		} else {
			delay = min(2*delay, 2*time.Second)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

// errSilent is the error of a listening connection that stayed silent
// through a ping.
var errSilent = errors.New("silent, and no answer to a ping")

// listenOnce connects, LISTENs, checks that a notification sent through the
// pool arrives, and dispatches notifications until the connection fails,
// falls silent (ListenCheck), or ctx ends. listened reports whether it got
// as far as listening. lost, when not nil, is why the previous listening
// connection ended: this one is a reconnection, logged once it listens.
func (s *Store) listenOnce(ctx context.Context, lost error) (listened bool, err error) {
	if s.pooled.Load() {
		return false, errPooled
	}
	cctx, cancel := context.WithTimeout(ctx, s.connTO+time.Second)
	conn, err := pgx.ConnectConfig(cctx, s.connCfg)
	cancel()
	if err != nil {
		return false, fmt.Errorf("postgres store: listener: connect: %w", err)
	}
	defer func() {
		// Bounded: the connection may be the half-open one.
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(cctx)
		cancel()
	}()
	cctx, cancel = context.WithTimeout(ctx, s.connTO+time.Second)
	_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize())
	cancel()
	if err != nil {
		return false, fmt.Errorf("postgres store: listener: LISTEN: %w", err)
	}
	if err := s.probe(ctx, conn); err != nil {
		if errors.Is(err, errUnreachable) {
			// Best effort: the session the pooler lent may keep listening.
			uctx, cancel := context.WithTimeout(ctx, time.Second)
			_, _ = conn.Exec(uctx, "UNLISTEN *")
			cancel()
		}
		return false, err
	}
	s.setNotifyUp()
	s.hub.SetListening(true, nil)
	if lost != nil {
		s.log.Info("postgres store: release notifications: listening again; every waiter asks the store", "after", lost)
	}
	s.hub.WakeAll() // anything released while we were not listening
	check := s.listenCheck
	for {
		wctx, cancel := context.WithTimeout(ctx, check)
		n, err := conn.WaitForNotification(wctx)
		silent := err != nil && ctx.Err() == nil && wctx.Err() != nil
		cancel()
		switch {
		case err == nil:
			if !strings.HasPrefix(n.Payload, probePrefix) {
				s.hub.Wake(n.Payload)
			}
			continue
		case ctx.Err() != nil:
			return true, ctx.Err()
		case !silent:
			return true, fmt.Errorf("postgres store: listener: %w", err)
		}
		// Nothing for check: make sure the connection still carries
		// messages. Notifications that arrive meanwhile are kept by pgx for
		// the next WaitForNotification.
		pctx, cancel := context.WithTimeout(ctx, check)
		err = conn.Ping(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return true, ctx.Err()
		case err != nil:
			return true, fmt.Errorf("postgres store: listener: %w for %v: %w", errSilent, 2*check, err)
		}
	}
}

// probe sends a check notification through the pool and waits for it on
// conn, dispatching any other notification meanwhile. It returns
// errUnreachable when the check did not arrive within ProbeWait.
func (s *Store) probe(ctx context.Context, conn *pgx.Conn) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	payload := probePrefix + hex.EncodeToString(b[:])
	pctx, cancel := context.WithTimeout(ctx, s.connTO+time.Second)
	t0 := time.Now()
	err := s.with(pctx, "listener check", s.channel, func(c *pgxpool.Conn) error {
		_, err := c.Exec(pctx, s.sql.probe, s.args(s.channel, payload)...)
		return err
	})
	sent := time.Since(t0)
	cancel()
	if err != nil {
		return fmt.Errorf("postgres store: listener: send check: %w", err)
	}
	if s.pooled.Load() {
		return errPooled // found out while sending the check
	}
	// On a working connection the notification arrives about when the
	// NOTIFY's answer does.
	wctx, cancel := context.WithTimeout(ctx, min(max(20*sent, MinProbeWait), ProbeWait))
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		switch {
		case err == nil && n.Payload == payload:
			return nil
		case err == nil:
			if !strings.HasPrefix(n.Payload, probePrefix) {
				s.hub.Wake(n.Payload)
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case wctx.Err() != nil:
			return errUnreachable
		default:
			return fmt.Errorf("postgres store: listener: %w", err)
		}
	}
}

// setNotifyDown records that notifications cannot reach this Store: the
// Subscribes that wait end with err, later ones fail at once.
func (s *Store) setNotifyDown(err error) {
	s.notify.mu.Lock()
	defer s.notify.mu.Unlock()
	if s.notify.down == nil {
		s.notify.down = err
		s.notify.setDown(err)
	}
}

// setNotifyUp records that notifications reach this Store.
func (s *Store) setNotifyUp() {
	s.notify.mu.Lock()
	defer s.notify.mu.Unlock()
	if s.notify.down != nil {
		s.notify.down = nil
		s.notify.downCtx, s.notify.setDown = context.WithCancelCause(context.Background())
	}
}

// NotificationsDown returns why release notifications cannot reach this
// Store (a transaction pooler), or nil when they can or have not been
// tried.
func (s *Store) NotificationsDown() error {
	s.notify.mu.Lock()
	defer s.notify.mu.Unlock()
	return s.notify.down
}

// Subscribe implements driver.Notifier: the channel receives a value
// (coalesced, never blocking the sender) when a lease on resource that
// someone waited for is released through any store on this table (an
// acquire that found the lease held marks it, in the same statement), and
// after the listening connection was re-established. Of the Store's waiting
// subscribers of a resource, each release wakes one, the one that has
// waited longest (driver.Hub). It waits until the Store's listening
// connection is up and has received a notification sent through the pool
// (at most twice the connect timeout plus a second, and ctx), so that a
// release right after Subscribe returns is seen. When notifications cannot
// reach the Store (a transaction pooler), or the connection cannot be set
// up, it returns an error wrapping driver.ErrNotListening and the caller
// polls. A notification is only a hint: expiry sends none. The returned
// function ends the subscription; it is idempotent.
func (s *Store) Subscribe(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	return s.subscribe(ctx, resource, s.hub.Subscribe)
}

// Watch implements driver.Watcher: every release notification of resource
// wakes the watcher (a holder that watches its own lease,
// tenure.WithReleaseWatch). It marks the resource's row as waited for (one
// statement), so that a release by anyone notifies; otherwise as Subscribe.
func (s *Store) Watch(ctx context.Context, resource string) (<-chan struct{}, func(), error) {
	ch, stop, err := s.subscribe(ctx, resource, s.hub.Watch)
	if err != nil {
		return nil, nil, err
	}
	err = s.with(ctx, "watch", resource, func(c *pgxpool.Conn) error {
		_, err := c.Exec(ctx, s.sql.watch, s.args(resource)...)
		return err
	})
	if err != nil {
		stop()
		return nil, nil, s.failed("watch", resource, err)
	}
	return ch, stop, nil
}

// subscribe runs the hub's Subscribe or Watch, failing at once when
// notifications are known not to reach this Store, and when that is found
// out while it waits for the listening connection.
func (s *Store) subscribe(ctx context.Context, resource string,
	hub func(context.Context, string, time.Duration) (<-chan struct{}, func(), error)) (<-chan struct{}, func(), error) {
	if err := driver.ValidateResource(resource); err != nil {
		return nil, nil, err
	}
	s.notify.mu.Lock()
	down, downCtx := s.notify.down, s.notify.downCtx
	s.notify.mu.Unlock()
	if down != nil {
		return nil, nil, fmt.Errorf("postgres store: %w: %w", driver.ErrNotListening, down)
	}
	// sctx lives as long as the subscription: the hub reads it when the
	// subscription ends, to pass on a wake-up its subscriber gave up.
	sctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(downCtx, func() { cancel(context.Cause(downCtx)) })
	ch, unsubscribe, err := hub(sctx, resource, 2*s.connTO+time.Second)
	stop()
	if err != nil {
		cancel(nil)
		switch {
		case ctx.Err() == nil && sctx.Err() != nil:
			err = fmt.Errorf("postgres store: %w: %w", driver.ErrNotListening, err)
		default:
			err = fmt.Errorf("postgres store: %w", err)
		}
		return nil, nil, err
	}
	return ch, func() { unsubscribe(); cancel(nil) }, nil
}
