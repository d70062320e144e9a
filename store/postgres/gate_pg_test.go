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
	tx, err := admin.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+postgres.DefaultTable+` WHERE resource = $1 FOR UPDATE`, blocked); err != nil {
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
	go func() {
		defer wg.Done()
		_, err := s.Acquire(ctx, blocked, "other", time.Minute)
		var held *driver.HeldError
		if err != nil && !errors.As(err, &held) {
			done("blocked acquire", err)
			return
		}
		done("blocked acquire", nil)
	}()
	// The blocked acquire holds the only connection (and waits for the
	// admin's lock).
	for deadline := time.Now().Add(10 * time.Second); s.Pool().Stat().AcquiredConns() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the blocked acquire never took the connection")
		}
	}
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
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	want := []string{"blocked acquire", "release", "queued acquire"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("completed in the order %q; want %q", order, want)
	}
}
