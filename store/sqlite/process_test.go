package sqlite_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/sqlite"
)

// TestMain lets the test binary act as a contending process: with
// TENURE_SQLITE_CONTENDER set, it runs contend instead of the tests.
func TestMain(m *testing.M) {
	testserver.FairHolderMain(func(ctx context.Context, path string) (driver.Store, error) {
		return sqlite.Open(ctx, sqlite.Config{Path: path})
	})
	if path := os.Getenv(readOnlyEnv); path != "" {
		os.Exit(readOnlyMain(path, os.Stdout))
	}
	if path := os.Getenv("TENURE_SQLITE_OPEN"); path != "" {
		s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		s.Close()
		os.Exit(0)
	}
	for env, f := range map[string]func(string) error{"TENURE_SQLITE_HOLDER": holderMain, "TENURE_SQLITE_ACQUIRER": acquirerMain} {
		if path := os.Getenv(env); path != "" {
			if err := f(path); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	if os.Getenv("TENURE_SQLITE_CONTENDER") != "" {
		if err := contend(); err != nil {
			fmt.Fprintln(os.Stderr, "contender:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// monoNow reads CLOCK_MONOTONIC, which every process on the host shares.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// contend acquires the resource ROUNDS times, records each hold as
// "hold START END TOKEN" lines in LOG (START after the grant, END before the
// release, both on the shared monotonic clock and both inside the lease's
// trust window), and sometimes exits without releasing, as a crashed
// process would.
func contend() error {
	path, logPath := os.Getenv("DB"), os.Getenv("LOG")
	rounds, _ := strconv.Atoi(os.Getenv("ROUNDS"))
	crashAt, _ := strconv.Atoi(os.Getenv("CRASH_AT"))
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		return err
	}
	lk, err := tenure.New(s, tenure.WithRetry(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	for i := 0; i < rounds; i++ {
		l, err := lk.Acquire(ctx, "shared", 2*time.Second)
		if err != nil {
			return err
		}
		start := monoNow()
		time.Sleep(time.Millisecond) // the work
		end := monoNow()
		if err := l.Err(); err != nil {
			return fmt.Errorf("lease lost during the work: %w", err)
		}
		if _, err := fmt.Fprintf(logf, "hold %d %d %d %s\n", start, end, l.Token(), lk.Owner()); err != nil {
			return err
		}
		if i == crashAt-1 {
			os.Exit(3) // crash while holding: the lease expires by its TTL
		}
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

type hold struct {
	start, end int64
	token      uint64
	owner      string
}

// Real processes on one file: no two holds overlap, tokens strictly
// increase in grant order, also across a crashed holder.
func TestProcessesShareOneFile(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	db, logPath := filepath.Join(dir, "leases.db"), filepath.Join(dir, "holds.log")
	if s, err := sqlite.Open(context.Background(), sqlite.Config{Path: db}); err != nil {
		t.Fatal(err)
	} else {
		s.Close()
	}
	const procs, rounds = 4, 15
	var wg sync.WaitGroup
	errs := make([]error, procs)
	for p := 0; p < procs; p++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "TENURE_SQLITE_CONTENDER=1", "DB="+db, "LOG="+logPath,
			"ROUNDS="+strconv.Itoa(rounds), "CRASH_AT="+map[bool]string{true: "5", false: "0"}[p == 0])
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cmd.Wait()
			var exit *exec.ExitError
			if p == 0 && errors.As(err, &exit) && exit.ExitCode() == 3 {
				err = nil // the planned crash
			}
			if err != nil {
				errs[p] = fmt.Errorf("process %d: %v: %s", p, err, stderr.String())
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var holds []hold
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var h hold
		if _, err := fmt.Sscanf(sc.Text(), "hold %d %d %d %s", &h.start, &h.end, &h.token, &h.owner); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		holds = append(holds, h)
	}
	if want := (procs-1)*rounds + 5; len(holds) != want {
		t.Fatalf("%d holds recorded, want %d", len(holds), want)
	}
	sort.Slice(holds, func(i, j int) bool { return holds[i].start < holds[j].start })
	for i := 1; i < len(holds); i++ {
		a, b := holds[i-1], holds[i]
		if b.start < a.end {
			t.Fatalf("holds overlap: %+v and %+v", a, b)
		}
		if b.token <= a.token {
			t.Fatalf("token %d granted after %d", b.token, a.token)
		}
	}
}

// Tokens never go back across closing and reopening the file.
func TestTokensSurviveRestart(t *testing.T) {
	ctx := context.Background()
	s, path := open(t)
	owner, _ := naming.NewOwner("a")
	rec, err := s.Acquire(ctx, "r", owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "r", owner, rec.Token); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2 := reopen(t, sqlite.Config{Path: path})
	rec2, err := s2.Acquire(ctx, "r", owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if rec2.Token <= rec.Token {
		t.Fatalf("token %d after reopening, was %d", rec2.Token, rec.Token)
	}
}

// fakeHostClock is a host clock the test moves.
type fakeHostClock struct {
	epoch atomic.Value
	now   atomic.Int64
}

func newFakeHostClock() *fakeHostClock {
	c := &fakeHostClock{}
	c.epoch.Store("boot-1")
	c.now.Store(int64(time.Hour))
	return c
}

func (c *fakeHostClock) read() (string, time.Duration, error) {
	return c.epoch.Load().(string), time.Duration(c.now.Load()), nil
}

// C06 (a, b): wall clocks that jump or run ahead never decide expiry: the
// store counts on the host's boot clock. A reboot (a new boot id) expires
// every lease.
func TestCaseC06ClockJumps(t *testing.T) {
	ctx := context.Background()
	clock := newFakeHostClock()
	_, path := open(t)
	holder := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, clock.read, func() time.Time { return time.Now().Add(time.Hour) }))
	ahead := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, clock.read, func() time.Time { return time.Now().Add(3 * time.Minute) }))
	a, _ := naming.NewOwner("a")
	b, _ := naming.NewOwner("b")
	rec, err := holder.Acquire(ctx, "r", a, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ahead.Acquire(ctx, "r", b, 5*time.Second); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("contender whose wall clock is 3 minutes ahead: %v; want ErrHeld", err)
	}
	got, err := ahead.Get(ctx, "r")
	if err != nil || got.Owner != a || got.Remaining != 5*time.Second {
		t.Fatalf("contender sees %+v, %v; want A's lease with 5s left", got, err)
	}
	// The boot clock moves 4.999 s: still held; 5 s: expired.
	clock.now.Add(int64(4999 * time.Millisecond))
	if _, err := ahead.Acquire(ctx, "r", b, 5*time.Second); !errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("1 ms before expiry: %v; want ErrHeld", err)
	}
	clock.now.Add(int64(time.Millisecond))
	recB, err := ahead.Acquire(ctx, "r", b, 5*time.Second)
	if err != nil || recB.Token <= rec.Token {
		t.Fatalf("at expiry: %+v, %v; want granted with a larger token", recB, err)
	}
	// A reboot: the boot id changes and the boot clock restarts near zero.
	clock.epoch.Store("boot-2")
	clock.now.Store(int64(time.Second))
	if _, err := holder.Get(ctx, "r"); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("after a reboot: %v; want ErrNotHeld", err)
	}
	if err := ahead.Renew(ctx, "r", b, recB.Token, 5*time.Second); !errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("renewal of a lease from before the reboot: %v; want ErrLeaseLost", err)
	}
	recA, err := holder.Acquire(ctx, "r", a, 5*time.Second)
	if err != nil || recA.Token <= recB.Token {
		t.Fatalf("after a reboot: %+v, %v; want granted with a larger token", recA, err)
	}
}

// C06 (c): a writer that pauses after reading the clock holds the write
// lock, so nobody can be granted in between; the contender decides expiry on
// its own clock reading, inside its own transaction, after the writer
// committed.
func TestCaseC06cPauseInsideTransaction(t *testing.T) {
	ctx := context.Background()
	clock := newFakeHostClock()
	read, resume := make(chan struct{}), make(chan struct{})
	var pauseNext atomic.Bool
	pausing := func() (string, time.Duration, error) {
		e, now, err := clock.read()
		if pauseNext.CompareAndSwap(true, false) {
			close(read)
			<-resume
		}
		return e, now, err
	}
	_, path := open(t)
	a := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, pausing, nil))
	b := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path, BusyTimeout: 30 * time.Second}, clock.read, nil))
	ownerA, _ := naming.NewOwner("a")
	ownerB, _ := naming.NewOwner("b")
	pauseNext.Store(true)
	doneA := make(chan tenure.Record, 1)
	go func() {
		rec, err := a.Acquire(ctx, "r", ownerA, 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		doneA <- rec
	}()
	<-read // A read the clock and pauses inside its transaction
	doneB := make(chan error, 1)
	var recB tenure.Record
	go func() {
		var err error
		recB, err = b.Acquire(ctx, "r", ownerB, 5*time.Second)
		doneB <- err
	}()
	select {
	case err := <-doneB:
		t.Fatalf("B was answered (%v) while A's transaction was open", err)
	case <-time.After(50 * time.Millisecond):
	}
	clock.now.Add(int64(6 * time.Second)) // the pause lasts 6 s with a 5 s TTL
	close(resume)
	recA := <-doneA
	if err := <-doneB; err != nil {
		t.Fatalf("B after A's paused grant expired: %v", err)
	}
	if recB.Token <= recA.Token {
		t.Fatalf("B's token %d, A's %d", recB.Token, recA.Token)
	}
}

// A database locked by another process's open transaction makes calls fail
// within the busy timeout, never hang.
func TestLockedDatabaseFailsInBoundedTime(t *testing.T) {
	ctx := context.Background()
	_, path := open(t)
	s := reopen(t, sqlite.Config{Path: path, BusyTimeout: 200 * time.Millisecond})
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK")
	owner, _ := naming.NewOwner("a")
	start := time.Now()
	_, err = s.Acquire(ctx, "r", owner, time.Minute)
	if err == nil || errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("Acquire on a locked database: %v; want a plain error", err)
	}
	t.Logf("locked database: %v after %v", err, time.Since(start))
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "r", owner, time.Minute); err != nil {
		t.Fatalf("after the lock was released: %v", err)
	}
}

func TestOpenBadPath(t *testing.T) {
	for _, p := range []string{"", "/nonexistent-dir/x.db", "a?b.db"} {
		if s, err := sqlite.Open(context.Background(), sqlite.Config{Path: p}); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", p)
		}
	}
	dir := t.TempDir()
	if s, err := sqlite.Open(context.Background(), sqlite.Config{Path: dir}); err == nil {
		s.Close()
		t.Errorf("Open of a directory succeeded")
	}
}

// TestFairnessAcrossProcesses: a process that takes the resource again as
// soon as it released it (Do in a loop, 50 ms of work) does not starve a
// waiter in another process. SQLite sends no release notifications, so
// the waiter polls; its attempts reserve the resource (driver.Reserver),
// and the holder's next acquire is refused until the waiter was granted.
func TestFairnessAcrossProcesses(t *testing.T) {
	s, path := open(t)
	testserver.Fairness(t, s, path, 10, 20*time.Second)
}
