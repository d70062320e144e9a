package redis_test

// TLS and password authentication against a real redis-server that the test
// starts itself, on a random loopback port (never the shared test server).

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

	tredis "github.com/tenure-go/tenure/store/redis"
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
		t.Skipf("%s is not installed (Debian package redis-server): %v", path, err)
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

// startTLSRedis starts redis-server with only a TLS port (server
// certificate from p; client certificates signed by p's CA required when
// clientAuth) and the default user disabled: the only user is user/pass. It
// returns host:port.
func startTLSRedis(t *testing.T, p testPKI, dir, user, pass string, clientAuth bool) string {
	t.Helper()
	bin := ownServerBinary(t, "/usr/bin/redis-server")
	port := freePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// Command-line options are config lines: each "--name" starts one.
	cmd := exec.Command(bin,
		"--bind", "127.0.0.1", "--port", "0", "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", p.ServerCert, "--tls-key-file", p.ServerKey,
		"--tls-ca-cert-file", p.CA, "--tls-auth-clients", map[bool]string{false: "no", true: "yes"}[clientAuth],
		"--dir", dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", "",
		"--user", "default", "off",
		"--user", user, "on", ">"+pass, "~*", "&*", "+@all",
	)
	startProcess(t, cmd, filepath.Join(dir, "redis.log"), addr)
	return addr
}

// TestTLSAndPasswordRealServer starts its own redis-server that accepts
// only TLS and only an ACL user with a password, and checks, through
// ParseURL/New (OpenURL) and a Locker, that a rediss:// URL with the user,
// password and ca= works end to end (including the pub/sub connection of
// the notifications), and that a wrong password, no password, the system
// roots instead of ca=, and plain redis:// all fail with an error within a
// bounded time.
func TestTLSAndPasswordRealServer(t *testing.T) {
	dir := t.TempDir()
	p := newTestPKI(t, dir)
	const user, pass = "tenure", "s3cret-pw"
	addr := startTLSRedis(t, p, dir, user, pass, false)
	good := fmt.Sprintf("rediss://%s:%s@%s/0?ca=%s", user, pass, addr, p.CA)

	openURL := func(raw string) (*tredis.Store, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := tredis.OpenURL(ctx, raw)
		if err == nil {
			t.Cleanup(func() { s.Close() })
		}
		if ctx.Err() != nil {
			t.Fatalf("OpenURL(%s) took the whole 10 s context (err %v)", raw, err)
		}
		return s, err
	}

	t.Run("works", func(t *testing.T) {
		s, err := openURL(good)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
		// The notification listener's own connection authenticates too.
		s2, err := openURL(good)
		if err != nil {
			t.Fatal(err)
		}
		wakeOnce(t, s, s2, r)
	})

	t.Run("wrong password", func(t *testing.T) {
		_, err := openURL(fmt.Sprintf("rediss://%s:wrong@%s/0?ca=%s", user, addr, p.CA))
		if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Fatalf("OpenURL with a wrong password: %v; want a WRONGPASS error", err)
		}
	})

	t.Run("no password", func(t *testing.T) {
		// The default user is off: no AUTH means no access.
		_, err := openURL(fmt.Sprintf("rediss://%s/0?ca=%s", addr, p.CA))
		if err == nil {
			t.Fatal("OpenURL without a user and password succeeded")
		}
		t.Logf("without credentials: %v", err)
	})

	t.Run("system roots", func(t *testing.T) {
		_, err := openURL(fmt.Sprintf("rediss://%s:%s@%s/0", user, pass, addr))
		var verr *tls.CertificateVerificationError
		if !errors.As(err, &verr) {
			t.Fatalf("OpenURL without ca= (system roots): %v; want a certificate verification error", err)
		}
		var uerr x509.UnknownAuthorityError
		if !errors.As(err, &uerr) {
			t.Fatalf("OpenURL without ca=: %v; want x509.UnknownAuthorityError", err)
		}
	})

	t.Run("wrong CA", func(t *testing.T) {
		other := newTestPKI(t, t.TempDir())
		_, err := openURL(fmt.Sprintf("rediss://%s:%s@%s/0?ca=%s", user, pass, addr, other.CA))
		var verr *tls.CertificateVerificationError
		if !errors.As(err, &verr) {
			t.Fatalf("OpenURL with another CA: %v; want a certificate verification error", err)
		}
	})

	t.Run("plaintext to TLS port", func(t *testing.T) {
		_, err := openURL(fmt.Sprintf("redis://%s:%s@%s/0", user, pass, addr))
		if err == nil {
			t.Fatal("a plaintext redis:// connection to the TLS-only port succeeded")
		}
		t.Logf("plaintext: %v", err)
	})

}

// TestMutualTLSRealServer starts its own redis-server that requires a client
// certificate signed by its CA, and checks that cert= and key= in the URL
// present one (a lease is acquired and released) and that without them the
// connection is refused with an error.
func TestMutualTLSRealServer(t *testing.T) {
	dir := t.TempDir()
	p := newTestPKI(t, dir)
	const user, pass = "tenure", "s3cret-pw"
	addr := startTLSRedis(t, p, dir, user, pass, true)
	base := fmt.Sprintf("rediss://%s:%s@%s/0?ca=%s", user, pass, addr, p.CA)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	s, err := tredis.OpenURL(ctx, base+"&cert="+p.ClientCert+"&key="+p.ClientKey)
	if err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	defer s.Close()
	lk := locker(t, s)
	l, err := lk.TryAcquire(ctx, resource(t), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	if s, err := tredis.OpenURL(ctx, base); err == nil {
		s.Close()
		t.Fatal("OpenURL without a client certificate succeeded on a server that requires one")
	} else {
		t.Logf("without a client certificate: %v", err)
	}
	other := newTestPKI(t, t.TempDir())
	if s, err := tredis.OpenURL(ctx, base+"&cert="+other.ClientCert+"&key="+other.ClientKey); err == nil {
		s.Close()
		t.Fatal("OpenURL with a client certificate of another CA succeeded")
	}
	if ctx.Err() != nil {
		t.Fatal("the checks took the whole 10 s context")
	}
}
