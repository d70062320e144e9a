package etcd_test

// TLS, client certificates and password authentication against a real etcd
// that the test starts itself, on random loopback ports (never the shared
// test server).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
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

// startTLSEtcd starts a single-member etcd serving clients over TLS only
// (server certificate from p; with clientAuth, a client certificate signed
// by p's CA is required). It returns the client host:port once the member
// answers a read.
func startTLSEtcd(t *testing.T, p testserver.PKI, dir string, clientAuth bool) string {
	t.Helper()
	bin := etcdBinary(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testserver.FreePort(t)))
	peer := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(testserver.FreePort(t)))
	args := []string{
		"--name", "default", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "https://" + addr, "--advertise-client-urls", "https://" + addr,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default=" + peer, "--initial-cluster-state", "new",
		"--cert-file", p.ServerCert, "--key-file", p.ServerKey,
		"--logger", "zap", "--log-outputs", "stderr",
	}
	if clientAuth {
		args = append(args, "--trusted-ca-file", p.CA, "--client-cert-auth")
	}
	testserver.StartProcess(t, exec.Command(bin, args...), filepath.Join(dir, "etcd.log"), addr)
	return addr
}

// openWait opens raw, retrying (bounded by 20 s) while the freshly started
// member has no leader yet.
func openWait(t *testing.T, raw string) *etcd.Store {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := etcd.OpenURL(ctx, raw+"&dial_timeout=2s")
		cancel()
		if err == nil {
			t.Cleanup(func() { s.Close() })
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd at %s not answering within 20 s: %v", raw, err)
		}
	}
}

// enableAuth creates root (password rootPW) and user (password pw, read and
// write on the store's default key prefix only) and turns authentication on.
func enableAuth(t *testing.T, cli *clientv3.Client, rootPW, user, pw string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := etcd.DefaultPrefix
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", rootPW); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "tenure"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "tenure", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, user, pw); return err },
		func() error { _, err := cli.UserGrantRole(ctx, user, "tenure"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, f := range steps {
		if err := f(); err != nil {
			t.Fatalf("enabling auth, step %d: %v", i, err)
		}
	}
}

// openURL opens raw within 10 s (testserver.OpenBounded).
func openURL(t *testing.T, raw string) (*etcd.Store, error) {
	t.Helper()
	return testserver.OpenBounded(t, raw, etcd.OpenURL)
}

// leaseRoundTrip takes, renews, reads and releases one lease through a
// Locker on s.
func leaseRoundTrip(t *testing.T, s *etcd.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	lk := testserver.Locker(t, s)
	r := testserver.Resource(t)
	testserver.LeaseRoundTrip(ctx, t, lk, r)
}

// TestTLSAndPasswordRealServer starts its own etcd that serves clients over
// TLS only, with authentication on and a user whose role may read and write
// only the store's key prefix, and checks, through ParseURL/New (OpenURL)
// and a Locker, that etcd://user:pw@host:port?ca= works end to end
// (including a watch wake-up), and that a wrong password, no password, the
// system roots instead of ca= and another CA fail with an error within a
// bounded time.
func TestTLSAndPasswordRealServer(t *testing.T) {
	dir := t.TempDir()
	p := testserver.NewPKI(t, dir)
	addr := startTLSEtcd(t, p, dir, false)
	admin := openWait(t, fmt.Sprintf("etcd://%s?ca=%s", addr, p.CA))
	const user, pass = "tenure", "s3cret-pw"
	enableAuth(t, admin.Client(), "root-pw", user, pass)
	good := fmt.Sprintf("etcd://%s:%s@%s?ca=%s", user, pass, addr, p.CA)

	t.Run("works", func(t *testing.T) {
		s, err := openURL(t, good)
		if err != nil {
			t.Fatal(err)
		}
		leaseRoundTrip(t, s)
		s2, err := openURL(t, good)
		if err != nil {
			t.Fatal(err)
		}
		testserver.WakeOnce(t, s, s2, testserver.Resource(t))
	})

	t.Run("username and password options", func(t *testing.T) {
		s, err := openURL(t, fmt.Sprintf("etcd://%s?ca=%s&username=%s&password=%s", addr, p.CA, user, pass))
		if err != nil {
			t.Fatal(err)
		}
		leaseRoundTrip(t, s)
	})

	t.Run("wrong password", func(t *testing.T) {
		_, err := openURL(t, fmt.Sprintf("etcd://%s:wrong@%s?ca=%s", user, addr, p.CA))
		if err == nil || !strings.Contains(err.Error(), "authentication failed") {
			t.Fatalf("OpenURL with a wrong password: %v; want authentication failed", err)
		}
	})

	t.Run("no password", func(t *testing.T) {
		_, err := openURL(t, fmt.Sprintf("etcd://%s?ca=%s", addr, p.CA))
		if err == nil {
			t.Fatal("OpenURL without a user and password succeeded on an etcd with auth on")
		}
		t.Logf("without credentials: %v", err)
	})

	t.Run("outside the role's prefix", func(t *testing.T) {
		_, err := openURL(t, good+"&prefix=/elsewhere/")
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("OpenURL with a prefix the user may not read: %v; want permission denied", err)
		}
	})

	t.Run("system roots", func(t *testing.T) {
		_, err := openURL(t, fmt.Sprintf("etcd://%s:%s@%s?tls=true&dial_timeout=2s", user, pass, addr))
		var verr *tls.CertificateVerificationError
		var uerr x509.UnknownAuthorityError
		if !errors.As(err, &verr) || !errors.As(err, &uerr) {
			t.Fatalf("OpenURL with the system roots: %v; want a certificate verification error (unknown authority)", err)
		}
		t.Logf("system roots: %v", err)
	})

	t.Run("wrong CA", func(t *testing.T) {
		other := testserver.NewPKI(t, t.TempDir())
		_, err := openURL(t, fmt.Sprintf("etcd://%s:%s@%s?ca=%s&dial_timeout=2s", user, pass, addr, other.CA))
		var verr *tls.CertificateVerificationError
		if !errors.As(err, &verr) {
			t.Fatalf("OpenURL with another CA: %v; want a certificate verification error", err)
		}
	})
}

// TestMutualTLSRealServer starts its own etcd that requires a client
// certificate signed by its CA (--client-cert-auth), with authentication on,
// and checks that cert= and key= with the user's password work, and that no
// client certificate or one from another CA fails with an error.
func TestMutualTLSRealServer(t *testing.T) {
	dir := t.TempDir()
	p := testserver.NewPKI(t, dir)
	addr := startTLSEtcd(t, p, dir, true)
	certs := fmt.Sprintf("ca=%s&cert=%s&key=%s", p.CA, p.ClientCert, p.ClientKey)
	admin := openWait(t, fmt.Sprintf("etcd://%s?%s", addr, certs))
	const user, pass = "tenure", "s3cret-pw"
	enableAuth(t, admin.Client(), "root-pw", user, pass)

	s, err := openURL(t, fmt.Sprintf("etcd://%s:%s@%s?%s", user, pass, addr, certs))
	if err != nil {
		t.Fatalf("with a client certificate and password: %v", err)
	}
	leaseRoundTrip(t, s)

	_, err = openURL(t, fmt.Sprintf("etcd://%s:%s@%s?ca=%s&dial_timeout=2s", user, pass, addr, p.CA))
	if err == nil || !strings.Contains(err.Error(), "remote error: tls: ") {
		t.Fatalf("OpenURL without a client certificate: %v; want the server's TLS alert", err)
	}
	t.Logf("without a client certificate: %v", err)
	other := testserver.NewPKI(t, t.TempDir())
	_, err = openURL(t, fmt.Sprintf("etcd://%s:%s@%s?ca=%s&cert=%s&key=%s&dial_timeout=2s", user, pass, addr, p.CA, other.ClientCert, other.ClientKey))
	if err == nil || !strings.Contains(err.Error(), "remote error: tls: ") {
		t.Fatalf("OpenURL with a client certificate of another CA: %v; want the server's TLS alert", err)
	}
	t.Logf("client certificate of another CA: %v", err)
	if _, err := openURL(t, fmt.Sprintf("etcd://%s:wrong@%s?%s", user, addr, certs)); err == nil {
		t.Fatal("OpenURL with a client certificate and a wrong password succeeded")
	}
}
