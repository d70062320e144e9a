package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/store/sqlite"
)

// removeStore removes the database file and its -wal and -shm files, as
// "rm leases.db*" does.
func removeStore(t *testing.T, path string) {
	t.Helper()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

// replaceStore puts a new, empty tenure file at path in one rename, and
// removes the old file's -wal and -shm files (which SQLite would otherwise
// read as the new file's).
func replaceStore(t *testing.T, path string) {
	t.Helper()
	fresh := path + ".new"
	if err := sqlite.Init(context.Background(), sqlite.Config{Path: fresh}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fresh, path); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

// A store whose file is deleted or replaced finds out at its next write or
// read: renewals and releases are lost (ErrLeaseLost and ErrFileReplaced),
// acquires, Get and List fail with ErrFileReplaced, and so does everything
// after. A store opened afterwards uses the new file, with tokens above
// every token granted in the old one.
func TestFileReplacedUnderHolder(t *testing.T) {
	for _, how := range []string{"deleted", "replaced"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			s, path := open(t)
			a, _ := naming.NewOwner("a")
			b, _ := naming.NewOwner("b")
			rec, err := s.Acquire(ctx, "r", a, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			other, err := s.Acquire(ctx, "other", a, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if how == "deleted" {
				removeStore(t, path)
			} else {
				replaceStore(t, path)
			}
			says := "was " + how
			lost := func(name string, err error) {
				t.Helper()
				if !errors.Is(err, tenure.ErrLeaseLost) || !errors.Is(err, sqlite.ErrFileReplaced) || !strings.Contains(err.Error(), says) {
					t.Errorf("%s after the file %s: %v; want ErrLeaseLost and ErrFileReplaced saying %q", name, how, err, says)
				}
			}
			lost("Renew", s.Renew(ctx, "r", a, rec.Token, time.Minute))
			lost("RenewBatch", s.RenewBatch(ctx, []driver.Renewal{{Resource: "other", Owner: a, Token: other.Token, TTL: time.Minute}})[0])
			lost("Release", s.Release(ctx, "other", a, other.Token))
			if _, err := s.Acquire(ctx, "third", b, time.Minute); !errors.Is(err, sqlite.ErrFileReplaced) || errors.Is(err, tenure.ErrLeaseLost) {
				t.Errorf("Acquire after the file %s: %v; want ErrFileReplaced", how, err)
			}
			if _, err := s.Get(ctx, "r"); !errors.Is(err, sqlite.ErrFileReplaced) {
				t.Errorf("Get after the file %s: %v; want ErrFileReplaced", how, err)
			}
			if _, err := s.List(ctx, ""); !errors.Is(err, sqlite.ErrFileReplaced) {
				t.Errorf("List after the file %s: %v; want ErrFileReplaced", how, err)
			}
			// A store opened now works on the new file.
			s2 := reopen(t, sqlite.Config{Path: path})
			rb, err := s2.Acquire(ctx, "r", b, time.Minute)
			if err != nil || rb.Token <= other.Token {
				t.Fatalf("Acquire on the new file: %+v, %v; want a token above %d", rb, err, other.Token)
			}
		})
	}
}

// A database file deleted without its write-ahead log is not silently
// replaced: SQLite would read the old log as the new file's.
func TestOpenRefusesLeftoverLog(t *testing.T) {
	ctx := context.Background()
	s, path := open(t)
	a, _ := naming.NewOwner("a")
	if _, err := s.Acquire(ctx, "r", a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s2, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err == nil {
		s2.Close()
		t.Fatal("Open succeeded on a deleted database whose -wal is still there")
	}
	if !strings.Contains(err.Error(), path+"-wal") || !strings.Contains(err.Error(), "remove") {
		t.Fatalf("Open: %v; want an error naming the -wal file and saying what to do", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open created %s: %v", path, err)
	}
}

// holderMain is the holding process of TestProcessesFileReplaced: it takes
// "r" with a Locker (TTL 1 s, renewed every 333 ms), prints "token N",
// waits for the lease to be lost, then prints what it was told and what a
// new acquire through the same store says.
func holderMain(path string) error {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		return err
	}
	lk, err := tenure.New(s)
	if err != nil {
		return err
	}
	l, err := lk.Acquire(ctx, "r", time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("token %d\n", l.Token())
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		return errors.New("the lease was not lost within 30 s")
	}
	err = l.Err()
	fmt.Printf("lost lease-lost=%v file-replaced=%v: %v\n", errors.Is(err, tenure.ErrLeaseLost), errors.Is(err, sqlite.ErrFileReplaced), err)
	_, err = lk.TryAcquire(ctx, "again", time.Second)
	fmt.Printf("acquire file-replaced=%v: %v\n", errors.Is(err, sqlite.ErrFileReplaced), err)
	return nil
}

// acquirerMain is the third process: it opens the store and takes "r",
// printing "token N" or the error.
func acquirerMain(path string) error {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		fmt.Printf("open: %v\n", err)
		return nil
	}
	defer s.Close()
	owner, _ := naming.NewOwner("third")
	rec, err := s.Acquire(ctx, "r", owner, time.Minute)
	if err != nil {
		fmt.Printf("acquire: %v\n", err)
		return nil
	}
	fmt.Printf("token %d\n", rec.Token)
	return nil
}

// Real processes: one holds a lease, the test deletes or replaces the file
// under it, a third process opens the store and acquires the resource. The
// third is granted in the new file with a token above the holder's, and the
// holder loses its lease at its next renewal, told that the file was
// replaced; its store refuses new grants. When only the database file is
// deleted, its -wal left behind, the third process is refused instead.
func TestProcessesFileReplaced(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, how := range []string{"deleted", "replaced", "deleted-without-log"} {
		t.Run(how, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "leases.db")
			if err := sqlite.Init(context.Background(), sqlite.Config{Path: path}); err != nil {
				t.Fatal(err)
			}
			holder := exec.Command(os.Args[0], "-test.run=^$")
			holder.Env = append(os.Environ(), "TENURE_SQLITE_HOLDER="+path)
			out, err := holder.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			holder.Stderr = &stderr
			if err := holder.Start(); err != nil {
				t.Fatal(err)
			}
			defer holder.Process.Kill()
			lines := bufio.NewScanner(out)
			next := func() string {
				t.Helper()
				if !lines.Scan() {
					holder.Wait()
					t.Fatalf("holder ended: %s", stderr.String())
				}
				return lines.Text()
			}
			holderToken, err := strconv.ParseUint(strings.TrimPrefix(next(), "token "), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			switch how {
			case "deleted":
				removeStore(t, path)
			case "replaced":
				replaceStore(t, path)
			case "deleted-without-log":
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			}
			replacedAt := time.Now()
			third := exec.Command(os.Args[0], "-test.run=^$")
			third.Env = append(os.Environ(), "TENURE_SQLITE_ACQUIRER="+path)
			got, err := third.CombinedOutput()
			if err != nil {
				t.Fatalf("third process: %v\n%s", err, got)
			}
			third3 := strings.TrimSpace(string(got))
			if how == "deleted-without-log" {
				if !strings.HasPrefix(third3, "open: ") || !strings.Contains(third3, "-wal") {
					t.Fatalf("third process on a database deleted without its log: %s; want Open refused", third3)
				}
			} else {
				tok, err := strconv.ParseUint(strings.TrimPrefix(third3, "token "), 10, 64)
				if err != nil {
					t.Fatalf("third process: %s", third3)
				}
				if tok <= holderToken {
					t.Fatalf("third process got token %d after the holder's %d", tok, holderToken)
				}
			}
			lost := next()
			t.Logf("holder lost its lease %v after the file was %s: %s", time.Since(replacedAt).Round(time.Millisecond), how, lost)
			if !strings.HasPrefix(lost, "lost lease-lost=true file-replaced=true") {
				t.Fatalf("holder: %s; want its lease lost with ErrLeaseLost and ErrFileReplaced", lost)
			}
			if again := next(); !strings.HasPrefix(again, "acquire file-replaced=true") {
				t.Fatalf("holder's next acquire: %s; want ErrFileReplaced", again)
			}
			if err := holder.Wait(); err != nil {
				t.Fatalf("holder: %v\n%s", err, stderr.String())
			}
		})
	}
}

// A file on a network file system is refused, in both modes: the locks do
// not hold there and the expiry clock is per host.
func TestOpenRefusesNetworkFS(t *testing.T) {
	_, path := open(t)
	defer sqlite.SetNetworkFS("NFS")()
	for _, mustExist := range []bool{false, true} {
		s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, MustExist: mustExist})
		if err == nil {
			s.Close()
			t.Fatalf("Open (MustExist %v) on NFS succeeded", mustExist)
		}
		if !strings.Contains(err.Error(), "network file system (NFS)") || !strings.Contains(err.Error(), "local file system") {
			t.Fatalf("Open (MustExist %v) on NFS: %v; want a sentence naming NFS and what to do", mustExist, err)
		}
	}
}

// A Locker waiting for a resource when its store's file is replaced stops
// waiting with ErrFileReplaced (and tenure.ErrStoreUnusable): the store can
// never grant it again until it is opened again. It used to retry until its
// context ended.
func TestAcquireWaitEndsWhenFileReplaced(t *testing.T) {
	for _, how := range []string{"deleted", "replaced"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			s, path := open(t)
			holder, err := tenure.New(s)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close(ctx)
			if _, err := holder.TryAcquire(ctx, "r", time.Minute); err != nil {
				t.Fatal(err)
			}
			ws := reopen(t, sqlite.Config{Path: path})
			waiter, err := tenure.New(ws, tenure.WithRetry(time.Millisecond, 5*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer waiter.Close(ctx)
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			waiting := make(chan struct{}, 1)
			done := make(chan error, 1)
			go func() {
				_, err := waiter.Acquire(wctx, "r", time.Minute, tenure.OnWait(func(*tenure.HeldError, time.Duration) {
					select {
					case waiting <- struct{}{}:
					default:
					}
				}))
				done <- err
			}()
			<-waiting
			if how == "deleted" {
				removeStore(t, path)
			} else {
				replaceStore(t, path)
			}
			err = <-done
			if !errors.Is(err, sqlite.ErrFileReplaced) || !errors.Is(err, tenure.ErrStoreUnusable) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire waiting when the file was %s: %v; want ErrFileReplaced and ErrStoreUnusable before its context ends", how, err)
			}
		})
	}
}
