package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store"
	"github.com/tenure-go/tenure/store/cassandra"
	"github.com/tenure-go/tenure/store/etcd"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/mysql"
	"github.com/tenure-go/tenure/store/postgres"
	"github.com/tenure-go/tenure/store/redis"
	"github.com/tenure-go/tenure/store/sqlite"
)

// urlCase is a store URL and what Parse says of it: "" for a URL that
// parses, else a part of the error. $CA, $CERT and $KEY stand for PEM files
// that exist.
type urlCase struct{ raw, want string }

// urlCases are the URLs of every scheme: valid forms, each parameter's bad
// values, an unknown parameter, a parameter given twice, TLS that the URL
// both turns off and asks for, and an incomplete client certificate.
var urlCases = map[string][]urlCase{
	"sqlite": {
		{"sqlite:x.db", ""},
		{"sqlite:x.db?busy_timeout=250ms", ""},
		{"sqlite:x.db?busy_timeout=soon", `busy_timeout="soon": want a positive duration`},
		{"sqlite:x.db?busy_timeout=0s", `busy_timeout="0s": want a positive duration`},
		{"sqlite:x.db?journal=off", `unknown parameter "journal" (known: busy_timeout)`},
		{"sqlite:x.db?busy_timeout=1s&busy_timeout=2s", `parameter "busy_timeout" given 2 times`},
	},
	"memory": {
		{"memory:", ""},
		{"memory:?bogus=1", "want memory:"},
	},
	"postgres": {
		{"postgres://u:pw@h:5432/db?sslmode=disable&application_name=a&connect_timeout=3", ""},
		{"postgresql://h1,h2:5433/db?pool_max_conns=3&ssl=true", ""},
		{"postgres://u@[::1]:5432/db?sslmode=verify-full&sslrootcert=$CA&sslcert=$CERT&sslkey=$KEY", ""},
		{"postgres://h/db?sslmode=sometimes", "sslmode"},
		{"postgres://h/db?ssl=false", `ssl="false": want true`},
		{"postgres://h/db?connect_timeout=x", "connect_timeout"},
		{"postgres://h/db?pool_max_conns=x", "pool_max_conns"},
		{"postgres://h:0/db", `port "0"`},
		{"postgres://h1:5432,h2:99999/db", `port "99999"`},
		{"postgres://h/db#frag", "fragment"},
		{"postgres://h/db?search_path=x", `unknown parameter "search_path" (known: host, port,`},
		{"postgres://h/db?sslmode=disable&sslmode=require", `parameter "sslmode" given 2 times`},
		{"postgres://h/db?sslmode=disable&sslrootcert=$CA", "ca, cert and key need TLS, but sslmode=disable turns it off"},
		{"postgres:/h/db", "want postgres://"},
	},
	"mysql": {
		{"mysql://u:pw@h:3306/db?table=t&poll_interval=off&max_conns=3&timeout=1s&tls=skip-verify", ""},
		{"mariadb://[::1]/db?wsrep_sync_wait=1&ca=$CA&cert=$CERT&key=$KEY", ""},
		{"mysql://h/db?tls=true", ""},
		{"mysql://h/db?table=bad-name", `table="bad-name": want letters`},
		{"mysql://h/db?poll_interval=x", `poll_interval="x": want a positive duration such as 50ms, or off`},
		{"mysql://h/db?max_conns=0", `max_conns="0": want a whole number from 1 to 10000`},
		{"mysql://h/db?max_conns=x", `max_conns="x"`},
		{"mysql://h/db?wsrep_sync_wait=x", `wsrep_sync_wait="x": want a number`},
		{"mysql://h/db?timeout=x", `timeout="x"`},
		{"mysql://h/db?readTimeout=x", `readTimeout="x"`},
		{"mysql://h/db?tls=bogus", `tls="bogus"`},
		{"mysql://h/db?charset=latin1", "charset: the store sets it"},
		{"mysql://h/db?collation=utf8mb4_bin", "collation: the store sets it"},
		{"mysql://h/db?autocommit=0", `unknown parameter "autocommit"`},
		{"mysql://h/db?sql_select_limit=1", `unknown parameter "sql_select_limit"`},
		{"mysql://h/db?bogus=1", `unknown parameter "bogus" (known: table,`},
		{"mysql://h/db?table=a&table=b", `parameter "table" given 2 times`},
		{"mysql://h/db?tls=false&ca=$CA", "ca, cert and key need TLS, but tls=false turns it off"},
		{"mysql://h/db?cert=$CERT", "needs both a certificate file and a key file"},
		{"mysql://h/db?ca=", `ca="": empty file name`},
		{"mysql://h1,h2/db", "one host only"},
		{"mysql://h", "name one database"},
		{"mysql://h:0/db", `port "0"`},
	},
	"etcd": {
		{"etcd://h1:2379,h2:2379/?prefix=/p/&dial_timeout=2s&tls=false&allow_unsafe_server=1", ""},
		{"etcd://u:p@[::1]:2379?tls=true", ""},
		{"etcd://h:2379?ca=$CA&cert=$CERT&key=$KEY", ""},
		{"etcd://h:2379?dial_timeout=-1s", `dial_timeout="-1s": want a positive duration`},
		{"etcd://h:2379?tls=maybe", `tls="maybe": want true or false`},
		{"etcd://h:2379?allow_unsafe_server=maybe", `allow_unsafe_server="maybe": want true or false`},
		{"etcd://h:2379?bogus=1", `unknown parameter "bogus" (known: username, password,`},
		{"etcd://h:2379?prefix=a&prefix=b", `parameter "prefix" given 2 times`},
		{"etcd://h:2379?tls=false&ca=$CA", "ca, cert and key need TLS, but tls=false turns it off"},
		{"etcd://h:2379?key=$KEY", "needs both a certificate file and a key file"},
		{"etcd://h:2379?ca=/nonexistent/ca.pem", "CA file"},
		{"etcd://h", `host "h": want host:port`},
		{"etcd://h:2379/path", "unexpected path"},
	},
	"redis": {
		{"redis://h:6379/0?prefix=p:&wait_replicas=1&wait_timeout=1s&dial_timeout=1s&allow_eviction=true", ""},
		{"rediss://:pw@h/1?skip_verify=true&ca=$CA&cert=$CERT&key=$KEY", ""},
		{"redis+sentinel://h1,h2:26380/m/1?sentinel_password=x&replica_only=false", ""},
		{"rediss+cluster://h1:7000,h2?read_only=false&ca=$CA", ""},
		{"redis://h/0?allow_eviction=maybe", `allow_eviction="maybe": want true or false`},
		{"redis://h/0?wait_replicas=-1", `wait_replicas="-1": want a whole number, at least 0`},
		{"redis://h/0?wait_timeout=soon", `wait_timeout="soon": want a positive duration`},
		{"redis://h/0?dial_timeout=x", "invalid dial_timeout duration"},
		{"redis://h/notadb", "database"},
		{"redis://h/0?bogus=1", `unknown parameter "bogus" (known: prefix,`},
		{"redis://h/0?skip_verify=true", `unknown parameter "skip_verify"`},
		{"redis+cluster://h?max_redirects=1&max_redirects=2", `parameter "max_redirects" given 2 times`},
		{"redis://h/0?ca=$CA", "ca, cert and key need TLS, but the scheme redis:// turns it off"},
		{"rediss://h/0?cert=$CERT", "needs both a certificate file and a key file"},
		{"rediss://h/0?ca=/nonexistent/ca.pem", "CA file"},
		{"redis://h1,h2/0", "one host only"},
		{"redis+cluster://h1/1", "only database 0"},
		{"redis+sentinel://h1", "master's name"},
		{"redis://h/0?sentinel_password=x", "need a redis+sentinel:// URL"},
		{"redis+cluster://h1?addr=h2:1", `parameter "addr": the URL's hosts`},
		{"redis+sentinel://h1,,h2/m", `host ""`},
		{"redis://h/3?db=3", ""},
		{"redis+sentinel://h/m?wait_replicas=1&wait_timeout=2s", ""},
		{"redis://h/0?prefix=app#1:", "a fragment ('#') is not allowed"},
		{"redis+cluster://h1,h2#x", "a fragment ('#') is not allowed"},
		{"redis://h/2?db=3", `the URL's path names database "2" and its db parameter "3"`},
		{"redis+sentinel://h/m/2?db=3", `the URL's path names database "2" and its db parameter "3"`},
		{"redis://h/0?max_retries=3", "parameter max_retries: the store sets it itself"},
		{"redis+cluster://h?max_retries=3", "parameter max_retries: the store sets it itself"},
		{"redis+sentinel://h/m?context_timeout_enabled=false", "parameter context_timeout_enabled: the store sets it itself"},
		{"redis://h/0?wait_timeout=2s", "wait_timeout needs wait_replicas"},
		{"redis+cluster://h?wait_timeout=2s", "wait_timeout needs wait_replicas"},
	},
	"cassandra": {
		{"cassandra://h1,h2:9042/ks?table=t&mode=JAEGER&serial=local_serial&consistency=local_quorum&local_dc=dc1&timeout=1s&connect_timeout=1s&replication=dc1:3", ""},
		{"cassandra://u:pw@h/ks?tls=true&verify_host=false&ca=$CA&cert=$CERT&key=$KEY", ""},
		{"cassandra://h/ks?mode=raft", `mode="raft": want native or jaeger`},
		{"cassandra://h/ks?serial=QUORUM", `serial="QUORUM": want SERIAL or LOCAL_SERIAL`},
		{"cassandra://h/ks?consistency=ONE", `consistency="ONE": want QUORUM or LOCAL_QUORUM`},
		{"cassandra://h/ks?local_dc=x%27y", `local_dc="x'y"`},
		{"cassandra://h/ks?timeout=forever", `timeout="forever": want a positive duration such as 5s, at most 10m0s`},
		{"cassandra://h/ks?connect_timeout=20m", `connect_timeout="20m"`},
		{"cassandra://h/ks?tls=maybe", `tls="maybe": want true or false`},
		{"cassandra://h/ks?verify_host=maybe", `verify_host="maybe": want true or false`},
		{"cassandra://h/ks?verify_host=false", "verify_host is a TLS setting"},
		{"cassandra://h/ks?replication=0", `replication="0": factor 0 outside 1..64`},
		{"cassandra://h/ks?table=x%22y", `table="x\"y"`},
		{"cassandra://h/1ks", `keyspace "1ks"`},
		{"cassandra://h$/ks", `host "h$": not a host name`},
		{"cassandra://h/ks?colour=blue", `unknown parameter "colour" (known: table, mode,`},
		{"cassandra://h/ks?table=a&table=b", `parameter "table" given 2 times`},
		{"cassandra://h/ks?tls=false&ca=$CA", "ca, cert and key need TLS, but tls=false turns it off"},
		{"cassandra://h/ks?cert=$CERT", "needs both a certificate file and a key file"},
		{"cassandra://h/ks?ca=", `ca="": empty file name`},
		{"cassandra://h/ks?ca=/nonexistent/ca.pem", "CA file"},
	},
}

// parsers are the stores' own ParseURL, which store.Parse calls.
var parsers = map[string]func(string) error{
	"sqlite":    func(raw string) error { _, err := sqlite.ParseURL(raw); return err },
	"memory":    func(raw string) error { _, err := memory.ParseURL(raw); return err },
	"postgres":  func(raw string) error { _, err := postgres.ParseURL(raw); return err },
	"mysql":     func(raw string) error { _, err := mysql.ParseURL(raw); return err },
	"etcd":      func(raw string) error { _, err := etcd.ParseURL(raw); return err },
	"redis":     func(raw string) error { _, err := redis.ParseURL(raw); return err },
	"cassandra": func(raw string) error { _, err := cassandra.ParseURL(raw); return err },
}

// TestURLs checks every scheme's URLs through store.Parse, by the rules
// that every store shares: a bad URL's error matches ErrBadURL, says what
// is wrong, names "bad store URL" and the store once each, and never shows
// a password; a store's own ParseURL refuses the same URLs with errors
// matching driver.ErrBadURL.
func TestURLs(t *testing.T) {
	pki := testserver.NewPKI(t, t.TempDir())
	files := strings.NewReplacer("$CA", pki.CA, "$CERT", pki.ClientCert, "$KEY", pki.ClientKey)
	for name, cases := range urlCases {
		for _, c := range cases {
			raw := files.Replace(c.raw)
			t.Run(c.raw, func(t *testing.T) {
				_, err := store.Parse(raw)
				if c.want == "" {
					if err != nil {
						t.Fatalf("Parse: %v", err)
					}
					return
				}
				checkBadURL(t, name, err, c.want)
				if name == "cassandra" && strings.Contains(raw, "/nonexistent") {
					return // cassandra.ParseURL reads no file; store.Parse does
				}
				if err := parsers[name](raw); !errors.Is(err, driver.ErrBadURL) {
					t.Errorf("%s.ParseURL: %v, want an error matching driver.ErrBadURL", name, err)
				}
				// The same URL with a password: the password is never shown.
				if withPW, ok := withPassword(raw); ok {
					_, err := store.Parse(withPW)
					checkBadURL(t, name, err, "")
					if err := parsers[name](withPW); err == nil || strings.Contains(err.Error(), "pw-S3CRET") {
						t.Errorf("%s.ParseURL(%q): %v shows the password", name, withPW, err)
					}
				}
			})
		}
	}
}

// checkBadURL checks err, the error of a URL of the store name.
func checkBadURL(t *testing.T, name string, err error, want string) {
	t.Helper()
	if !errors.Is(err, store.ErrBadURL) || !errors.Is(err, driver.ErrBadURL) {
		t.Fatalf("Parse: %v, want an error matching ErrBadURL", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, want) {
		t.Errorf("Parse: %q does not say %q", msg, want)
	}
	if strings.Contains(msg, "pw-S3CRET") {
		t.Errorf("Parse: %q shows the password", msg)
	}
	if n := strings.Count(msg, "bad store URL"); n != 1 || !strings.HasPrefix(msg, "bad store URL: ") {
		t.Errorf("Parse: %q says \"bad store URL\" %d times, want once, first", msg, n)
	}
	if n := strings.Count(msg, name+" store"); n != 1 {
		t.Errorf("Parse: %q names the %s store %d times, want once", msg, name, n)
	}
	if strings.Contains(msg, "bad URL") || strings.Contains(msg, "bad configuration") || strings.Contains(msg, "redis: ") {
		t.Errorf("Parse: %q repeats what a layer above says", msg)
	}
}

// withPassword returns raw with the user information "u:pw-S3CRET", when
// it is a URL of hosts without user information.
func withPassword(raw string) (string, bool) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if _, hasInfo := driver.Userinfo(rest); !ok || hasInfo {
		return "", false
	}
	return scheme + "://u:pw-S3CRET@" + rest, true
}

// The TLS rule is the same for every store: TLS turned off (tls=false, a
// plain scheme, sslmode=disable) together with a CA or a client
// certificate is refused; a CA or a client certificate alone turns TLS
// on; a certificate needs its key.
func TestDecideTLS(t *testing.T) {
	off := driver.TLSSaid{Said: true, On: false, By: "tls=false"}
	on := driver.TLSSaid{Said: true, On: true, By: "tls=true"}
	for _, c := range []struct {
		said   driver.TLSSaid
		files  driver.TLSFiles
		wantOn bool
		bad    bool
	}{
		{driver.TLSSaid{}, driver.TLSFiles{}, false, false},
		{driver.TLSSaid{}, driver.TLSFiles{CA: "ca"}, true, false},
		{driver.TLSSaid{}, driver.TLSFiles{Cert: "c", Key: "k"}, true, false},
		{on, driver.TLSFiles{}, true, false},
		{on, driver.TLSFiles{CA: "ca"}, true, false},
		{off, driver.TLSFiles{}, false, false},
		{off, driver.TLSFiles{CA: "ca"}, false, true},
		{off, driver.TLSFiles{Cert: "c", Key: "k"}, false, true},
		{driver.TLSSaid{}, driver.TLSFiles{Cert: "c"}, false, true},
		{on, driver.TLSFiles{Key: "k"}, false, true},
	} {
		got, err := driver.DecideTLS(c.said, c.files)
		if (err != nil) != c.bad || err == nil && got != c.wantOn {
			t.Errorf("DecideTLS(%+v, %+v) = %v, %v; want %v (refused: %v)", c.said, c.files, got, err, c.wantOn, c.bad)
		}
	}
}
