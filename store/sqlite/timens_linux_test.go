//go:build linux

package sqlite_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/store/sqlite"
)

// inTimeNamespace runs the test binary as acquirerMain on path in a new
// time namespace whose CLOCK_BOOTTIME is offset by offset (unshare --time,
// as CRIU and podman's restore do), and returns what it printed. It skips
// when the machine cannot make one (no unshare, no privilege, an old
// kernel).
func inTimeNamespace(t *testing.T, path, offset string) string {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1) to make a time namespace")
	}
	if err := exec.Command(unshare, "--time", "--boottime", "1", "true").Run(); err != nil {
		t.Skipf("cannot make a time namespace here (unshare --time: %v)", err)
	}
	cmd := exec.Command(unshare, "--time", "--boottime", offset, os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "TENURE_SQLITE_ACQUIRER="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the process in a time namespace: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// Processes whose CLOCK_BOOTTIME differs by a time namespace's offset
// exclude each other: each counts on the host's clock. A process whose
// clock is 2 s ahead holds; one outside is refused (it took the row for a
// grant in the future, so free). A process outside holds; one whose clock
// is two hours ahead is refused (it took the row for expired).
func TestTimeNamespacesExcludeEachOther(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	ctx := context.Background()
	t.Run("namespace holds", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "leases.db")
		s := reopen(t, sqlite.Config{Path: path})
		out := inTimeNamespace(t, path, "2")
		if !strings.HasPrefix(out, "token ") {
			t.Fatalf("the process in the namespace: %q; want a grant", out)
		}
		owner, _ := naming.NewOwner("host")
		_, err := s.Acquire(ctx, "r", owner+".1", time.Minute)
		var held *driver.HeldError
		if !errors.As(err, &held) {
			t.Fatalf("acquire outside while the namespaced process's lease is live: %v; want held", err)
		}
		if held.Holder.Remaining < 50*time.Second || held.Holder.Remaining > time.Minute {
			t.Fatalf("the holder's remaining time %v; want about a minute, on one clock", held.Holder.Remaining)
		}
	})
	t.Run("host holds", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "leases.db")
		s := reopen(t, sqlite.Config{Path: path})
		owner, _ := naming.NewOwner("host")
		if _, err := s.Acquire(ctx, "r", owner+".1", time.Minute); err != nil {
			t.Fatal(err)
		}
		if out := inTimeNamespace(t, path, "7200"); !strings.Contains(out, "held") {
			t.Fatalf("the process two hours ahead: %q; want the lease held", out)
		}
	})
}
