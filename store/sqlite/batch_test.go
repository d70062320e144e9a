package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/store/sqlite"
)

var (
	commitHookOnce sync.Once
	commitMu       sync.Mutex
	commits        = map[string]*atomic.Int64{} // database path → commits
)

// countCommits counts the transactions committed on every connection to
// path opened from now on (SQLite's commit hook).
func countCommits(path string) *atomic.Int64 {
	n := new(atomic.Int64)
	commitMu.Lock()
	commits[path] = n
	commitMu.Unlock()
	commitHookOnce.Do(func() {
		msqlite.RegisterConnectionHook(func(conn msqlite.ExecQuerierContext, dsn string) error {
			p := strings.TrimPrefix(dsn, "file:")
			if i := strings.IndexByte(p, '?'); i >= 0 {
				p = p[:i]
			}
			commitMu.Lock()
			c := commits[p]
			commitMu.Unlock()
			if h, ok := conn.(msqlite.HookRegisterer); ok && c != nil {
				h.RegisterCommitHook(func() int32 { c.Add(1); return 0 })
			}
			return nil
		})
	})
	return n
}

// RenewBatch renews every lease in one transaction and answers each one:
// renewed, lost (expired, or taken by another grant, named), or bad input.
func TestRenewBatch(t *testing.T) {
	ctx := context.Background()
	clock := newFakeHostClock()
	_, path := open(t)
	n := countCommits(path)
	s := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, clock.read, nil))
	a, _ := naming.NewOwner("a")
	b, _ := naming.NewOwner("b")
	var batch []driver.Renewal
	for i := 0; i < 50; i++ {
		r := fmt.Sprintf("r%d", i)
		ttl := time.Minute
		if i == 1 {
			ttl = time.Second // expires
		}
		rec, err := s.Acquire(ctx, r, a, ttl)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, driver.Renewal{Resource: r, Owner: a, Token: rec.Token, TTL: 2 * time.Minute})
	}
	clock.now.Add(int64(2 * time.Second))
	// r2 taken by b after a released it.
	if err := s.Release(ctx, "r2", a, batch[2].Token); err != nil {
		t.Fatal(err)
	}
	rb, err := s.Acquire(ctx, "r2", b, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	batch[3].TTL = 0 // bad input
	before := n.Load()
	errs := s.RenewBatch(ctx, batch)
	if got := n.Load() - before; got != 1 {
		t.Errorf("%d transactions for one batch of %d renewals; want 1", got, len(batch))
	}
	if len(errs) != len(batch) {
		t.Fatalf("%d answers for %d leases", len(errs), len(batch))
	}
	var held *tenure.HeldError
	for i, err := range errs {
		switch i {
		case 1:
			if !errors.Is(err, tenure.ErrLeaseLost) || errors.As(err, &held) {
				t.Errorf("expired lease: %v; want ErrLeaseLost without a holder", err)
			}
		case 2:
			if !errors.Is(err, tenure.ErrLeaseLost) || !errors.As(err, &held) || held.Holder.Owner != b || held.Holder.Token != rb.Token {
				t.Errorf("lease taken by b: %v; want ErrLeaseLost naming b", err)
			}
		case 3:
			if !errors.Is(err, tenure.ErrInvalidTTL) {
				t.Errorf("TTL 0: %v; want ErrInvalidTTL", err)
			}
		default:
			if err != nil {
				t.Errorf("lease %d: %v", i, err)
			}
		}
	}
	got, err := s.Get(ctx, "r0")
	if err != nil || got.TTL != 2*time.Minute || got.Remaining != 2*time.Minute {
		t.Fatalf("after the batch: %+v, %v; want TTL and time left 2m", got, err)
	}
}

// Operations started together share transactions, and each gets its own
// answer: many goroutines taking, renewing and releasing leases at once
// never see an error, and every grant has a token of its own.
func TestGroupCommit(t *testing.T) {
	ctx := context.Background()
	_, path := open(t)
	n := countCommits(path)
	s := reopen(t, sqlite.Config{Path: path})
	s2 := reopen(t, sqlite.Config{Path: path}) // a second Store of this process on the file
	const workers, rounds = 32, 10
	var mu sync.Mutex
	tokens := map[uint64]bool{}
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	before := n.Load()
	for w := 0; w < workers; w++ {
		st := s
		if w%2 == 1 {
			st = s2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner, _ := naming.NewOwner(fmt.Sprint(w))
			for i := 0; i < rounds; i++ {
				r := fmt.Sprintf("w%d", w%8) // four workers per resource
				rec, err := st.Acquire(ctx, r, owner, time.Minute)
				if errors.Is(err, tenure.ErrHeld) {
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				dup := tokens[rec.Token]
				tokens[rec.Token] = true
				mu.Unlock()
				if dup {
					errc <- fmt.Errorf("token %d granted twice", rec.Token)
					return
				}
				if err := st.Renew(ctx, r, owner, rec.Token, time.Minute); err != nil {
					errc <- err
					return
				}
				if err := st.Release(ctx, r, owner, rec.Token); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("%d grants; %d transactions", len(tokens), n.Load()-before)
}

// A caller whose context ends while its operation waits for the lock gets
// a definite answer (the context's error, not an unknown outcome), and the
// operation never runs. While another process holds the lock, a write fails
// within the busy timeout.
func TestWithdrawnBeforeTheLock(t *testing.T) {
	ctx := context.Background()
	_, path := open(t)
	s := reopen(t, sqlite.Config{Path: path, BusyTimeout: 2 * time.Second})
	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	owner, _ := naming.NewOwner("a")
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = s.Acquire(cctx, "r", owner, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("Acquire whose context ended while waiting for the lock: %v; want DeadlineExceeded, not an unknown outcome", err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "r"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("the withdrawn acquire ran: Get = %v", err)
	}
	if _, err := s.Acquire(ctx, "r", owner, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// Two Stores of one process on one file take turns through the process-wide
// gate: while one is inside a transaction, the other's write waits for it
// (no busy-handler sleeps) and fails within its own busy timeout, with a
// definite error.
func TestGateTimeout(t *testing.T) {
	ctx := context.Background()
	clock := newFakeHostClock()
	inside, resume := make(chan struct{}), make(chan struct{})
	var pauseNext atomic.Bool
	pausing := func() (string, time.Duration, error) {
		if pauseNext.CompareAndSwap(true, false) {
			close(inside)
			<-resume
		}
		return clock.read()
	}
	_, path := open(t)
	a := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, pausing, nil))
	b := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path, BusyTimeout: 200 * time.Millisecond}, clock.read, nil))
	ownerA, _ := naming.NewOwner("a")
	ownerB, _ := naming.NewOwner("b")
	pauseNext.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := a.Acquire(ctx, "r", ownerA, time.Minute)
		done <- err
	}()
	<-inside
	start := time.Now()
	_, err := b.Acquire(ctx, "other", ownerB, time.Minute)
	took := time.Since(start)
	close(resume)
	if err == nil || errors.Is(err, tenure.ErrUnknownOutcome) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("B's write while A's transaction is open: %v; want a definite 'locked' error", err)
	}
	t.Logf("B failed after %v: %v", took.Round(time.Millisecond), err)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "other", ownerB, time.Minute); err != nil {
		t.Fatalf("B after A committed: %v", err)
	}
}

// A transaction that may grant a lease commits with synchronous=FULL (the
// token is on disk before anyone is told); one of renewals and releases
// only, with NORMAL (no fsync: only an OS crash loses it, and that reboots
// the host, which expires every lease).
func TestSynchronousPerTransaction(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	owner, _ := naming.NewOwner("a")
	want := func(what string, n int) {
		t.Helper()
		got, err := sqlite.WriterSynchronous(ctx, s)
		if err != nil || got != n {
			t.Fatalf("after %s: synchronous = %d, %v; want %d", what, got, err, n)
		}
	}
	rec, err := s.Acquire(ctx, "r", owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want("a grant", 2)
	if err := s.Renew(ctx, "r", owner, rec.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	want("a renewal", 1)
	if errs := s.RenewBatch(ctx, []driver.Renewal{{Resource: "r", Owner: owner, Token: rec.Token, TTL: time.Minute}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	want("a batch renewal", 1)
	if err := s.Release(ctx, "r", owner, rec.Token); err != nil {
		t.Fatal(err)
	}
	want("a release", 1)
	if _, err := s.Acquire(ctx, "r", owner, time.Minute); err != nil {
		t.Fatal(err)
	}
	want("a grant", 2)
}
