package postgres_test

// TLS and SCRAM password authentication against a real PostgreSQL that the
// test starts itself (initdb into a temporary directory), on a random
// loopback port (never the shared test server).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/postgres"
)

// pgBinDir returns the newest /usr/lib/postgresql/<version>/bin with a
// postgres binary (as scripts/postgres finds it; TENURE_PG_BINDIR
// overrides), or skips; it also skips unless TENURE_SERVER_FAULTS=1, the
// opt-in of the tests that start and kill servers.
func pgBinDir(t *testing.T) string {
	t.Helper()
	if os.Getenv("TENURE_SERVER_FAULTS") != "1" {
		t.Skip("set TENURE_SERVER_FAULTS=1 to run tests that start their own PostgreSQL on a random loopback port")
	}
	if d := os.Getenv("TENURE_PG_BINDIR"); d != "" {
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { // numeric version order
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi < vj
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i]
		}
	}
	t.Skip("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (Debian package postgresql)")
	return ""
}

// postgresUser returns the uid and gid of the postgres system user when the
// test runs as root (PostgreSQL refuses to run as root; scripts/postgres
// uses runuser), or -1, -1 when it need not switch.
func postgresUser(t *testing.T) (uid, gid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		return -1, -1
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Skipf("running as root and there is no postgres user to run PostgreSQL as: %v", err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

// command is exec.Command running as uid/gid unless uid is -1.
func command(uid, gid int, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	return cmd
}

// startTLSPostgres runs initdb (superuser user, SCRAM password pass) in a
// fresh directory, allows only TLS connections with a SCRAM password from
// 127.0.0.1 that present a client certificate signed by the test CA (pg_hba:
// hostssl ... scram-sha-256 clientcert=verify-ca), and starts postgres with
// a generated server certificate on a random port. It returns the port and
// the certificates once the server accepts logins.
func startTLSPostgres(t *testing.T, user, pass string) (port int, pki testserver.PKI) {
	t.Helper()
	bin := pgBinDir(t)
	uid, gid := postgresUser(t)
	// Not t.TempDir: its parent is closed to other users, and postgres runs
	// as its own user when the test is root.
	dir, err := os.MkdirTemp("", "tenure-pgtls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pki = testserver.NewPKI(t, dir)
	chown := func(paths ...string) {
		if uid < 0 {
			return
		}
		for _, f := range paths {
			if err := os.Chown(f, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	chown(dir, pwfile, pki.ServerCert, pki.ServerKey, pki.CA)
	data := filepath.Join(dir, "data")
	initdb := command(uid, gid, filepath.Join(bin, "initdb"), "-D", data, "-U", user, "-A", "scram-sha-256",
		"--pwfile", pwfile, "-E", "UTF8", "--locale=C", "-N")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	hba := "local all all scram-sha-256\nhostssl all all 127.0.0.1/32 scram-sha-256 clientcert=verify-ca\n"
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	chown(filepath.Join(data, "pg_hba.conf"))

	port = testserver.FreePort(t)
	cmd := command(uid, gid, filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(port),
		"-c", "unix_socket_directories="+dir,
		"-c", "ssl=on", "-c", "ssl_cert_file="+pki.ServerCert, "-c", "ssl_key_file="+pki.ServerKey,
		"-c", "ssl_ca_file="+pki.CA,
		"-c", "fsync=off", "-c", "log_min_messages=warning")
	logFile := filepath.Join(dir, "postgres.log")
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
		// SIGQUIT: immediate shutdown; the postmaster takes its backends
		// down with it (SIGKILL would leave them running).
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	output := func() string { b, _ := os.ReadFile(logFile); return string(b) }
	url := fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=verify-full&sslrootcert=%s&sslcert=%s&sslkey=%s&connect_timeout=2",
		user, pass, port, pki.CA, pki.ClientCert, pki.ClientKey)
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case werr := <-exited:
			exited <- werr
			t.Fatalf("postgres exited during start: %v\n%s", werr, output())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		s, err := postgres.OpenURL(ctx, url)
		cancel()
		if err == nil {
			s.Close()
			return port, pki
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres on port %d not accepting logins within 20 s: %v\n%s", port, err, output())
		}
		time.Sleep(50 * time.Millisecond) // poll interval, bounded by the deadline
	}
}

// openURL opens raw within 10 s (testserver.OpenBounded).
func openURL(t *testing.T, raw string) (*postgres.Store, error) {
	t.Helper()
	return testserver.OpenBounded(t, raw, postgres.OpenURL)
}

// TestTLSAndPasswordRealServer starts its own PostgreSQL that accepts only
// TLS connections with a client certificate and a SCRAM-SHA-256 password,
// and checks, through ParseURL/New (OpenURL) and a Locker, that
// postgres://user:pw@127.0.0.1:PORT/db?sslmode=verify-full&sslrootcert=CA&sslcert=..&sslkey=..
// works end to end (Init, a lease, a LISTEN/NOTIFY wake-up), and that a
// wrong password, the system roots instead of sslrootcert, another CA, no
// client certificate or one of another CA, and sslmode=disable all fail with
// an error within a bounded time.
func TestTLSAndPasswordRealServer(t *testing.T) {
	const user, pass = "tenure", "s3cret-pw"
	port, p := startTLSPostgres(t, user, pass)
	base := fmt.Sprintf("postgres://%s:%%s@127.0.0.1:%d/postgres?connect_timeout=3&", user, port)
	client := "&sslcert=" + p.ClientCert + "&sslkey=" + p.ClientKey
	good := fmt.Sprintf(base, pass) + "sslmode=verify-full&sslrootcert=" + p.CA + client

	t.Run("works", func(t *testing.T) {
		s, err := openURL(t, good)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		cfg, err := postgres.ParseURL(good)
		if err != nil {
			t.Fatal(err)
		}
		if err := postgres.Init(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		var ssl bool
		if err := s.Pool().QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
			t.Fatalf("pg_stat_ssl.ssl = %v, %v; want true", ssl, err)
		}
		lk := testserver.Locker(t, s)
		r := testserver.Resource(t)
		testserver.LeaseRoundTrip(ctx, t, lk, r)
		// The LISTEN connection (outside the pool) uses TLS and the
		// password too.
		s2, err := openURL(t, good)
		if err != nil {
			t.Fatal(err)
		}
		testserver.WakeOnce(t, s, s2, r)
	})

	t.Run("wrong password", func(t *testing.T) {
		_, err := openURL(t, fmt.Sprintf(base, "wrong")+"sslmode=verify-full&sslrootcert="+p.CA+client)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
			t.Fatalf("OpenURL with a wrong password: %v; want SQLSTATE 28P01 (invalid_password)", err)
		}
	})

	t.Run("system roots", func(t *testing.T) {
		_, err := openURL(t, fmt.Sprintf(base, pass)+"sslmode=verify-full"+client)
		var verr *tls.CertificateVerificationError
		var uerr x509.UnknownAuthorityError
		if !errors.As(err, &verr) || !errors.As(err, &uerr) {
			t.Fatalf("OpenURL with sslmode=verify-full and no sslrootcert: %v; want an unknown-authority certificate error", err)
		}
		t.Logf("system roots: %v", err)
	})

	t.Run("wrong CA", func(t *testing.T) {
		other := testserver.NewPKI(t, t.TempDir())
		_, err := openURL(t, fmt.Sprintf(base, pass)+"sslmode=verify-full&sslrootcert="+other.CA+client)
		var verr *tls.CertificateVerificationError
		if !errors.As(err, &verr) {
			t.Fatalf("OpenURL with another CA: %v; want a certificate verification error", err)
		}
	})

	t.Run("no client certificate", func(t *testing.T) {
		_, err := openURL(t, fmt.Sprintf(base, pass)+"sslmode=verify-full&sslrootcert="+p.CA)
		if err == nil {
			t.Fatal("OpenURL without sslcert/sslkey succeeded on a server that requires a client certificate")
		}
		t.Logf("no client certificate: %v", err)
	})

	t.Run("client certificate of another CA", func(t *testing.T) {
		other := testserver.NewPKI(t, t.TempDir())
		_, err := openURL(t, fmt.Sprintf(base, pass)+"sslmode=verify-full&sslrootcert="+p.CA+"&sslcert="+other.ClientCert+"&sslkey="+other.ClientKey)
		if err == nil {
			t.Fatal("OpenURL with a client certificate of another CA succeeded")
		}
		t.Logf("client certificate of another CA: %v", err)
	})

	t.Run("plaintext refused", func(t *testing.T) {
		_, err := openURL(t, fmt.Sprintf(base, pass)+"sslmode=disable")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "28000" {
			t.Fatalf("OpenURL with sslmode=disable: %v; want SQLSTATE 28000 (no pg_hba.conf entry)", err)
		}
	})
}
