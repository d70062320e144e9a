package etcd_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/etcd"
)

// etcdBinary returns the etcd server that scripts/etcd runs (TENURE_ETCD_BIN,
// which `scripts/etcd env` prints), for tests that start an etcd of their
// own.
func etcdBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("TENURE_ETCD_BIN")
	if bin == "" {
		t.Skip("set TENURE_ETCD_BIN (eval \"$(scripts/etcd env)\") to run tests that start their own etcd")
	}
	return testserver.OwnBinary(t, bin, "etcd-server")
}

// startPlainEtcd starts a single-member etcd from bin on a free loopback
// port and returns its client address.
func startPlainEtcd(t *testing.T, bin string) string {
	t.Helper()
	dir := t.TempDir()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testserver.FreePort(t)))
	peer := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(testserver.FreePort(t)))
	cmd := exec.Command(bin,
		"--name", "default", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "http://"+addr, "--advertise-client-urls", "http://"+addr,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default="+peer, "--initial-cluster-state", "new",
		"--logger", "zap", "--log-outputs", "stderr")
	testserver.StartProcess(t, cmd, filepath.Join(dir, "etcd.log"), addr)
	return addr
}

// TestOpenRefusesUnsafeServer: Debian's etcd 3.4.23, a real server with
// known lease-safety bugs (etcd-io/etcd#15247, #20547), is refused by Open
// with ErrUnsafeServer, naming the member and its version, and writes
// nothing; allow_unsafe_server=true opens it. The etcd that scripts/etcd
// builds (3.6.16) opens without the option.
func TestOpenRefusesUnsafeServer(t *testing.T) {
	old := testserver.OwnBinary(t, "/usr/bin/etcd", "etcd-server")
	out, err := exec.Command(old, "--version").Output()
	if err != nil || !strings.Contains(string(out), "Version: 3.4.") {
		t.Skipf("/usr/bin/etcd is not an etcd 3.4 (%q, %v)", out, err)
	}
	addr := startPlainEtcd(t, old)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s, err := etcd.OpenURL(ctx, "etcd://"+addr)
	if err == nil {
		s.Close()
		t.Fatal("Open accepted etcd 3.4")
	}
	if !errors.Is(err, etcd.ErrUnsafeServer) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), `"3.4.`) {
		t.Fatalf("Open: %v; want ErrUnsafeServer naming %s and its version", err, addr)
	}
	s, err = etcd.OpenURL(ctx, "etcd://"+addr+"?allow_unsafe_server=true")
	if err != nil {
		t.Fatalf("Open with allow_unsafe_server=true: %v", err)
	}
	resp, err := s.Client().Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	s.Close()
	if err != nil || resp.Count != 0 {
		t.Fatalf("the refused Open wrote keys (count %d, %v)", resp.Count, err)
	}

	if bin := os.Getenv("TENURE_ETCD_BIN"); bin != "" {
		addr := startPlainEtcd(t, testserver.OwnBinary(t, bin, "etcd-server"))
		s, err := etcd.OpenURL(ctx, "etcd://"+addr)
		if err != nil {
			t.Fatalf("Open on %s (scripts/etcd's server): %v", bin, err)
		}
		s.Close()
	}
}
