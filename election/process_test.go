//go:build linux

package election_test

// Election tests with real processes. The candidates are this test binary
// re-executed as a helper (selected by $TENURE_ELECTION_HELPER, see
// helperMain): each runs an election.Candidate against a store URL opened
// with package store, and records, with times read from CLOCK_MONOTONIC
// (one clock for every process of the host), when it started and stopped
// leading and every step of its work. A work step is stamped before the
// term's context is checked, so a recorded stamp was taken while the term
// was trusted (as in TestOneLeaderAtATime).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/election"
	"github.com/tenure-go/tenure/store"
	_ "github.com/tenure-go/tenure/store/all"
	"github.com/tenure-go/tenure/store/cassandra"
)

const helperEnv = "TENURE_ELECTION_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// mono reads CLOCK_MONOTONIC, which every process on the host shares.
func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// helperMain is a candidate process. It appends to -out, one write per line:
//
//	leader MONO ID   OnNewLeader(ID)
//	begin MONO TOKEN OnStartedLeading was called for the term with TOKEN
//	start MONO TOKEN the term's first work step (stamped, then the term checked)
//	work MONO TOKEN  a work step, every 5ms
//	stop MONO        OnStoppedLeading
//	exit MONO        Run returned after SIGTERM, every callback has returned
//
// SIGTERM cancels Run's context: the candidate leaves, releasing the lease.
// SIGUSR1 calls Resign, with the same effect. -value is the value the
// candidate publishes.
func helperMain(args []string) int {
	fs := flag.NewFlagSet("helper", flag.ContinueOnError)
	storeURL := fs.String("store", "", "")
	resource := fs.String("resource", "", "")
	id := fs.String("id", "", "")
	ttl := fs.Duration("ttl", time.Second, "")
	retry := fs.Duration("retry", 200*time.Millisecond, "")
	out := fs.String("out", "", "")
	value := fs.String("value", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var fmu sync.Mutex
	record := func(format string, args ...any) {
		fmu.Lock()
		defer fmu.Unlock()
		if _, err := f.WriteString(fmt.Sprintf(format, args...) + "\n"); err != nil {
			panic(err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	store, err := store.Open(octx, *storeURL)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 3
	}
	defer store.Close()

	var terms sync.WaitGroup
	var c *election.Candidate
	c, err = election.New(store, election.Config{
		Resource:    *resource,
		Identity:    *id,
		Value:       *value,
		TTL:         *ttl,
		RetryPeriod: *retry,
		OnNewLeader: func(leader string) { record("leader %d %s", mono(), leader) },
		OnStartedLeading: func(term context.Context) {
			terms.Add(1)
			defer terms.Done()
			l := tenure.LeaseFromContext(term)
			if term.Err() != nil {
				return // the term is over already
			}
			record("begin %d %d", mono(), l.Token())
			kind := "start"
			for {
				now := mono()
				if term.Err() != nil {
					return
				}
				record("%s %d %d", kind, now, l.Token())
				kind = "work"
				select {
				case <-term.Done():
				case <-time.After(5 * time.Millisecond):
				}
			}
		},
		OnStoppedLeading: func() { record("stop %d", mono()) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 3
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		<-usr1
		if err := c.Resign(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "helper: Resign:", err)
		}
	}()
	err = c.Run(ctx)
	terms.Wait()
	record("exit %d", mono())
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "helper: Run:", err)
		return 4
	}
	return 0
}

// pevent is a line of a helper's output.
type pevent struct {
	kind  string
	mono  int64
	token uint64 // begin, start, work
	id    string // leader
}

func readPEvents(t *testing.T, path string) []pevent {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var evs []pevent
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		e := pevent{kind: f[0]}
		if e.mono, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		switch {
		case len(f) == 3 && e.kind == "leader":
			e.id = f[2]
		case len(f) == 3:
			if e.token, err = strconv.ParseUint(f[2], 10, 64); err != nil {
				t.Fatalf("%s: bad line %q", path, sc.Text())
			}
		case len(f) != 2:
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		evs = append(evs, e)
	}
	return evs
}

// candidate is a helper process.
type candidate struct {
	name string
	out  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error  // of Wait, valid after done
	errf string // its stderr
}

// stderr returns what the candidate wrote to stderr.
func (c *candidate) stderr() string {
	b, _ := os.ReadFile(c.errf)
	return string(b)
}

func (c *candidate) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// cluster is a test's election among candidate processes.
type cluster struct {
	t             *testing.T
	dir           string
	store         driver.Store // the test's own connection, to ask who leads
	storeURL      string
	resource      string
	ttl, retry    time.Duration
	mu            sync.Mutex
	cands         []*candidate
	seq           int
	spawnedByName map[string]*candidate
}

func newCluster(t *testing.T, storeURL string, ttl, retry time.Duration) *cluster {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := store.Open(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &cluster{t: t, dir: t.TempDir(), store: s, storeURL: storeURL, resource: "election-test/" + randHex(6),
		ttl: ttl, retry: retry, spawnedByName: map[string]*candidate{}}
}

// valueOf is the value that the candidate named name publishes: an
// address, with the characters that the owner string encodes ('%', '#')
// and the one that separates it from the identity ('|').
func valueOf(name string) string { return "http://" + name + ".example:8080/#%|" }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (cl *cluster) spawn() *candidate {
	t := cl.t
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("c%d", cl.seq)
	cl.seq++
	c := &candidate{name: name, out: filepath.Join(cl.dir, name+".events"), errf: filepath.Join(cl.dir, name+".stderr"), done: make(chan struct{})}
	errFile, err := os.Create(c.errf)
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	c.cmd = exec.Command(exe, "-store", cl.storeURL, "-resource", cl.resource, "-id", name, "-value", valueOf(name),
		"-ttl", cl.ttl.String(), "-retry", cl.retry.String(), "-out", c.out)
	c.cmd.Env = append(os.Environ(), helperEnv+"=1", "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	c.cmd.Stderr = errFile
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		if !c.exited() {
			c.cmd.Process.Kill()
			<-c.done
		}
	})
	cl.mu.Lock()
	cl.cands = append(cl.cands, c)
	cl.spawnedByName[name] = c
	cl.mu.Unlock()
	return c
}

// poll calls cond every 10ms until it holds, or fails the test after
// timeout.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// leader waits until the store names a leader among live, and that
// candidate has started working in its term, and every other live candidate
// has seen it lead (so it campaigns). It returns the leader and its token.
func (cl *cluster) leader(live []*candidate) (*candidate, uint64) {
	t := cl.t
	t.Helper()
	var lead *candidate
	var token uint64
	poll(t, 60*time.Second, "a leader that works and that every follower has seen", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rec, err := cl.store.Get(ctx, cl.resource)
		cancel()
		if err != nil {
			return false
		}
		lead, token = cl.spawnedByName[election.LeaderOf(rec).Identity], rec.Token
		if lead == nil || !slices.Contains(live, lead) {
			return false
		}
		started := false
		for _, e := range readPEvents(t, lead.out) {
			started = started || (e.kind == "start" && e.token == token)
		}
		if !started {
			return false
		}
		for _, c := range live {
			if c == lead {
				continue
			}
			last := ""
			for _, e := range readPEvents(t, c.out) {
				if e.kind == "leader" {
					last = e.id
				}
			}
			if last != lead.name {
				return false
			}
		}
		return true
	})
	return lead, token
}

// firstStartAfter waits for the first term with a token above token to start
// working, in any candidate, and returns its start event.
func (cl *cluster) firstStartAfter(token uint64, timeout time.Duration) (pevent, *candidate) {
	t := cl.t
	t.Helper()
	var found pevent
	var who *candidate
	poll(t, timeout, fmt.Sprintf("a new leader after token %d", token), func() bool {
		cl.mu.Lock()
		cands := slices.Clone(cl.cands)
		cl.mu.Unlock()
		for _, c := range cands {
			for _, e := range readPEvents(t, c.out) {
				if e.kind == "start" && e.token > token && (who == nil || e.mono < found.mono) {
					found, who = e, c
				}
			}
		}
		return who != nil
	})
	return found, who
}

// takeovers are measured hand-overs.
type takeovers struct {
	kill, cancel []time.Duration
}

func (tk takeovers) String() string {
	f := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "none"
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		return fmt.Sprintf("n=%d min %v median %v max %v", len(s), s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
	}
	return fmt.Sprintf("SIGKILL → new leader: %s; SIGTERM (leave) → new leader: %s", f(tk.kill), f(tk.cancel))
}

// runElection runs three candidates over rounds terms: in each round the
// leader is killed with SIGKILL (even rounds) or leaves on SIGTERM (odd
// rounds), the time until a new leader works is measured against killLimit
// and cancelLimit, and a fresh candidate takes the old one's place. At the
// end every candidate leaves, and no two terms' work overlaps.
func runElection(t *testing.T, cl *cluster, rounds int, killLimit, cancelLimit time.Duration) takeovers {
	var tk takeovers
	live := []*candidate{cl.spawn(), cl.spawn(), cl.spawn()}
	killed := map[*candidate]bool{}
	for round := range rounds {
		lead, token := cl.leader(live)
		var from int64
		if round%2 == 0 {
			from = mono()
			lead.cmd.Process.Signal(syscall.SIGKILL)
			killed[lead] = true
		} else {
			from = mono()
			lead.cmd.Process.Signal(syscall.SIGTERM)
		}
		start, who := cl.firstStartAfter(token, 60*time.Second)
		d := time.Duration(start.mono - from)
		if round%2 == 0 {
			tk.kill = append(tk.kill, d)
			t.Logf("round %d: SIGKILL of %s (token %d) → %s leads (token %d) after %v", round, lead.name, token, who.name, start.token, d.Round(time.Millisecond))
			if d > killLimit {
				t.Errorf("round %d: new leader %v after SIGKILL, more than %v", round, d, killLimit)
			}
		} else {
			tk.cancel = append(tk.cancel, d)
			select { // it writes its stop line after the release
			case <-lead.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s did not exit; stderr:\n%s", lead.name, lead.stderr())
			}
			released := "?"
			for _, e := range readPEvents(t, lead.out) {
				if e.kind == "stop" && e.mono > from {
					released = time.Duration(e.mono - from).Round(100 * time.Microsecond).String()
				}
			}
			t.Logf("round %d: SIGTERM to %s (token %d; it released the lease within %s) → %s leads (token %d) after %v", round, lead.name, token, released, who.name, start.token, d.Round(time.Millisecond))
			if d > cancelLimit {
				t.Errorf("round %d: new leader %v after SIGTERM, more than %v", round, d, cancelLimit)
			}
		}
		select {
		case <-lead.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not exit; stderr:\n%s", lead.name, lead.stderr())
		}
		if !killed[lead] && lead.err != nil {
			t.Fatalf("%s exited with %v after SIGTERM; stderr:\n%s", lead.name, lead.err, lead.stderr())
		}
		live = slices.DeleteFunc(live, func(c *candidate) bool { return c == lead })
		live = append(live, cl.spawn())
	}
	// Every candidate runs (and handles SIGTERM) once it has seen the leader.
	cl.leader(live)
	for _, c := range live {
		c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range live {
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not exit; stderr:\n%s", c.name, c.stderr())
		}
		if c.err != nil {
			t.Fatalf("%s exited with %v; stderr:\n%s", c.name, c.err, c.stderr())
		}
	}
	cl.check(killed)
	return tk
}

// check reads every candidate's events: terms' work intervals are disjoint
// and in token order, and every candidate that left cleanly saw
// OnStoppedLeading once per OnStartedLeading.
func (cl *cluster) check(killed map[*candidate]bool) {
	t := cl.t
	t.Helper()
	type term struct {
		who         string
		token       uint64
		first, last int64
	}
	terms := map[uint64]*term{}
	for _, c := range cl.cands {
		evs := readPEvents(t, c.out)
		begins, stops := 0, 0
		for _, e := range evs {
			switch e.kind {
			case "begin":
				begins++
			case "stop":
				stops++
			case "start", "work":
				tm := terms[e.token]
				if tm == nil {
					tm = &term{who: c.name, token: e.token, first: e.mono, last: e.mono}
					terms[e.token] = tm
				}
				if tm.who != c.name {
					t.Fatalf("token %d worked in both %s and %s", e.token, tm.who, c.name)
				}
				tm.first, tm.last = min(tm.first, e.mono), max(tm.last, e.mono)
			}
		}
		if !killed[c] && begins != stops {
			t.Errorf("%s: OnStartedLeading %d times, OnStoppedLeading %d times", c.name, begins, stops)
		}
	}
	var list []*term
	for _, tm := range terms {
		list = append(list, tm)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].first < list[j].first })
	for i := 1; i < len(list); i++ {
		a, b := list[i-1], list[i]
		if b.first <= a.last {
			t.Fatalf("two leaders at once: %s (token %d) worked until %v after %s (token %d) started", a.who, a.token, time.Duration(a.last-b.first), b.who, b.token)
		}
		if b.token <= a.token {
			t.Fatalf("tokens do not increase from term to term: %d then %d", a.token, b.token)
		}
	}
	var gaps []time.Duration
	for i := 1; i < len(list); i++ {
		gaps = append(gaps, time.Duration(list[i].first-list[i-1].last))
	}
	t.Logf("%d terms, one leader at a time; gaps between terms: %v", len(list), roundAll(gaps))
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// Three candidate processes on one SQLite file.
func TestProcessesSQLite(t *testing.T) {
	t.Parallel()
	const ttl, retry = time.Second, 200 * time.Millisecond
	url := "sqlite:" + filepath.Join(t.TempDir(), "leases.db")
	cl := newCluster(t, url, ttl, retry) // creates the file before the candidates start
	slack := 5 * time.Second             // process scheduling on a loaded 2-core host
	tk := runElection(t, cl, 10, ttl+retry+retry/10+slack, retry+retry/10+slack)
	t.Logf("SQLite, TTL %v, retry %v: %v", ttl, retry, tk)
}

// cassandraKeyspace is the keyspace of the election tests; it is created
// (Init) when missing and kept, each test using resources of its own.
const cassandraKeyspace = "tenure_election_test"

// cassandraURL returns the URL of the test Cassandra, creating the keyspace
// and table, or skips the test.
func cassandraURL(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("TENURE_CASSANDRA")
	if addr == "" {
		t.Skip("set TENURE_CASSANDRA=host:port to run against a real Cassandra (scripts/cassandra start; eval \"$(scripts/cassandra env 1)\")")
	}
	url := "cassandra://" + addr + "/" + cassandraKeyspace + "?timeout=5s"
	cfg, err := cassandra.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cassandra.Init(ctx, cfg); err != nil {
		t.Fatalf("creating keyspace %s: %v", cassandraKeyspace, err)
	}
	return url
}

// Three candidate processes on a real Cassandra.
func TestProcessesCassandra(t *testing.T) {
	url := cassandraURL(t)
	t.Parallel()
	const ttl, retry = 2 * time.Second, 300 * time.Millisecond
	cl := newCluster(t, url, ttl, retry)
	// The store keeps a lease up to cassandra.MaxExpirySlack past its TTL
	// (whole-second TTLs, rounded up, plus one second).
	slack := 5 * time.Second // process scheduling on a loaded 2-core host
	tk := runElection(t, cl, 6, ttl+cassandra.MaxExpirySlack+retry+retry/10+slack, retry+retry/10+slack)
	t.Logf("Cassandra, TTL %v (store TTL %ds), retry %v: %v", ttl, mustStoreTTL(ttl), retry, tk)
}

func mustStoreTTL(ttl time.Duration) int {
	n, err := cassandra.StoreTTL(ttl)
	if err != nil {
		panic(err)
	}
	return n
}
