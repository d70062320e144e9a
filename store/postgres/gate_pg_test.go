package postgres_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/postgres"
)

// TestReleasePassesQueuedStatements: with every connection busy, a release
// that arrives after an acquire runs before it when a connection comes free
// (the gate in store/postgres/gate.go). The store has one connection, held by
// an acquire blocked on a row another session locked.
func TestReleasePassesQueuedStatements(t *testing.T) {
	ctx := testserver.Ctx(t)
	admin := open(t)
	s := open(t, func(c *postgres.Config) { c.Pool.MaxConns = 1 })
	name := func(n string) string { return fmt.Sprintf("gate/%s/%d", n, time.Now().UnixNano()) }
	blocked, queued, freed := name("blocked"), name("queued"), name("freed")
	for _, r := range []string{blocked, freed} {
		if _, err := s.Acquire(ctx, r, "setup", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	held, err := s.Acquire(ctx, freed, "setup", time.Minute) // the same grant, renewed: its token
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	done := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			order = append(order, what+": "+err.Error())
			return
		}
		order = append(order, what)
	}
	wait := func(what string, cond func(releases, others int) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond(postgres.GateWaiting(s)) {
			if time.Now().After(deadline) {
				r, o := postgres.GateWaiting(s)
				t.Fatalf("waiting for %s: %d releases and %d others queued", what, r, o)
			}
			time.Sleep(time.Millisecond)
		}
	}
	wg.Add(3)
	unblock := blockOnlyConnection(t, admin, s, blocked, func(err error) {
		defer wg.Done()
		done("blocked acquire", err)
	})
	go func() {
		defer wg.Done()
		_, err := s.Acquire(ctx, queued, "other", time.Minute)
		done("queued acquire", err)
	}()
	wait("the queued acquire", func(r, o int) bool { return o == 1 })
	go func() {
		defer wg.Done()
		done("release", s.Release(ctx, freed, "setup", held.Token))
	}()
	wait("the release", func(r, o int) bool { return r == 1 })
	unblock()
	wg.Wait()
	want := []string{"blocked acquire", "release", "queued acquire"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("completed in the order %q; want %q", order, want)
	}
}

// blockOnlyConnection makes the only connection of s busy: an acquire of
// resource (held by another owner) waits for a row lock that admin holds,
// until unblock; then settled gets that acquire's error, nil when it was
// refused as held, as it should be.
func blockOnlyConnection(t *testing.T, admin, s *postgres.Store, resource string, settled func(error)) (unblock func()) {
	t.Helper()
	ctx := testserver.Ctx(t)
	tx, err := admin.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+postgres.DefaultTable+` WHERE resource = $1 FOR UPDATE`, resource); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := s.Acquire(ctx, resource, "other", time.Minute)
		var held *driver.HeldError
		if errors.As(err, &held) {
			err = nil
		}
		settled(err)
	}()
	for deadline := time.Now().Add(10 * time.Second); s.Pool().Stat().AcquiredConns() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the blocked acquire never took the connection")
		}
	}
	return func() {
		if err := tx.Rollback(ctx); err != nil {
			t.Error(err)
		}
	}
}

// TestCloseAnswersQueuedStatements: a statement that waits for a
// connection when Close runs answers that the Store is closed
// (driver.ErrStoreUnusable, as a call after Close does), not with the
// pool's own error.
func TestCloseAnswersQueuedStatements(t *testing.T) {
	ctx := testserver.Ctx(t)
	admin := open(t)
	s := open(t, func(c *postgres.Config) { c.Pool.MaxConns = 1 })
	blocked := fmt.Sprintf("gate/close/%d", time.Now().UnixNano())
	if _, err := s.Acquire(ctx, blocked, "setup", time.Minute); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	unblock := blockOnlyConnection(t, admin, s, blocked, func(err error) { first <- err })
	queued := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, blocked+"/queued", "other", time.Minute)
		queued <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, o := postgres.GateWaiting(s); o == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second acquire never queued")
		}
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	for deadline := time.Now().Add(10 * time.Second); !s.Closing(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Close never started")
		}
	}
	unblock()
	if err := <-first; err != nil {
		t.Fatalf("the statement running at Close: %v", err)
	}
	if err := <-queued; !errors.Is(err, driver.ErrStoreUnusable) {
		t.Fatalf("the statement queued at Close: %v; want driver.ErrStoreUnusable", err)
	}
	<-closed
}
