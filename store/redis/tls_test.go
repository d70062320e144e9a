package redis_test

// TLS and password authentication against a real redis-server that the test
// starts itself, on a random loopback port (never the shared test server).

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

	"github.com/tenure-go/tenure/internal/testserver"
	tredis "github.com/tenure-go/tenure/store/redis"
)

// startTLSRedis starts redis-server with only a TLS port (server
// certificate from p; client certificates signed by p's CA required when
// clientAuth) and the default user disabled: the only user is user/pass. It
// returns host:port.
func startTLSRedis(t *testing.T, p testserver.PKI, dir, user, pass string, clientAuth bool) string {
	t.Helper()
	bin := testserver.OwnBinary(t, "/usr/bin/redis-server", "redis-server")
	port := testserver.FreePort(t)
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
	testserver.StartProcess(t, cmd, filepath.Join(dir, "redis.log"), addr)
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
	p := testserver.NewPKI(t, dir)
	const user, pass = "tenure", "s3cret-pw"
	addr := startTLSRedis(t, p, dir, user, pass, false)
	good := fmt.Sprintf("rediss://%s:%s@%s/0?ca=%s", user, pass, addr, p.CA)

	openURL := func(raw string) (*tredis.Store, error) {
		return testserver.OpenBounded(t, raw, tredis.OpenURL)
	}

	t.Run("works", func(t *testing.T) {
		s, err := openURL(good)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		lk := testserver.Locker(t, s)
		r := testserver.Resource(t)
		testserver.LeaseRoundTrip(ctx, t, lk, r)
		// The notification listener's own connection authenticates too.
		s2, err := openURL(good)
		if err != nil {
			t.Fatal(err)
		}
		testserver.WakeOnce(t, s, s2, r)
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
		other := testserver.NewPKI(t, t.TempDir())
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
	p := testserver.NewPKI(t, dir)
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
	lk := testserver.Locker(t, s)
	l, err := lk.TryAcquire(ctx, testserver.Resource(t), 10*time.Second)
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
	other := testserver.NewPKI(t, t.TempDir())
	if s, err := tredis.OpenURL(ctx, base+"&cert="+other.ClientCert+"&key="+other.ClientKey); err == nil {
		s.Close()
		t.Fatal("OpenURL with a client certificate of another CA succeeded")
	}
	if ctx.Err() != nil {
		t.Fatal("the checks took the whole 10 s context")
	}
}
