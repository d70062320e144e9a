package etcd_test

// TLS, client certificates and password authentication against a real etcd
// that the test starts itself, on random loopback ports (never the shared
// test server).

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-go/tenure/store/etcd"
)

// testPKI is a CA with a server certificate (127.0.0.1, ::1, localhost) and
// a client certificate signed by it, as PEM files in a directory.
type testPKI struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tenure test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p := testPKI{CA: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.CA, "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature,
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	p.ServerCert, p.ServerKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.ClientCert, p.ClientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func writePEM(t *testing.T, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ownServerBinary returns the path of a server binary the test may start
// itself, or skips: the test must be asked for (TENURE_SERVER_FAULTS=1, the
// opt-in of the tests that start and kill servers) and the binary present.
func ownServerBinary(t *testing.T, path string) string {
	t.Helper()
	if os.Getenv("TENURE_SERVER_FAULTS") != "1" {
		t.Skip("set TENURE_SERVER_FAULTS=1 to run tests that start their own " + filepath.Base(path) + " on a random loopback port")
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is not installed: %v", path, err)
	}
	return path
}

// startProcess starts cmd, kills it at the end of the test and waits (up to
// 15 s) until addr accepts TCP connections; it fails the test, with the
// process's output, if the process exits first or the port never opens.
func startProcess(t *testing.T, cmd *exec.Cmd, logFile, addr string) {
	t.Helper()
	log, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); log.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("%s (pid %d) did not exit after SIGKILL", cmd.Path, cmd.Process.Pid)
		}
	})
	output := func() string { b, _ := os.ReadFile(logFile); return string(b) }
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case werr := <-exited:
			exited <- werr
			t.Fatalf("%s exited before listening on %s: %v\n%s", cmd.Path, addr, werr, output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening on %s within 15 s: %v\n%s", cmd.Path, addr, err, output())
		}
	}
}

// startTLSEtcd starts a single-member etcd serving clients over TLS only
// (server certificate from p; with clientAuth, a client certificate signed
// by p's CA is required). It returns the client host:port once the member
// answers a read.
func startTLSEtcd(t *testing.T, p testPKI, dir string, clientAuth bool) string {
	t.Helper()
	bin := ownServerBinary(t, "/usr/bin/etcd")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	peer := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
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
	startProcess(t, exec.Command(bin, args...), filepath.Join(dir, "etcd.log"), addr)
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

// openURL opens raw within 10 s and fails the test if that took the whole
// 10 s (a hang instead of an error).
func openURL(t *testing.T, raw string) (*etcd.Store, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := etcd.OpenURL(ctx, raw)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	if ctx.Err() != nil {
		t.Fatalf("OpenURL(%s) took the whole 10 s context (err %v)", raw, err)
	}
	return s, err
}

// leaseRoundTrip takes, renews, reads and releases one lease through a
// Locker on s.
func leaseRoundTrip(t *testing.T, s *etcd.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	lk := locker(t, s)
	r := resource(t)
	l, err := lk.TryAcquire(ctx, r, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := lk.Get(ctx, r)
	if err != nil || rec.Owner != lk.Owner() || rec.Token != l.Token() {
		t.Fatalf("Get = %+v, %v; want owner %s token %d", rec, err, lk.Owner(), l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
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
	p := newTestPKI(t, dir)
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
		wakeOnce(t, s, s2, resource(t))
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
		other := newTestPKI(t, t.TempDir())
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
	p := newTestPKI(t, dir)
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
	other := newTestPKI(t, t.TempDir())
	_, err = openURL(t, fmt.Sprintf("etcd://%s:%s@%s?ca=%s&cert=%s&key=%s&dial_timeout=2s", user, pass, addr, p.CA, other.ClientCert, other.ClientKey))
	if err == nil || !strings.Contains(err.Error(), "remote error: tls: ") {
		t.Fatalf("OpenURL with a client certificate of another CA: %v; want the server's TLS alert", err)
	}
	t.Logf("client certificate of another CA: %v", err)
	if _, err := openURL(t, fmt.Sprintf("etcd://%s:wrong@%s?%s", user, addr, certs)); err == nil {
		t.Fatal("OpenURL with a client certificate and a wrong password succeeded")
	}
}
