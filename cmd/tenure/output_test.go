//go:build linux

package main

// What tenure prints is safe and its exit codes are true: strings from
// other hosts are quoted and escaped, long names shortened, secrets never
// shown, and a failed write to stdout is one exit code everywhere.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store"
	"github.com/tenure-go/tenure/store/postgres"
)

// controlChars reports the first character of s that a terminal would
// act on: a control character other than newline and tab, or a
// bidirectional override.
func controlChars(s string) (rune, bool) {
	for _, r := range s {
		if r == '\n' || r == '\t' {
			continue
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return r, true
		}
	}
	return 0, false
}

// Owner ids and resource names come from other hosts through the store:
// in every message and table they are quoted and escaped, so no control
// character or escape sequence reaches the terminal. Long names are
// shortened in messages.
func TestForeignStringsEscaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	evilOwner := "web\x1b[2J\x1b]0;pwned\x07\u202eexe.txt\r"
	evilRes := "job\x1b[31m\x08\x08"
	for _, res := range []string{"job", evilRes} {
		res := res
		name := "holder-" + strings.Map(func(r rune) rune {
			if unicode.IsLetter(r) {
				return r
			}
			return -1
		}, res)
		e.start(name, startOpt{stdinPipe: true}, "run", "--owner", evilOwner, "--", res, "--",
			helper("-ready", e.path(name+".ready"), "-hold", "stdin"))
		waitFor(t, 10*time.Second, name+" to hold its lease", func() bool { _, err := os.Stat(e.path(name + ".ready")); return err == nil })
	}
	for _, args := range [][]string{
		{"run", "--no-wait", "job", "--", "true"},
		{"run", "--no-wait", "--", evilRes, "--", "true"},
		{"status", "job"},
		{"status", "--", evilRes},
		{"list"},
		{"release", "job", "--owner", "someone-else"},
		{"--log-level", "debug", "run", "--wait", "300ms", "job", "--", "true"},
	} {
		code, stdout, stderr := e.run(args)
		for _, s := range []string{stdout, stderr} {
			if r, bad := controlChars(s); bad {
				t.Errorf("%q (exit %d) printed %U raw:\n%q", args, code, r, s)
			}
		}
		if !strings.Contains(stdout+stderr, `\x1b`) {
			t.Errorf("%q (exit %d) should show the escape character escaped:\n%s%s", args, code, stdout, stderr)
		}
	}

	// A very long name in a message is shortened.
	long := strings.Repeat("r", 100_000)
	for _, args := range [][]string{
		{"run", long, "--", "true"},
		{"status", long},
		{"elect", "--", long, "--", "true"},
		{"run", "--owner", long, "job", "--", "true"},
	} {
		code, _, stderr := e.run(args)
		if code != exitUsage || len(stderr) > 2000 {
			t.Errorf("%.40q: exit %d, %d bytes on stderr; want %d and a short message:\n%.300s", args, code, len(stderr), exitUsage, stderr)
		}
	}
}

// A resource name that starts with "-" goes after "--", with a second
// "--" before the command, in run and elect; status and list take it after
// "--" as well.
func TestDashResourceName(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	out := e.path("events")
	for _, args := range [][]string{
		{"run", "--ttl", "5s", "--", "-odd", "--", "sh", "-c", `test "$TENURE_RESOURCE" = -odd && exec "$0" "$@"`, helper("-out", out)[0]},
		{"run", "--slots", "2", "--", "-odd", "--", "sh", "-c", `test "$TENURE_RESOURCE" = -odd && exec "$0" "$@"`, helper("-out", out)[0]},
		{"elect", "--", "-odd", "--", "sh", "-c", `test "$TENURE_RESOURCE" = -odd && exec "$0" "$@"`, helper("-out", out)[0]},
	} {
		code, _, stderr := e.run(append(args, "-out", out))
		if code != 0 {
			t.Errorf("%q: exit %d:\n%s", args, code, stderr)
		}
	}
	if n := len(filter(readEvents(t, out), "start")); n != 3 {
		t.Fatalf("the command ran %d times, want 3", n)
	}
	p := e.start("holder", startOpt{stdinPipe: true}, "run", "--", "-odd", "--", helper("-ready", e.path("ready"), "-hold", "stdin"))
	waitReady(t, e.path("ready"), 10*time.Second)
	if code, stdout, stderr := e.run("status", "--", "-odd"); code != 0 || !strings.Contains(stdout, "-odd") {
		t.Errorf("status -- -odd: exit %d:\n%s%s", code, stdout, stderr)
	}
	p.stdin.Close()
	p.wait(10 * time.Second)
	for _, name := range []string{"run", "elect"} {
		code, stdout, stderr := e.run(name, "--help")
		if code != 0 || !strings.Contains(stdout, "tenure "+name+" -- -name -- COMMAND") {
			t.Errorf("%s --help should say how to use a name that starts with -: exit %d\n%s%s", name, code, stdout, stderr)
		}
	}
}

// A write to tenure's standard output that fails (a full disk, a pipe
// whose reader is gone) is exit code 74 with one line on stderr, in every
// subcommand that writes there.
func TestStdoutWriteFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	h := e.start("holder", startOpt{stdinPipe: true}, "run", "held", "--", helper("-ready", e.path("ready"), "-hold", "stdin"))
	waitReady(t, e.path("ready"), 10*time.Second)
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	cases := [][]string{
		{"status", "held"},
		{"status", "free"},
		{"status", "--json", "held"},
		{"list"},
		{"list", "--json"},
		{"init"},
		{"schema", "cassandra"},
		{"--help"},
		{"run", "--help"},
		{"elect", "--help"},
		{"help", "status"},
	}
	for _, args := range cases {
		for _, kind := range []string{"full", "closed pipe"} {
			cmd := exec.Command(tenureBin, args...)
			cmd.Env = append(os.Environ(), "TENURE_STORE="+e.store, "XDG_STATE_HOME="+e.dir)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if kind == "full" {
				cmd.Stdout = full
			} else {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				r.Close() // the reader is gone before tenure writes
				cmd.Stdout = w
				defer w.Close()
			}
			_ = cmd.Run()
			code := cmd.ProcessState.ExitCode()
			if code != exitIOErr || !strings.Contains(stderr.String(), "cannot write to standard output") {
				t.Errorf("%q, stdout %s: exit %d, want %d:\n%s", args, kind, code, exitIOErr, stderr.String())
			}
			// The failed write is said once, not also as the subcommand's
			// own error ("write JSON: broken pipe": new-user trial).
			if strings.Count(stderr.String(), "\n") > 1 {
				t.Errorf("%q, stdout %s: the failed write is reported more than once:\n%s", args, kind, stderr.String())
			}
		}
	}
	// release writes what it released: the lease is released, and the
	// failed write is 74.
	cmd := exec.Command(tenureBin, "release", "--force", "held")
	cmd.Env = append(os.Environ(), "TENURE_STORE="+e.store)
	cmd.Stdout = full
	_ = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != exitIOErr {
		t.Errorf("release to a full stdout: exit %d, want %d", code, exitIOErr)
	}
	h.stdin.Close()
	h.wait(10 * time.Second)
}

// Secrets in store URLs (a password in the user information, password=
// and the other secret parameters) never reach stderr, whatever the log
// level and whatever goes wrong.
func TestSecretsNeverShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const secret = "s3cr3t-pw"
	for _, url := range []string{
		"postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=1",
		"postgres://u@127.0.0.1:1/db?password=" + secret + "&connect_timeout=1",
		"postgres://u@127.0.0.1:1/db?sslpassword=" + secret + "&connect_timeout=1",
		"postgres://u@127.0.0.1:1/db?password=" + secret + "&frobnicate=1",
		"postgresql://u:" + secret + "@127.0.0.1:99999/db",
		"redis://u:" + secret + "@127.0.0.1:1/0?dial_timeout=1s",
		"redis://:" + secret + "@127.0.0.1:1/0?dial_timeout=1s&frobnicate=1",
		"redis+sentinel://u:" + secret + "@127.0.0.1:1,127.0.0.1:2/m?dial_timeout=1s",
		"redis+sentinel://127.0.0.1:1/m?sentinel_password=" + secret + "&dial_timeout=1s",
		"redis+sentinel://127.0.0.1:1/m?sentinel_password=" + secret + "&frobnicate=1",
		"rediss+sentinel://:" + secret + "@127.0.0.1:1/m/x",
		"redis+cluster://u:" + secret + "@127.0.0.1:1,127.0.0.1:2?dial_timeout=1s",
		"redis+cluster://:" + secret + "@127.0.0.1:1/5",
		"etcd://u:" + secret + "@127.0.0.1:1?dial_timeout=1s",
		"etcd://127.0.0.1:1?username=u&password=" + secret + "&dial_timeout=1s",
		"cassandra://u:" + secret + "@127.0.0.1:1/ks?connect_timeout=1s&timeout=1s",
		"cassandra://u:" + secret + "@127.0.0.1:1/ks?frobnicate=1",
		// Forms the redaction did not know: a
		// scheme without its slashes, libpq's keyword/value settings, and an
		// '@' in the password that pgx and Go's net/url split differently.
		"postgres:u:" + secret + "@127.0.0.1/db",
		"host=127.0.0.1 port=1 password=" + secret,
		"postgres://u:x@" + secret + "@127.0.0.1:1/db?connect_timeout=1",
		// A '/', '?' or '#' in a password, a short slash, an escaped space,
		// a quoted string.
		"postgres://u:" + secret + "/x@127.0.0.1:1/db",
		"redis://u:x/" + secret + "@127.0.0.1:1/0",
		"etcd://u:" + secret + "#x@127.0.0.1:1",
		"cassandra://u:" + secret + "/x@127.0.0.1:1/ks",
		"postgres:/u:" + secret + "@127.0.0.1:1/db?connect_timeout=1",
		"redis:/u:" + secret + "@127.0.0.1:1/0",
		`host=127.0.0.1 port=1 password=x\ ` + secret,
		`"host=127.0.0.1 port=1 password=` + secret + `"`,
	} {
		for _, args := range [][]string{
			{"--log-level", "debug", "status", "job"},
			{"--log-level", "debug", "run", "--no-wait", "job", "--", "true"},
		} {
			code, stdout, stderr := e.run(append([]string{"--store", url}, args...))
			if strings.Contains(stdout+stderr, secret) || (code != exitUsage && code != exitUnavailable) {
				t.Errorf("%s %q: exit %d, and the secret must not appear:\n%s%s", strings.ReplaceAll(url, secret, "SECRET"), args, code, stdout, stderr)
			}
		}
	}
}

// In sqlite:PATH, '%' is taken as written.
func TestPercentInSQLitePath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, name := range []string{"100% sure.db", "a%20b.db", "c%zz.db"} {
		if code, _, stderr := e.run("--store", "sqlite:"+e.path(name), "run", "job", "--", "true"); code != 0 {
			t.Fatalf("%s: exit %d:\n%s", name, code, stderr)
		}
		if _, err := os.Stat(e.path(name)); err != nil {
			t.Fatalf("%s: the store is not at the path as written: %v", name, err)
		}
	}
	if _, err := os.Stat(e.path("a b.db")); err == nil {
		t.Fatalf("a%%20b was decoded")
	}
}

// "tenure help TOPIC" for a topic that is no command is a usage error, as
// "tenure TOPIC" is (a new user saw it exit 0).
func TestHelpUnknownTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if code, _, stderr := e.run("help", "nosuch"); code != exitUsage || !strings.Contains(stderr, "no command") {
		t.Fatalf("help nosuch: exit %d, want %d:\n%s", code, exitUsage, stderr)
	}
	if code, stdout, stderr := e.run("help", "run"); code != 0 || !strings.Contains(stdout, "RESOURCE") {
		t.Fatalf("help run: exit %d:\n%s%s", code, stdout, stderr)
	}
}

// oneLine turns a multi-line message into one line: no empty parts (a
// blank line once made "; ;" of cobra's suggestion), and a question reads
// on into its answer.
func TestOneLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"unknown command \"rnu\" for \"tenure\"\n\nDid you mean this?\n\trun\n", `unknown command "rnu" for "tenure"; Did you mean this? run`},
		{"connect failed:\n\t127.0.0.1: refused\n\t::1: refused", "connect failed: 127.0.0.1: refused; ::1: refused"},
		{"tenure: a  b\n\n\nc", "a b; c"},
	} {
		if got := oneLine(tc.in); got != tc.want {
			t.Errorf("oneLine(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// Each layer names the operation (the command, the Locker, the store): the
// message says it once. A server store without its schema (PostgreSQL
// before tenure init) is "no tenure store", exit 66, for every command (a
// new user saw 69 and `acquire "pgx"` three times).
func TestStoreErrSaysItOnce(t *testing.T) {
	inner := fmt.Errorf(`postgres store: acquire "pgx": %w: %w`, postgres.ErrNoSchema, errors.New(`ERROR: relation "tenure_leases" does not exist`))
	err := storeErr(fmt.Errorf(`tenure: acquire "pgx": %w`, inner), "run: acquire %s", quoteName("pgx"))
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitNoStore {
		t.Fatalf("storeErr of ErrNoSchema: %v; want exit %d", err, exitNoStore)
	}
	if n := strings.Count(ee.msg, `acquire "pgx"`); n != 1 || strings.Count(ee.msg, "postgres store") != 1 || !strings.Contains(ee.msg, "tenure init") {
		t.Fatalf("message %q: want `acquire \"pgx\"` and the store's name once, and the tenure init hint", ee.msg)
	}
	if got := dedupeContext(`get "a": x; get "b": y; redis store: get "a": z`); got != `get "a": x; get "b": y; redis store: z` {
		t.Fatalf("dedupeContext: %q", got)
	}
}

// The message of a store without its schema says "no tenure store" once:
// not again in the words of the sentinel the store's error wraps.
func TestNoStoreSaysItOnce(t *testing.T) {
	inner := fmt.Errorf("cassandra store: table ks.leases is missing (create it with `tenure init`): %w: %w", driver.ErrNoStore, errors.New("unconfigured table leases"))
	for _, err := range []error{
		storeOpenErr(fmt.Errorf("%w: cassandra://h/ks: %w", store.ErrUnavailable, inner)),
		storeErr(fmt.Errorf(`tenure: acquire "job": %w`, inner), "run: acquire %s", quoteName("job")),
	} {
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitNoStore {
			t.Fatalf("%v; want exit %d", err, exitNoStore)
		}
		if strings.Contains(ee.msg, "no such store") || strings.Count(ee.msg, "no tenure store") != 1 || !strings.Contains(ee.msg, "unconfigured table") {
			t.Errorf("message %q: want \"no tenure store\" once, and the store's own words", ee.msg)
		}
	}
}
