// Package testserver helps tests that start a server of their own (a
// redis-server, etcd or PostgreSQL with TLS and passwords) on a random
// loopback port, never the shared test servers: a throw-away PKI, a free
// port, the opt-in check, and starting the process until its port answers.
package testserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
)

// PKI is a CA with a server certificate (127.0.0.1, ::1, localhost) and
// a client certificate signed by it, as PEM files in a directory.
type PKI struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// NewPKI writes a new PKI into dir.
func NewPKI(t testing.TB, dir string) PKI {
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
	p := PKI{CA: filepath.Join(dir, "ca.pem")}
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

func writePEM(t testing.TB, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// OwnBinary returns the path of a server binary the test may start
// itself, or skips: the test must be asked for (TENURE_SERVER_FAULTS=1, the
// opt-in of the tests that start and kill servers) and the binary present.
func OwnBinary(t testing.TB, path, debianPackage string) string {
	t.Helper()
	if os.Getenv("TENURE_SERVER_FAULTS") != "1" {
		t.Skip("set TENURE_SERVER_FAULTS=1 to run tests that start their own " + filepath.Base(path) + " on a random loopback port")
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is not installed (Debian package %s): %v", path, debianPackage, err)
	}
	return path
}

// StartProcess starts cmd, kills it at the end of the test and waits (up to
// 15 s) until addr accepts TCP connections; it fails the test, with the
// process's output, if the process exits first or the port never opens.
func StartProcess(t testing.TB, cmd *exec.Cmd, logFile, addr string) {
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

// LeaseRoundTrip takes resource r through lk with a 10 s TTL, renews it,
// reads it back (owner and token must match) and releases it, failing the
// test at the first step that goes wrong.
func LeaseRoundTrip(ctx context.Context, t testing.TB, lk *tenure.Locker, r string) {
	t.Helper()
	l, err := lk.TryAcquire(ctx, r, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := lk.Get(ctx, r)
	if err != nil || rec.Owner != l.Owner() || rec.Token != l.Token() {
		t.Fatalf("Get = %+v, %v; want owner %s token %d", rec, err, l.Owner(), l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// OpenBounded opens a store from raw with open, within 10 s, and fails the
// test if that took the whole 10 s: a wrong password or certificate must
// give an error, not a hang. A store that opened is closed at the end of
// the test.
func OpenBounded[S interface{ Close() error }](t testing.TB, raw string, open func(context.Context, string) (S, error)) (S, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := open(ctx, raw)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	if ctx.Err() != nil {
		t.Fatalf("opening %s took the whole 10 s context (err %v)", raw, err)
	}
	return s, err
}
