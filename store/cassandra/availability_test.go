package cassandra_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/cassandra"
)

// TestAvailability measures (it asserts nothing) how the store serves while
// one node of three is killed or paused. It runs only when
// TENURE_CASSANDRA_AVAILABILITY names a scenario (normal, pause or kill) and
// TENURE_CASSANDRA_CLUSTER names the cluster; it drives the node with
// scripts/cassandra, so TENURE_CASSANDRA_DIR, _NET and _JMX must be those
// the cluster was started with:
//
//	TENURE_CASSANDRA_AVAILABILITY=pause go test -count=1 -v -timeout 10m \
//	    -run '^TestAvailability$' ./store/cassandra/
//
// Four clients, each with a Store of its own (a session, as a process has),
// loop acquire, renew, release on a resource of their own, every store call
// bounded by 3 s; two Lockers contend for one more resource (TTL 2 s, retry
// interval 250 ms) so that the free gaps while someone waits can be
// measured. Timeline: 5 s warm-up, 10 s before the fault, the fault
// (TENURE_AVAILABILITY_FAULT, default 20 s; for kill, then the restart, which
// waits for CQL and gossip, with the clients slowed down), 15 s after the
// node is back. It prints the
// figures and, with TENURE_AVAILABILITY_OUT=FILE, appends them as a JSON
// line. The stores have the default configuration (TENURE_AVAILABILITY_TIMEOUT
// sets Config.Timeout).
func TestAvailability(t *testing.T) {
	scenario := os.Getenv("TENURE_CASSANDRA_AVAILABILITY")
	if scenario == "" {
		t.Skip("a measurement: set TENURE_CASSANDRA_AVAILABILITY=normal|pause|kill (and TENURE_CASSANDRA_CLUSTER)")
	}
	if scenario != "normal" && scenario != "pause" && scenario != "kill" {
		t.Fatalf("TENURE_CASSANDRA_AVAILABILITY=%q: want normal, pause or kill", scenario)
	}
	faultFor := envDuration(t, "TENURE_AVAILABILITY_FAULT", 20*time.Second)
	node := 2
	if v := os.Getenv("TENURE_AVAILABILITY_NODE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 3 {
			t.Fatalf("TENURE_AVAILABILITY_NODE=%q: want 1, 2 or 3", v)
		}
		node = n
	}
	const (
		clients   = 4
		callBound = 3 * time.Second
		ttl       = 2 * time.Second
		retry     = 250 * time.Millisecond
		warmup    = 5 * time.Second
		before    = 10 * time.Second
		after     = 15 * time.Second
	)
	cfg := clusterConfig(t, cassandra.ModeNative)
	// The store's default timeout, as users have it, unless
	// TENURE_AVAILABILITY_TIMEOUT sets one.
	cfg.Timeout = envDuration(t, "TENURE_AVAILABILITY_TIMEOUT", 0)
	m := &measure{start: time.Now()}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		s := openCluster(t, cfg)
		own := owner(t, "client"+strconv.Itoa(i))
		res := resource(t, "distinct"+strconv.Itoa(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.cycleLoop(ctx, s, res, own, ttl, callBound)
		}()
	}
	shared := resource(t, "shared")
	for i := 0; i < 2; i++ {
		s := openCluster(t, cfg)
		lk, err := tenure.New(s, tenure.WithOwnerID("contender"+strconv.Itoa(i)), tenure.WithRetry(50*time.Millisecond, retry))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.contend(ctx, lk, shared, ttl)
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			lk.Close(cctx)
			cancel()
		}()
	}

	time.Sleep(warmup)
	m.mark("before")
	time.Sleep(before)
	script := func(args ...string) {
		out, err := exec.Command("../../scripts/cassandra", args...).CombinedOutput()
		if err != nil {
			t.Errorf("scripts/cassandra %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	n := strconv.Itoa(node)
	m.mark("fault")
	switch scenario {
	case "pause":
		script("pause", n)
		t.Cleanup(func() { script("resume", n) })
		time.Sleep(faultFor)
		script("resume", n)
	case "kill":
		script("kill", n)
		time.Sleep(faultFor)
		// The machine's two cores cannot restart a node under the full
		// load: the clients slow down to a cycle per 200 ms each until it
		// is back (those calls count in no window).
		m.mark("restart")
		m.throttle.Store(true)
		script("restart", n)
		m.throttle.Store(false)
	default:
		time.Sleep(faultFor)
	}
	m.mark("back")
	time.Sleep(after)
	m.mark("end")
	stop()
	wg.Wait()

	rep := m.report(scenario, node, faultFor, ttl, retry)
	b, _ := json.Marshal(rep)
	t.Logf("%s", b)
	t.Logf("%s", rep.line())
	if out := os.Getenv("TENURE_AVAILABILITY_OUT"); out != "" {
		f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "%s\n", b)
		f.Close()
	}
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// measure collects the calls and the contenders' holds of one run, on one
// monotonic clock (time.Since(start)).
type measure struct {
	start time.Time
	mu    sync.Mutex
	calls []call
	marks []mark
	// contended resource: holds in grant order
	holds    []hold
	waiting  int // contenders inside Acquire
	throttle atomic.Bool
}

type call struct {
	op         string
	start, end time.Duration
	err        error
}

type mark struct {
	name string
	at   time.Duration
}

type hold struct {
	granted time.Duration // Acquire returned the lease
	ended   time.Duration // release started or the lease was lost
	waiters bool          // someone was waiting when it ended
}

func (m *measure) now() time.Duration { return time.Since(m.start) }

func (m *measure) mark(name string) {
	m.mu.Lock()
	m.marks = append(m.marks, mark{name, m.now()})
	m.mu.Unlock()
}

func (m *measure) record(op string, start time.Duration, err error) {
	end := m.now()
	m.mu.Lock()
	m.calls = append(m.calls, call{op, start, end, err})
	m.mu.Unlock()
}

// cycleLoop is one client: acquire, renew, release, each bounded by bound,
// on its own resource, until ctx ends. A failed call does not end the cycle
// early (a renewal or release after a failed acquire answers "lost" at
// once, which counts as an answer: the store answered).
func (m *measure) cycleLoop(ctx context.Context, s *cassandra.Store, res, own string, ttl, bound time.Duration) {
	for ctx.Err() == nil {
		call := func(op string, f func(context.Context) error) error {
			st := m.now()
			cctx, cancel := context.WithTimeout(context.Background(), bound)
			err := f(cctx)
			cancel()
			if ctx.Err() == nil {
				m.record(op, st, err)
			}
			return err
		}
		var token uint64
		err := call("acquire", func(c context.Context) error {
			rec, err := s.Acquire(c, res, own, ttl)
			token = rec.Token
			return err
		})
		if err != nil {
			continue
		}
		call("renew", func(c context.Context) error { return s.Renew(c, res, own, token, ttl) })
		call("release", func(c context.Context) error { return s.Release(c, res, own, token) })
		if m.throttle.Load() {
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// contend loops a blocking Acquire of res, holds the lease for about a TTL
// (so that it is renewed in the background) and releases it.
func (m *measure) contend(ctx context.Context, lk *tenure.Locker, res string, ttl time.Duration) {
	for ctx.Err() == nil {
		m.mu.Lock()
		m.waiting++
		m.mu.Unlock()
		l, err := lk.Acquire(ctx, res, ttl)
		granted := m.now()
		m.mu.Lock()
		m.waiting--
		m.mu.Unlock()
		if err != nil {
			continue
		}
		m.mu.Lock()
		m.holds = append(m.holds, hold{granted: granted})
		i := len(m.holds) - 1
		m.mu.Unlock()
		select {
		case <-time.After(ttl):
		case <-l.Done():
		case <-ctx.Done():
		}
		m.mu.Lock()
		m.holds[i].ended = m.now()
		if l.Err() != nil {
			// lost: the lease stopped being trusted at its deadline
			m.holds[i].ended = min(m.holds[i].ended, time.Until(l.Deadline())+m.now())
		}
		m.holds[i].waiters = m.waiting > 0
		m.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.Background(), ttl)
		l.Release(rctx)
		cancel()
	}
}

// availability is one run's figures.
type availability struct {
	Scenario string `json:"scenario"`
	Node     int    `json:"node"`
	Fault    string `json:"fault"`
	// calls per second and success rate of the four clients' store calls
	BeforeCallsPerS float64 `json:"before_calls_per_s"`
	BeforeOK        float64 `json:"before_success"`
	FaultCallsPerS  float64 `json:"fault_calls_per_s"`
	FaultOK         float64 `json:"fault_success"`
	FaultCalls      int     `json:"fault_calls"`
	FaultFailed     int     `json:"fault_failed"`
	Throughput      float64 `json:"fault_throughput_vs_before"`
	AfterCallsPerS  float64 `json:"after_calls_per_s"`
	AfterOK         float64 `json:"after_success"`
	// counted from the node's return: the last failed call, and the first
	// second from which every second has at least 99% of its calls succeed
	LastFailureAfterBack string `json:"last_failure_after_back"`
	FullServiceAfterBack string `json:"full_service_after_back"`
	AfterPerSecond       []int  `json:"after_calls_per_second"`
	// contenders: the longest time the shared resource was free while
	// someone waited, overall and starting during the fault
	Holds          int            `json:"holds"`
	LongestGap     string         `json:"longest_free_gap"`
	LongestGapAt   string         `json:"longest_free_gap_at"`
	GapBound       string         `json:"gap_bound"`
	SlowestCall    string         `json:"slowest_call"`
	Errors         map[string]int `json:"errors,omitempty"`
	MarksFromStart map[string]string
}

func (a availability) line() string {
	return fmt.Sprintf("scenario=%s node=%d before=%.0f/s ok=%.4f fault=%.0f/s ok=%.4f (%d of %d failed) throughput=%.2f after=%.0f/s ok=%.4f last-failure-after-back=%s full-service-after-back=%s longest-free-gap=%s (at %s; bound %s) holds=%d slowest-call=%s",
		a.Scenario, a.Node, a.BeforeCallsPerS, a.BeforeOK, a.FaultCallsPerS, a.FaultOK, a.FaultFailed, a.FaultCalls, a.Throughput,
		a.AfterCallsPerS, a.AfterOK, a.LastFailureAfterBack, a.FullServiceAfterBack, a.LongestGap, a.LongestGapAt, a.GapBound, a.Holds, a.SlowestCall)
}

func (m *measure) report(scenario string, node int, fault, ttl, retry time.Duration) availability {
	m.mu.Lock()
	defer m.mu.Unlock()
	at := map[string]time.Duration{}
	a := availability{Scenario: scenario, Node: node, Fault: fault.String(), Errors: map[string]int{}, MarksFromStart: map[string]string{}}
	for _, mk := range m.marks {
		at[mk.name] = mk.at
		a.MarksFromStart[mk.name] = mk.at.Round(time.Millisecond).String()
	}
	window := func(from, to time.Duration) (perS, ok float64, n, failed int) {
		for _, c := range m.calls {
			if c.end < from || c.end >= to {
				continue
			}
			n++
			if c.err != nil && !errors.Is(c.err, driver.ErrLeaseLost) && !errors.Is(c.err, driver.ErrHeld) {
				failed++
			}
		}
		if n == 0 {
			return 0, 0, 0, 0
		}
		return float64(n) / (to - from).Seconds(), float64(n-failed) / float64(n), n, failed
	}
	a.BeforeCallsPerS, a.BeforeOK, _, _ = window(at["before"], at["fault"])
	faultEnd := at["back"]
	if r, ok := at["restart"]; ok {
		faultEnd = r
	}
	a.FaultCallsPerS, a.FaultOK, a.FaultCalls, a.FaultFailed = window(at["fault"], faultEnd)
	a.AfterCallsPerS, a.AfterOK, _, _ = window(at["back"], at["end"])
	if a.BeforeCallsPerS > 0 {
		a.Throughput = a.FaultCallsPerS / a.BeforeCallsPerS
	}
	var slowest time.Duration
	lastFail := time.Duration(-1)
	for _, c := range m.calls {
		slowest = max(slowest, c.end-c.start)
		if c.err != nil && !errors.Is(c.err, driver.ErrLeaseLost) && !errors.Is(c.err, driver.ErrHeld) {
			a.Errors[errClass(c.err)]++
			if c.end >= at["back"] && c.end-at["back"] > lastFail {
				lastFail = c.end - at["back"]
			}
		}
	}
	a.SlowestCall = slowest.Round(time.Millisecond).String()
	a.LastFailureAfterBack = "none"
	if lastFail >= 0 {
		a.LastFailureAfterBack = lastFail.Round(time.Millisecond).String()
	}
	// Per second after the node is back: calls and failures. Full service
	// is reached at the start of the first second from which every second
	// has at least 99% of its calls succeed; the calls per second are
	// reported beside (on two shared cores they swing with other work).
	secs := int((at["end"] - at["back"]) / time.Second)
	a.AfterPerSecond = make([]int, secs)
	failedPerSecond := make([]int, secs)
	for _, c := range m.calls {
		if c.end >= at["back"] {
			if i := int((c.end - at["back"]) / time.Second); i < secs {
				a.AfterPerSecond[i]++
				if c.err != nil && !errors.Is(c.err, driver.ErrLeaseLost) && !errors.Is(c.err, driver.ErrHeld) {
					failedPerSecond[i]++
				}
			}
		}
	}
	a.FullServiceAfterBack = "never"
	for i := secs - 1; i >= -1; i-- {
		if i < 0 || float64(failedPerSecond[i]) > 0.01*float64(a.AfterPerSecond[i]) || a.AfterPerSecond[i] == 0 {
			if i < secs-1 {
				a.FullServiceAfterBack = (time.Duration(i+1) * time.Second).String()
			}
			break
		}
	}
	// free gaps of the shared resource while someone waited
	holds := slices.Clone(m.holds)
	sort.Slice(holds, func(i, j int) bool { return holds[i].granted < holds[j].granted })
	a.Holds = len(holds)
	var longest, longestAt time.Duration
	for i := 1; i < len(holds); i++ {
		prev := holds[i-1]
		if !prev.waiters || prev.ended == 0 {
			continue
		}
		if g := holds[i].granted - prev.ended; g > longest {
			longest, longestAt = g, prev.ended
		}
	}
	a.LongestGap = longest.Round(time.Millisecond).String()
	a.LongestGapAt = phase(longestAt, at)
	a.GapBound = (ttl + retry).String()
	return a
}

// phase names where t lies on the run's timeline.
func phase(t time.Duration, at map[string]time.Duration) string {
	switch {
	case t < at["before"]:
		return "warm-up"
	case t < at["fault"]:
		return "before"
	case t < at["back"]:
		return fmt.Sprintf("fault+%v", (t - at["fault"]).Round(time.Millisecond))
	default:
		return fmt.Sprintf("back+%v", (t - at["back"]).Round(time.Millisecond))
	}
}

// errClass shortens an error to its kind, for counting.
func errClass(err error) string {
	s := err.Error()
	switch {
	case errors.Is(err, driver.ErrUnknownOutcome):
		if i := strings.LastIndex(s, ": "); i >= 0 {
			return "unknown: " + s[i+2:]
		}
		return "unknown"
	}
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}
