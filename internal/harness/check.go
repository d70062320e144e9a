package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// History is one worker process's history.
type History struct {
	File   string
	Worker int // the worker slot
	Owner  string
	PID    int
	Unsafe bool
	TTL    time.Duration
	Events []Event
	Gone   *Event // when the orchestrator reaped the process
	Torn   int    // lines that could not be parsed (a write cut by a kill)
}

// ReadHistory reads one history file.
func ReadHistory(path string) (*History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := &History{File: path}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			h.Torn++
			continue
		}
		switch e.Ev {
		case EvStart:
			h.Owner, h.PID, h.Worker, h.TTL, h.Unsafe = e.Owner, e.PID, e.Worker, time.Duration(e.TTL), e.Unsafe
		case EvGone:
			g := e
			h.Gone = &g
			continue
		}
		h.Events = append(h.Events, e)
	}
	return h, sc.Err()
}

// ReadHistories reads every *.jsonl file in dir, sorted by name.
func ReadHistories(dir string) ([]*History, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var hs []*History
	for _, n := range names {
		h, err := ReadHistory(n)
		if err != nil {
			return nil, fmt.Errorf("harness: %s: %w", n, err)
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// Fault is one injected fault, as the orchestrator records it in
// faults.jsonl.
type Fault struct {
	Kind   string `json:"kind"`
	Start  int64  `json:"start"`           // CLOCK_MONOTONIC ns
	End    int64  `json:"end"`             // when it was healed (Start for instantaneous faults)
	Target string `json:"target"`          // "worker 3 (pid 123)", "node 2", "store"
	Holder bool   `json:"holder"`          // the target worker held the lease
	Token  uint64 `json:"token,omitempty"` // its token
	Detail string `json:"detail,omitempty"`
}

// ReadFaults reads a faults.jsonl file; a missing file is no faults.
func ReadFaults(path string) ([]Fault, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var fs []Fault
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var f Fault
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			return nil, fmt.Errorf("harness: %s: %w", path, err)
		}
		fs = append(fs, f)
	}
	return fs, nil
}

// Tenure is one trusted hold of the lease by one worker: from the answer of
// the acquire that granted it until the worker stopped trusting it.
type Tenure struct {
	File     string
	Owner    string
	Token    uint64
	Send     int64   // the granting acquire was sent
	Reply    int64   // and answered
	Deadline int64   // the last deadline recorded
	Release  int64   // the worker began releasing (0: it did not)
	Released bool    // the store confirmed the release
	Steps    []int64 // work steps
	End      int64   // end of trust: min(Deadline, Release), extended to the last step
	Ended    string  // released, lost, gone, exit, running
}

// Violation is one broken invariant.
type Violation struct {
	Kind   string `json:"kind"` // exclusion-work, exclusion-trust, token-order, work-after-deadline, linearizability, history
	Detail string `json:"detail"`
}

// Report is the checker's verdict over one run.
type Report struct {
	Store      string `json:"store"`
	Seed       uint64 `json:"seed"`
	Workers    int    `json:"workers"`
	TTL        string `json:"ttl"`
	Duration   string `json:"duration"`
	Unsafe     bool   `json:"unsafe,omitempty"`
	Processes  int    `json:"processes"`
	Grants     int    `json:"grants"`
	Handoffs   int    `json:"handoffs"`
	WorkSteps  int    `json:"work_steps"`
	StoreCalls int    `json:"store_calls"`
	// StoreCallsFailed counts the store calls answered with an error or an
	// unknown outcome (not "held" or "lost", which are answers), of which
	// StoreCallsNoHosts with the driver's "no hosts available";
	// LongestFailStreak is the longest run of consecutive failed calls in
	// one worker, from the first one's send to the last one's answer.
	StoreCallsFailed  int                   `json:"store_calls_failed"`
	StoreCallsNoHosts int                   `json:"store_calls_no_hosts,omitempty"`
	LongestFailStreak string                `json:"longest_failed_call_streak"`
	Faults            map[string]int        `json:"faults"`
	Violations        int                   `json:"violations"`
	ViolationsByKind  map[string]int        `json:"violations_by_kind"`
	Examples          []Violation           `json:"examples,omitempty"`
	InflightOverlaps  int                   `json:"inflight_overlaps"`
	LongestFreeGap    string                `json:"longest_free_gap_while_waiting"`
	LongestFreeGapNs  int64                 `json:"longest_free_gap_while_waiting_ns"`
	LongestGapFaults  []string              `json:"longest_gap_during_faults,omitempty"`
	LongestGapNoFault string                `json:"longest_free_gap_without_fault"`
	TakeoverAfterKill Stat                  `json:"takeover_after_kill"`
	HandoffAfterFree  Stat                  `json:"handoff_after_release"`
	LivenessBound     string                `json:"liveness_bound"`
	LivenessExceeded  int                   `json:"liveness_exceeded"`
	Linearizability   LinearizabilityResult `json:"linearizability"`
	Missing           []string              `json:"missing_faults,omitempty"`
}

// Stat summarises durations.
type Stat struct {
	N    int    `json:"n"`
	Max  string `json:"max"`
	Mean string `json:"mean"`
	max  time.Duration
	sum  time.Duration
}

func (s *Stat) add(d time.Duration) {
	s.N++
	s.sum += d
	s.max = max(s.max, d)
	s.Max = s.max.Round(time.Millisecond).String()
	s.Mean = (s.sum / time.Duration(s.N)).Round(time.Millisecond).String()
}

const maxExamples = 20

func (r *Report) violate(kind, format string, args ...any) {
	r.Violations++
	if r.ViolationsByKind == nil {
		r.ViolationsByKind = map[string]int{}
	}
	r.ViolationsByKind[kind]++
	if r.ViolationsByKind[kind] <= maxExamples/4 && len(r.Examples) < maxExamples {
		r.Examples = append(r.Examples, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
}

// Tenures extracts the trusted holds from the histories, sorted by the
// answer of their granting acquire (the order in which the store granted
// them: a trusted grant was answered before its deadline, hence before the
// store could grant the resource to anyone else).
func Tenures(hs []*History) []*Tenure {
	var out []*Tenure
	for _, h := range hs {
		var cur *Tenure
		finish := func(how string) {
			if cur == nil {
				return
			}
			if cur.Ended == "" {
				cur.Ended = how
			}
			cur.End = cur.Deadline
			if cur.Release != 0 && cur.Release < cur.End {
				cur.End = cur.Release
			}
			if n := len(cur.Steps); n > 0 && cur.Steps[n-1] > cur.End {
				cur.End = cur.Steps[n-1]
			}
			out = append(out, cur)
			cur = nil
		}
		for _, e := range h.Events {
			switch e.Ev {
			case EvGrant:
				finish("regranted")
				cur = &Tenure{File: h.File, Owner: h.Owner, Token: e.Token, Send: e.Send, Reply: e.Reply, Deadline: e.Deadline}
			case EvDeadline:
				if cur != nil && e.Token == cur.Token {
					cur.Deadline = max(cur.Deadline, e.Deadline)
				}
			case EvStep:
				if cur != nil {
					cur.Steps = append(cur.Steps, e.T)
					cur.Deadline = max(cur.Deadline, e.Deadline)
				}
			case EvLost:
				if cur != nil {
					cur.Ended = "lost"
				}
			case EvRelease:
				if cur != nil && cur.Release == 0 {
					cur.Release = e.T
				}
			case EvReleased:
				if cur != nil {
					cur.Released = e.Err == ""
					if !h.Unsafe || cur.Released {
						finish("released")
					}
				}
			case EvExit:
				finish("exit")
			}
		}
		if cur != nil {
			if h.Gone != nil {
				finish("gone")
			} else {
				finish("running")
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Reply < out[j].Reply })
	return out
}

// Options configure Check.
type Options struct {
	Profile Profile
	// TTL is the workers' lease TTL (default: the largest in the
	// histories).
	TTL time.Duration
	// RetryInterval is the workers' largest backoff delay; the liveness
	// bound after a kill is TTL plus this (plus SlackLiveness).
	RetryInterval time.Duration
	// LinearizabilityTimeout bounds porcupine (0: no limit).
	LinearizabilityTimeout time.Duration
	// VisualPath is where porcupine's visualization of an illegal history
	// goes ("" for nowhere).
	VisualPath string
	// SkipLinearizability skips porcupine.
	SkipLinearizability bool
}

// SlackLiveness is added to liveness bounds for the store's own latency and
// the scheduling of processes on a loaded host.
const SlackLiveness = 500 * time.Millisecond

// Check verifies the invariants over the histories and faults of one run.
// The report's Violations must be 0.
func Check(hs []*History, faults []Fault, opt Options) *Report {
	r := &Report{Store: opt.Profile.Name, Faults: map[string]int{}, ViolationsByKind: map[string]int{}, Processes: len(hs)}
	for _, f := range faults {
		r.Faults[f.Kind]++
	}
	ttl := opt.TTL
	var longestStreak time.Duration
	for _, h := range hs {
		if opt.TTL == 0 {
			ttl = max(ttl, h.TTL)
		}
		if h.Torn > 0 {
			// A line cut by a kill is expected at most at the end; report it.
			r.violate("history", "%s: %d unreadable lines", h.File, h.Torn)
		}
		sent := map[int64]int64{}
		var streakFrom, streakTo int64
		for _, e := range h.Events {
			switch e.Ev {
			case EvCall:
				r.StoreCalls++
				sent[e.ID] = e.T
			case EvReturn:
				if e.Res != ResError && e.Res != ResUnknown {
					streakFrom = 0
					continue
				}
				r.StoreCallsFailed++
				if strings.Contains(e.Err, "no hosts available") {
					r.StoreCallsNoHosts++
				}
				if streakFrom == 0 {
					streakFrom = sent[e.ID]
				}
				streakTo = e.T
				longestStreak = max(longestStreak, time.Duration(streakTo-streakFrom))
			case EvStep:
				r.WorkSteps++
			}
		}
	}
	r.LongestFailStreak = longestStreak.Round(time.Millisecond).String()
	ts := Tenures(hs)
	r.Grants = len(ts)

	// (2) Fencing tokens strictly increase in grant order; a re-grant of the
	// same token to the same owner continues its grant.
	for i := 1; i < len(ts); i++ {
		a, b := ts[i-1], ts[i]
		if b.Owner != a.Owner {
			r.Handoffs++
		}
		if b.Token == a.Token && b.Owner == a.Owner {
			continue
		}
		if b.Token <= a.Token {
			r.violate("token-order", "token %d granted to %s (answered at %d) after token %d granted to %s (answered at %d)",
				b.Token, b.Owner, b.Reply, a.Token, a.Owner, a.Reply)
		}
	}

	// (3) No work after the deadline: each step was stamped before a check
	// that passed, so it must lie inside the trust window.
	for _, h := range hs {
		var tok uint64
		var reply int64
		for _, e := range h.Events {
			switch e.Ev {
			case EvGrant:
				tok, reply = e.Token, e.Reply
			case EvStep:
				if e.Token != tok {
					r.violate("history", "%s: step with token %d while holding %d", h.File, e.Token, tok)
				}
				if e.T >= e.Deadline+int64(MonoOfError) {
					r.violate("work-after-deadline", "%s: token %d: work step at %d, %v after the deadline %d",
						h.File, e.Token, e.T, time.Duration(e.T-e.Deadline), e.Deadline)
				}
				if e.T < reply {
					r.violate("work-after-deadline", "%s: token %d: work step at %d before the grant's answer at %d", h.File, e.Token, e.T, reply)
				}
			}
		}
	}

	// (1) Mutual exclusion of work intervals and of trust windows across
	// owners.
	type iv struct {
		t          *Tenure
		start, end int64
	}
	overlaps := func(ivs []iv, each func(a, b iv)) {
		sort.Slice(ivs, func(i, j int) bool { return ivs[i].start < ivs[j].start })
		var active []iv
		for _, x := range ivs {
			kept := active[:0]
			for _, a := range active {
				if a.end >= x.start {
					kept = append(kept, a)
				}
			}
			active = kept
			for _, a := range active {
				if a.t.Owner != x.t.Owner {
					each(a, x)
				}
			}
			active = append(active, x)
		}
	}
	var work, trust, inflight []iv
	for _, t := range ts {
		if n := len(t.Steps); n > 0 {
			work = append(work, iv{t, t.Steps[0], t.Steps[n-1]})
		}
		trust = append(trust, iv{t, t.Reply, t.End})
		inflight = append(inflight, iv{t, t.Send, t.End})
	}
	overlaps(work, func(a, b iv) {
		r.violate("exclusion-work", "work of %s (token %d) in [%d, %d] overlaps work of %s (token %d) in [%d, %d] by %v",
			a.t.Owner, a.t.Token, a.start, a.end, b.t.Owner, b.t.Token, b.start, b.end, time.Duration(min(a.end, b.end)-b.start))
	})
	overlaps(trust, func(a, b iv) {
		r.violate("exclusion-trust", "trust window of %s (token %d) [%d, %d] overlaps that of %s (token %d) [%d, %d] by %v",
			a.t.Owner, a.t.Token, a.start, a.end, b.t.Owner, b.t.Token, b.start, b.end, time.Duration(min(a.end, b.end)-b.start))
	})
	// Windows counted from the acquire's send time may overlap without
	// harm: an acquire sent before the previous holder's deadline can be
	// applied after the store expired that lease. Counted, not a
	// violation (docs/safety.md).
	overlaps(inflight, func(a, b iv) { r.InflightOverlaps++ })

	// (4) Liveness.
	r.liveness(hs, ts, faults, ttl, opt)

	if !opt.SkipLinearizability {
		r.Linearizability = opt.Profile.CheckLinearizable(hs, opt.LinearizabilityTimeout, opt.VisualPath)
		if r.Linearizability.Result == "Illegal" {
			r.violate("linearizability", "the store operations are not linearizable against the %s lease model (%d operations, %d with unknown outcome)",
				opt.Profile.Name, r.Linearizability.Operations, r.Linearizability.Pending)
		}
	}
	return r
}

type span struct{ start, end int64 }

// union merges spans.
func union(ss []span) []span {
	sort.Slice(ss, func(i, j int) bool { return ss[i].start < ss[j].start })
	var out []span
	for _, s := range ss {
		if s.end < s.start {
			continue
		}
		if n := len(out); n > 0 && s.start <= out[n-1].end {
			out[n-1].end = max(out[n-1].end, s.end)
			continue
		}
		out = append(out, s)
	}
	return out
}

// intersect returns the parts of a that lie in b (both unions).
func intersect(a, b []span) []span {
	var out []span
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		s, e := max(a[i].start, b[j].start), min(a[i].end, b[j].end)
		if s < e {
			out = append(out, span{s, e})
		}
		if a[i].end < b[j].end {
			i++
		} else {
			j++
		}
	}
	return out
}

// complement returns the parts of [from, to] not covered by u (a union).
func complement(u []span, from, to int64) []span {
	var out []span
	cur := from
	for _, s := range u {
		if s.start > cur {
			out = append(out, span{cur, min(s.start, to)})
		}
		cur = max(cur, s.end)
		if cur >= to {
			break
		}
	}
	if cur < to {
		out = append(out, span{cur, to})
	}
	return out
}

func (r *Report) liveness(hs []*History, ts []*Tenure, faults []Fault, ttl time.Duration, opt Options) {
	// Waiting: from the start of a blocking Acquire until it returned, or
	// the process ended.
	var waits []span
	var from, to int64 = Never, 0
	for _, h := range hs {
		var w int64
		for _, e := range h.Events {
			from, to = min(from, e.T), max(to, e.T)
			switch e.Ev {
			case EvWait:
				w = e.T
			case EvGrant, EvAcqErr, EvExit:
				if w != 0 {
					waits = append(waits, span{w, e.T})
					w = 0
				}
			}
		}
		if w != 0 && h.Gone != nil {
			waits = append(waits, span{w, h.Gone.T})
		}
	}
	var held []span
	for _, t := range ts {
		held = append(held, span{t.Reply, t.End})
	}
	held = union(held)
	gaps := intersect(complement(held, from, to), union(waits))
	var faultSpans []span
	for _, f := range faults {
		faultSpans = append(faultSpans, span{f.Start, max(f.End, f.Start)})
	}
	var longest, longestQuiet span
	for _, g := range gaps {
		if g.end-g.start > longest.end-longest.start {
			longest = g
		}
		// A gap is "without fault" when no fault was active from one TTL
		// before it (a fault ending just before still delays recovery).
		quiet := true
		for _, f := range faultSpans {
			if f.start <= g.end && f.end+int64(ttl) >= g.start {
				quiet = false
				break
			}
		}
		if quiet && g.end-g.start > longestQuiet.end-longestQuiet.start {
			longestQuiet = g
		}
	}
	r.LongestFreeGapNs = longest.end - longest.start
	r.LongestFreeGap = time.Duration(r.LongestFreeGapNs).Round(time.Millisecond).String()
	r.LongestGapNoFault = time.Duration(longestQuiet.end - longestQuiet.start).Round(time.Millisecond).String()
	for _, f := range faults {
		if f.Start <= longest.end && max(f.End, f.Start)+int64(ttl) >= longest.start && longest.end > longest.start {
			r.LongestGapFaults = append(r.LongestGapFaults, f.Kind)
		}
	}

	// Takeover after the holder was killed: until the next grant's answer.
	// Bound: the store expires the lease within TTL of the holder's last
	// write, and a waiter retries within the retry interval.
	bound := opt.Profile.MaxTTL(ttl) + opt.RetryInterval + SlackLiveness
	r.LivenessBound = fmt.Sprintf("kill: store TTL+retry+%v = %v; release: retry+%v = %v", SlackLiveness, bound, SlackLiveness, opt.RetryInterval+SlackLiveness)
	nextGrant := func(after int64) (int64, string, bool) {
		i := sort.Search(len(ts), func(i int) bool { return ts[i].Reply > after })
		if i == len(ts) {
			return 0, "", false
		}
		return ts[i].Reply, ts[i].Owner, true
	}
	otherFault := func(self Fault, s, e int64) bool {
		for _, f := range faults {
			if f != self && f.Start <= e && max(f.End, f.Start)+int64(ttl) >= s {
				return true
			}
		}
		return false
	}
	waiting := union(waits)
	someoneWaits := func(t int64) bool {
		for _, w := range waiting {
			if w.start <= t && t <= w.end {
				return true
			}
		}
		return false
	}
	for _, f := range faults {
		if f.Kind != "kill" || !f.Holder {
			continue
		}
		g, _, ok := nextGrant(f.Start)
		if !ok {
			continue
		}
		d := time.Duration(g - f.Start)
		r.TakeoverAfterKill.add(d)
		if d > bound && !otherFault(f, f.Start, g) {
			r.LivenessExceeded++
		}
	}
	// Hand-off after a release: until another owner's grant was answered,
	// when someone was waiting (a releaser that takes the lease again first
	// did not leave it free).
	for _, h := range hs {
		for _, e := range h.Events {
			if e.Ev != EvReleased || e.Err != "" || !someoneWaits(e.T) {
				continue
			}
			g, owner, ok := nextGrant(e.T)
			if !ok || owner == h.Owner {
				continue
			}
			d := time.Duration(g - e.T)
			r.HandoffAfterFree.add(d)
			if d > opt.RetryInterval+SlackLiveness && !otherFault(Fault{}, e.T, g) {
				r.LivenessExceeded++
			}
		}
	}
}

// Summary is the one-line summary of a report.
func (r *Report) Summary() string {
	var kinds []string
	for k := range r.Faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var fs []string
	for _, k := range kinds {
		fs = append(fs, fmt.Sprintf("%s:%d", k, r.Faults[k]))
	}
	if len(fs) == 0 {
		fs = []string{"none"}
	}
	s := fmt.Sprintf("store=%s seed=%d duration=%s workers=%d ttl=%s handoffs=%d grants=%d faults=%s violations=%d longest-free-gap-while-waiting=%s linearizable=%s ops=%d failed-calls=%d",
		r.Store, r.Seed, r.Duration, r.Workers, r.TTL, r.Handoffs, r.Grants, strings.Join(fs, ","), r.Violations, r.LongestFreeGap,
		r.Linearizability.Result, r.Linearizability.Operations, r.StoreCallsFailed)
	if r.Violations > 0 {
		var vs []string
		for k, n := range r.ViolationsByKind {
			vs = append(vs, fmt.Sprintf("%s:%d", k, n))
		}
		sort.Strings(vs)
		s += " violation-kinds=" + strings.Join(vs, ",")
	}
	if r.Unsafe {
		s += " client=UNSAFE"
	}
	if len(r.Missing) > 0 {
		s += " missing-faults=" + strings.Join(r.Missing, ",")
	}
	return s
}
