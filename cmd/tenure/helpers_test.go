//go:build linux

package main

// The tests run the tenure binary as real OS processes against a SQLite file
// in a temporary directory. The commands that tenure runs are this test
// binary again, as a helper chosen by $TENURE_TEST_HELPER (see helperMain),
// which records what it does, with times read from CLOCK_MONOTONIC (one
// clock shared by every process of the host), in files that the tests read.

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tenureBin is the tenure binary built by TestMain.
var tenureBin string

// helperEnv selects the helper mode when this test binary runs as a command.
const helperEnv = "TENURE_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain(os.Args[1:]))
	}
	if bin := os.Getenv("TENURE_TEST_BIN"); bin != "" {
		// Run the tests against another build of tenure, such as an older
		// one, to see which of them it fails.
		tenureBin = bin
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "tenure-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	tenureBin = filepath.Join(dir, "tenure")
	os.Chmod(dir, 0o755) // tests run it as another user too
	args := []string{"build", "-o", tenureBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command(goTool(), append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building tenure: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// mono reads CLOCK_MONOTONIC, which every process on the host shares.
func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// appendLine appends one line to path with a single write (O_APPEND makes
// concurrent appends from several processes safe).
func appendLine(path, format string, args ...any) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := f.WriteString(fmt.Sprintf(format, args...) + "\n"); err != nil {
		panic(err)
	}
}

// helperMain is the command that tenure runs in the tests.
//
//	-out FILE    append "start MONO TOKEN SLOT TAG", "beat ..." (every 20ms
//	             with -beat), "signal NAME MONO TOKEN SLOT TAG", "end ..."
//	             to FILE (SLOT is $TENURE_SLOT, TAG is -tag; "-" if empty)
//	-ready FILE  once started, write "PID TOKEN OWNER" to FILE (atomically)
//	-hold D      run for D; "stdin" runs until stdin is closed
//	-beat        append a beat line every 20ms while running
//	-signals M   on SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2:
//	             "default" (the default action), "ignore" (record it and go
//	             on), "exit42" (record it and exit 42), "exit0" (record it
//	             and exit 0, as a job that traps SIGTERM), "linger" (record
//	             SIGINT, SIGTERM or SIGHUP, go on working, with beats, for
//	             500ms, then end as after -hold), "background" (as a
//	             background job of a shell: record and ignore SIGINT and
//	             SIGQUIT; record SIGTERM and SIGHUP and exit 43)
//	-tag T       a word recorded with every line
//	-readline F  read a line from stdin into the file F, before -hold
//	-exit N      exit status at the end
func helperMain(args []string) int {
	fs := flag.NewFlagSet("helper", flag.ContinueOnError)
	out := fs.String("out", "", "")
	ready := fs.String("ready", "", "")
	hold := fs.String("hold", "0s", "")
	beat := fs.Bool("beat", false, "")
	sigMode := fs.String("signals", "default", "")
	tag := fs.String("tag", "-", "")
	exitCode := fs.Int("exit", 0, "")
	readLine := fs.String("readline", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	token := os.Getenv("TENURE_TOKEN")
	if token == "" {
		token = "0"
	}
	slot := os.Getenv("TENURE_SLOT")
	if slot == "" {
		slot = "-"
	}
	record := func(kind string, name string) {
		if *out == "" {
			return
		}
		if name != "" {
			appendLine(*out, "%s %s %d %s %s %s", kind, name, mono(), token, slot, *tag)
			return
		}
		appendLine(*out, "%s %d %s %s %s", kind, mono(), token, slot, *tag)
	}
	stop := make(chan struct{})
	var stopOnce sync.Once
	stopNow := func() { stopOnce.Do(func() { close(stop) }) }
	if *sigMode != "default" {
		ch := make(chan os.Signal, 8)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
		go func() {
			for s := range ch {
				record("signal", unix.SignalName(s.(syscall.Signal)))
				switch {
				case *sigMode == "exit42":
					os.Exit(42)
				case *sigMode == "exit0":
					os.Exit(0)
				case *sigMode == "linger" && (s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGHUP):
					time.AfterFunc(500*time.Millisecond, stopNow)
				case *sigMode == "background" && (s == syscall.SIGTERM || s == syscall.SIGHUP):
					os.Exit(43)
				}
			}
		}()
	}
	record("start", "")
	if *ready != "" {
		tmp := *ready + ".tmp"
		content := fmt.Sprintf("%d %s %s\n", os.Getpid(), token, os.Getenv("TENURE_OWNER"))
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			panic(err)
		}
		if err := os.Rename(tmp, *ready); err != nil {
			panic(err)
		}
	}
	if *readLine != "" {
		// Read one line from stdin (a terminal in TestRunOnTerminal) into a file.
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil {
			fmt.Fprintf(os.Stderr, "helper: read stdin: %v\n", err)
			return 3
		}
		if err := os.WriteFile(*readLine, []byte(line), 0o644); err != nil {
			panic(err)
		}
	}
	if *hold == "stdin" {
		go func() {
			io.Copy(io.Discard, os.Stdin)
			stopNow()
		}()
	} else {
		d, err := time.ParseDuration(*hold)
		if err != nil {
			return 2
		}
		time.AfterFunc(d, stopNow)
	}
	if *beat {
		t := time.NewTicker(20 * time.Millisecond)
	loop:
		for {
			select {
			case <-t.C:
				record("beat", "")
			case <-stop:
				break loop
			}
		}
	} else {
		<-stop
	}
	record("end", "")
	return *exitCode
}

// helper returns the command line that runs this test binary as a helper;
// the mode variable is set by start.
func helper(args ...string) []string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return append([]string{exe}, args...)
}

// event is a line of a helper's -out file.
type event struct {
	kind  string // start, beat, signal, end
	mono  int64
	token uint64
	slot  int    // TENURE_SLOT, 0 if none
	tag   string // the helper's -tag
	sig   string // for kind "signal"
}

func readEvents(t *testing.T, path string) []event {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var evs []event
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var e event
		if len(f) == 6 && f[0] == "signal" {
			e.sig = f[1]
			f = append(f[:1], f[2:]...)
		}
		if len(f) != 5 {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		e.kind, e.tag = f[0], f[4]
		e.mono, err = strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		e.token, err = strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		if f[3] != "-" {
			if e.slot, err = strconv.Atoi(f[3]); err != nil {
				t.Fatalf("%s: bad line %q", path, sc.Text())
			}
		}
		evs = append(evs, e)
	}
	return evs
}

func filter(evs []event, kind string) []event {
	var out []event
	for _, e := range evs {
		if e.kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// readyInfo is what a helper wrote to its -ready file.
type readyInfo struct {
	pid   int
	token uint64
	owner string
}

func waitReady(t *testing.T, path string, timeout time.Duration) readyInfo {
	t.Helper()
	var data []byte
	waitFor(t, timeout, "helper ready file "+filepath.Base(path), func() bool {
		var err error
		data, err = os.ReadFile(path)
		return err == nil
	})
	f := strings.Fields(string(data))
	if len(f) != 3 {
		t.Fatalf("ready file: %q", data)
	}
	pid, _ := strconv.Atoi(f[0])
	token, _ := strconv.ParseUint(f[1], 10, 64)
	return readyInfo{pid: pid, token: token, owner: f[2]}
}

// waitFor polls cond every 10ms until it holds, or fails the test after
// timeout.
// schedSlack is what the liveness checks of take-overs allow beyond the
// store's bound (TTL plus one retry interval) for starting processes and
// scheduling them on a loaded host. The checks catch a waiter that waits a
// second TTL or is never woken; how fast a take-over is belongs to the
// benchmarks.
const schedSlack = 5 * time.Second

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// env is a test's store and scratch directory.
type env struct {
	t     *testing.T
	dir   string
	db    string
	store string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	db := filepath.Join(dir, "leases.db")
	return &env{t: t, dir: dir, db: db, store: "sqlite:" + db}
}

func (e *env) path(name string) string { return filepath.Join(e.dir, name) }

// init creates the store's file before processes start together on it.
// Processes that open a fresh SQLite file at the same moment can fail with
// SQLITE_BUSY while creating the schema (store/sqlite.Open does not retry;
// reported to the store's owner), which is not what these tests are about.
func (e *env) init() {
	e.t.Helper()
	if code, stdout, stderr := e.run("init"); code != 0 {
		e.t.Fatalf("tenure init: exit %d\n%s%s", code, stdout, stderr)
	}
}

// proc is a tenure process started by a test, in its own process group.
type proc struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser // nil unless started with a stdin pipe
	errPath string
	outPath string
	done    chan struct{}
	code    int // valid after done: the exit code, or -1 if killed by a signal
	ended   time.Time
}

type startOpt struct {
	stdinPipe bool
	tty       *os.File // the terminal to run on, as a session leader
	helper    string   // helper mode for $TENURE_TEST_HELPER (default "on")
	extraEnv  []string
	dir       string // the working directory (default the test's)
}

// flatten turns strings and string slices into one slice.
func flatten(parts []any) []string {
	var out []string
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			out = append(out, v)
		case []string:
			out = append(out, v...)
		default:
			panic(fmt.Sprintf("flatten: %T", p))
		}
	}
	return out
}

// start runs tenure with args (strings and string slices) against the env's
// store.
func (e *env) start(name string, o startOpt, parts ...any) *proc {
	t := e.t
	t.Helper()
	args := flatten(parts)
	p := &proc{t: t, name: name, done: make(chan struct{}),
		errPath: e.path(name + ".stderr"), outPath: e.path(name + ".stdout")}
	stderr, err := os.Create(p.errPath)
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := os.Create(p.outPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(tenureBin, args...)
	mode := o.helper
	if mode == "" {
		mode = "on"
	}
	p.cmd.Env = append(os.Environ(), "TENURE_STORE="+e.store, helperEnv+"="+mode, "XDG_STATE_HOME="+e.dir)
	// Race-enabled programs sleep a second at exit by default to collect
	// reports; tenure and the helper are built with -race under go test -race.
	p.cmd.Env = append(p.cmd.Env, "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	p.cmd.Env = append(p.cmd.Env, o.extraEnv...)
	p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
	p.cmd.Dir = o.dir
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if o.tty != nil {
		// A new session whose controlling terminal is tty, with tenure's
		// process group in its foreground, as an interactive shell starts it.
		p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = o.tty, o.tty, o.tty
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	if o.stdinPipe {
		p.stdin, err = p.cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdout.Close()
	stderr.Close()
	go func() {
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		p.ended = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		if p.stdin != nil {
			p.stdin.Close()
		}
		select {
		case <-p.done:
		default:
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
			t.Logf("%s: killed at the end of the test; stderr:\n%s", name, p.stderr())
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) stderr() string {
	b, _ := os.ReadFile(p.errPath)
	return string(b)
}

func (p *proc) stdout() string {
	b, _ := os.ReadFile(p.outPath)
	return string(b)
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %v; stderr:\n%s", p.name, timeout, p.stderr())
		return 0
	}
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// run runs tenure to completion and returns its exit code, stdout and stderr.
func (e *env) run(parts ...any) (int, string, string) {
	e.t.Helper()
	p := e.start(fmt.Sprintf("run-%d", runSeq.next()), startOpt{}, parts...)
	code := p.wait(30 * time.Second)
	return code, p.stdout(), p.stderr()
}

var runSeq counter

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) next() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

// procStat returns the fields of /proc/PID/stat after the command name
// (state, ppid, pgrp, ...), or nil when the process is gone.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// The command name, in parentheses, may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// processGone reports whether pid no longer exists (or is a zombie that
// nobody waits for any more).
func processGone(pid int) bool {
	if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
		return true
	}
	f := procStat(pid)
	return len(f) == 0 || f[0] == "Z"
}

// openPTY returns the master and slave sides of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 200}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close(); slave.Close() })
	return master, slave
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
