package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// History is one worker process's history (or the operator's: the
// deletions of key-delete and store-reset).
type History struct {
	File     string
	Worker   int    // the worker slot
	Owner    string // the Locker's owner string (its grants' are Owner + ".N")
	PID      int
	Unsafe   bool
	TTL      time.Duration
	Workload string // lease, reacquire or semaphore
	Sem      string // the semaphore's resource (semaphore workload)
	Slots    int    // its number of slots
	RW       string // the shared/exclusive lock's resource (rwlock workload)
	Events   []Event
	Gone     *Event // when the orchestrator reaped the process
	Torn     int    // lines that could not be parsed (a write cut by a kill)
}

// Operator reports whether h is the operator's history.
func (h *History) Operator() bool { return h.Owner == operatorOwner && h.Worker == -1 }

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
			h.Workload, h.Sem, h.Slots, h.RW = e.Workload, e.Sem, e.Slots, e.RW
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
	Kind     string `json:"kind"`
	Start    int64  `json:"start"`              // CLOCK_MONOTONIC ns
	End      int64  `json:"end"`                // when it was healed (Start for instantaneous faults)
	Target   string `json:"target"`             // "worker 3 (pid 123)", "node 2", "store"
	Holder   bool   `json:"holder"`             // the target worker held a lease
	Token    uint64 `json:"token,omitempty"`    // its token
	Resource string `json:"resource,omitempty"` // and its name
	Detail   string `json:"detail,omitempty"`
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

// Tenure is one trusted hold of a lease by one worker: one grant, from the
// answer of the acquire that granted it until the worker stopped trusting
// it.
type Tenure struct {
	File     string
	Resource string // the lease's name ("" in histories of older workers)
	Owner    string // the grant's owner string
	Process  string // the worker's (its Locker's) owner string
	Sem      string // for a semaphore slot: the semaphore's resource
	Slots    int    // and its number of slots
	Slot     int    // and the slot's number
	RW       string // for a shared/exclusive lock's holder: the lock's resource
	Mode     string // and its mode, shared or exclusive
	Granted  int64  // when Acquire returned the lease (an exclusive holder trusts it from then: see rwHolders)
	Token    uint64
	Send     int64   // the granting acquire was sent
	Reply    int64   // and answered
	Deadline int64   // the last deadline recorded
	Release  int64   // the worker began releasing (0: it did not)
	Released bool    // the store confirmed the release
	EndSeen  int64   // the worker saw the lease end (lost or released; 0: it did not)
	Steps    []int64 // work steps
	End      int64   // end of trust: min(Deadline, Release, EndSeen), extended to the last step
	Ended    string  // released, lost, gone, exit, running, held
	// HeldUntil, for a round that ended with a confirmed ReleaseAfter (a
	// hold), is the earliest the store may free the resource: the hold's
	// length after ReleaseAfter was called; HeldConfirmed is when it
	// returned.
	HeldUntil, HeldConfirmed int64
}

// group is what a tenure's exclusion is counted in: the semaphore for a
// slot (at most Slots holders), otherwise the resource (one holder).
func (t *Tenure) group() (string, int) {
	if t.Sem != "" {
		return "semaphore " + t.Sem, t.Slots
	}
	return t.Resource, 1
}

// Violation is one broken invariant.
type Violation struct {
	Kind   string `json:"kind"` // exclusion-work, exclusion-trust, semaphore-trust, semaphore-work, rw-trust, rw-work, rw-token-order, token-order, work-after-deadline, linearizability, history
	Detail string `json:"detail"`
}

// Report is the checker's verdict over one run.
type Report struct {
	Store       string `json:"store"`
	Seed        uint64 `json:"seed"`
	Workers     int    `json:"workers"`
	TTL         string `json:"ttl"`
	Duration    string `json:"duration"`
	Unsafe      bool   `json:"unsafe,omitempty"`
	Workload    string `json:"workload,omitempty"`
	SharedOwner bool   `json:"shared_owner,omitempty"`
	SemWorkers  int    `json:"semaphore_workers,omitempty"`
	Slots       int    `json:"slots,omitempty"`
	Processes   int    `json:"processes"`
	Grants      int    `json:"grants"`
	Handoffs    int    `json:"handoffs"` // consecutive grants of a lease (or slot) to different processes
	// SlotGrants and SlotHandoffs count those of semaphore slots, which
	// Grants and Handoffs include.
	SlotGrants   int `json:"slot_grants,omitempty"`
	SlotHandoffs int `json:"slot_handoffs,omitempty"`
	// RWWorkers hold a shared/exclusive lock; SharedGrants and
	// ExclusiveGrants count their grants by mode (Grants includes them),
	// MostShared the most shared holders that trusted at once.
	RWWorkers       int `json:"rw_workers,omitempty"`
	SharedGrants    int `json:"shared_grants,omitempty"`
	ExclusiveGrants int `json:"exclusive_grants,omitempty"`
	MostShared      int `json:"most_shared_at_once,omitempty"`
	// Regrants counts grants to a process that had seen its previous lease
	// of the same resource (or semaphore) lost, in the same Locker.
	Regrants   int `json:"regrants_after_loss"`
	WorkSteps  int `json:"work_steps"`
	StoreCalls int `json:"store_calls"`
	// StoreCallsFailed counts the store calls answered with an error or an
	// unknown outcome (not "held" or "lost", which are answers), of which
	// StoreCallsNoHosts with the driver's "no hosts available";
	// LongestFailStreak is the longest run of consecutive failed calls in
	// one worker, from the first one's send to the last one's answer.
	StoreCallsFailed  int            `json:"store_calls_failed"`
	StoreCallsNoHosts int            `json:"store_calls_no_hosts,omitempty"`
	LongestFailStreak string         `json:"longest_failed_call_streak"`
	Faults            map[string]int `json:"faults"`
	Violations        int            `json:"violations"`
	ViolationsByKind  map[string]int `json:"violations_by_kind"`
	Examples          []Violation    `json:"examples,omitempty"`
	// OutsideContract counts, per fault kind of OutsideContract, the
	// overlaps of trusted holds that such a fault caused (not violations;
	// the reasons are in OutsideReasons).
	OutsideContract   map[string]int        `json:"outside_contract,omitempty"`
	OutsideReasons    map[string]string     `json:"outside_contract_reasons,omitempty"`
	OutsideExamples   []Violation           `json:"outside_contract_examples,omitempty"`
	InflightOverlaps  int                   `json:"inflight_overlaps"`
	LongestFreeGap    string                `json:"longest_free_gap_while_waiting"`
	LongestFreeGapNs  int64                 `json:"longest_free_gap_while_waiting_ns"`
	LongestGapFaults  []string              `json:"longest_gap_during_faults,omitempty"`
	LongestGapNoFault string                `json:"longest_free_gap_without_fault"`
	TakeoverAfterKill Stat                  `json:"takeover_after_kill"`
	HandoffAfterFree  Stat                  `json:"handoff_after_release"`
	WakeUp            Dist                  `json:"wakeup_after_release"`
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

// Dist is a distribution of durations, with how many passed a bound.
type Dist struct {
	N        int    `json:"n"`
	P50      string `json:"p50"`
	P90      string `json:"p90"`
	P99      string `json:"p99"`
	Max      string `json:"max"`
	Bound    string `json:"bound"`
	Over     int    `json:"over_bound"`
	Excluded int    `json:"excluded_for_faults"`
	ds       []time.Duration
}

func (d *Dist) add(x time.Duration) { d.ds = append(d.ds, x); d.N++ }

// finish computes the percentiles.
func (d *Dist) finish() {
	if len(d.ds) == 0 {
		return
	}
	slices.Sort(d.ds)
	at := func(p int) string {
		return d.ds[min(len(d.ds)-1, len(d.ds)*p/100)].Round(time.Millisecond).String()
	}
	d.P50, d.P90, d.P99, d.Max = at(50), at(90), at(99), d.ds[len(d.ds)-1].Round(time.Millisecond).String()
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
		if h.Operator() {
			continue
		}
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
			if cur.EndSeen != 0 && cur.EndSeen < cur.End {
				cur.End = cur.EndSeen
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
				owner := e.Owner
				if owner == "" { // a worker from before grant identity
					owner = h.Owner
				}
				cur = &Tenure{File: h.File, Resource: e.Resource, Owner: owner, Process: h.Owner, Sem: e.Sem, Slots: e.Slots, Slot: e.Slot,
					RW: e.RW, Mode: e.Mode, Granted: e.T, Token: e.Token, Send: e.Send, Reply: e.Reply, Deadline: e.Deadline}
			case EvDeadline:
				if cur != nil && e.Token == cur.Token {
					cur.Deadline = max(cur.Deadline, e.Deadline)
				}
			case EvStep:
				if cur != nil {
					cur.Steps = append(cur.Steps, e.T)
					cur.Deadline = max(cur.Deadline, e.Deadline)
				}
			case EvEnded:
				if cur != nil && e.Token == cur.Token && cur.EndSeen == 0 {
					cur.EndSeen = e.T
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
			case EvHold:
				if cur != nil {
					if e.Err == "" && cur.Release != 0 {
						cur.HeldUntil, cur.HeldConfirmed = cur.Release+e.TTL, e.T
					}
					finish("held")
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
	// LinearizabilityMemory bounds the heap during porcupine's check, in
	// bytes (0: DefaultLinearizabilityMemory; below 0: no limit).
	LinearizabilityMemory int64
	// VisualPath is where porcupine's visualization of an illegal history
	// goes ("" for nowhere).
	VisualPath string
	// SkipLinearizability skips porcupine.
	SkipLinearizability bool
}

// SlackLiveness is added to liveness bounds for the store's own latency and
// the scheduling of processes on a loaded host.
const SlackLiveness = 500 * time.Millisecond

// Check verifies the invariants over the histories and faults of one run,
// one method of Report per invariant (docs/safety.md numbers them). The
// report's Violations must be 0.
func Check(hs []*History, faults []Fault, opt Options) *Report {
	r := &Report{Store: opt.Profile.Name, Faults: map[string]int{}, ViolationsByKind: map[string]int{}}
	for _, f := range faults {
		r.Faults[f.Kind]++
	}
	ttl := r.countCalls(hs, opt.TTL)
	ts := Tenures(hs)
	r.Grants = len(ts)
	byRes, resources := r.byLease(ts)
	ex := exclusion{deletions: deletionsOf(faults), ttl: ttl}

	r.tokenOrder(byRes, resources)  // (2)
	r.countRegrants(hs)             // the reacquire workload's grants after a loss
	r.workInWindow(hs)              // (3)
	for _, res := range resources { // (1)
		r.exclusion(res, byRes[res], ex)
		r.holds(res, byRes[res], ex.deletions)
	}
	r.semaphoreHolders(ts, ex.deletions, ex.outside) // (5)
	r.rwHolders(ts, ex.deletions, ex.outside)        // (6)
	r.liveness(hs, ts, faults, ttl, opt)             // (4), (7)
	if !opt.SkipLinearizability {
		r.linearizable(hs, opt)
	}
	return r
}

// countCalls counts the processes, store calls, failed calls and work
// steps of hs, and the longest run of failed calls of one process; a torn
// history line is a violation. It returns the TTL to check with: ttl, or
// when it is 0 the longest TTL of the histories.
func (r *Report) countCalls(hs []*History, ttl time.Duration) time.Duration {
	fixed := ttl != 0
	var longestStreak time.Duration
	for _, h := range hs {
		if h.Operator() {
			continue
		}
		r.Processes++
		if !fixed {
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
	return ttl
}

// byLease returns the holds of each lease (each semaphore slot) in grant
// order, and the leases' names sorted; it counts the slot grants.
func (r *Report) byLease(ts []*Tenure) (map[string][]*Tenure, []string) {
	byRes := map[string][]*Tenure{}
	var resources []string
	for _, t := range ts {
		if _, ok := byRes[t.Resource]; !ok {
			resources = append(resources, t.Resource)
		}
		byRes[t.Resource] = append(byRes[t.Resource], t)
		if t.Sem != "" {
			r.SlotGrants++
		}
	}
	sort.Strings(resources)
	return byRes, resources
}

// tokenOrder checks invariant (2): fencing tokens strictly increase in
// grant order, per lease. Every grant is a grant of its own (design.md),
// so a token granted again, even to the same Locker, is a violation. It
// also counts the hand-offs between processes.
func (r *Report) tokenOrder(byRes map[string][]*Tenure, resources []string) {
	for _, res := range resources {
		rts := byRes[res]
		for i := 1; i < len(rts); i++ {
			a, b := rts[i-1], rts[i]
			if b.Process != a.Process {
				r.Handoffs++
				if b.Sem != "" {
					r.SlotHandoffs++
				}
			}
			if b.Token <= a.Token {
				r.violate("token-order", "%s: token %d granted to %s (answered at %d) after token %d granted to %s (answered at %d)",
					resName(res), b.Token, b.Owner, b.Reply, a.Token, a.Owner, a.Reply)
			}
		}
	}
}

// countRegrants counts grants after a loss seen by the same process (the
// reacquire workload's case).
func (r *Report) countRegrants(hs []*History) {
	for _, h := range hs {
		lostIn := map[string]bool{}
		var res string
		for _, e := range h.Events {
			switch e.Ev {
			case EvGrant:
				g := e.Resource
				if e.Sem != "" {
					g = e.Sem
				}
				if lostIn[g] {
					r.Regrants++
				}
				lostIn[g], res = false, g
			case EvLost:
				lostIn[res] = true
			}
		}
	}
}

// workInWindow checks invariant (3), no work after the deadline: each step
// was stamped before a check that passed, so it must lie inside the trust
// window (after the grant's answer, before the deadline).
func (r *Report) workInWindow(hs []*History) {
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
}

// deletionsOf returns the faults outside the contract (an operator's
// deletion of the store's data, OutsideContract).
func deletionsOf(faults []Fault) []Fault {
	var deletions []Fault
	for _, f := range faults {
		if _, ok := OutsideContract[f.Kind]; ok {
			deletions = append(deletions, f)
		}
	}
	return deletions
}

// exclusion is what the overlap checks need to tell an overlap that a
// deletion of the store's data caused (counted apart) from a violation.
type exclusion struct {
	deletions []Fault
	ttl       time.Duration
}

// outside returns the kind of the deletion that explains an overlap of a
// hold granted before it with one granted after it, within a TTL of it
// (the earlier holder may trust its deleted lease until its next renewal,
// at most its deadline, which a renewal confirmed before the deletion set
// less than a TTL after it), or "". "Before" counts from the earlier
// grant's send: a deletion of several keys (every lease of the run) may
// delete a grant applied between two of its commands, whose answer comes
// after the deletion's end.
//
// Either hold may be the one granted before: the trust of a shared/exclusive
// lock's exclusive holder begins once the shared holders are gone, after
// the grant of its lease on the resource, so the hold that begins first
// may be the one granted after the deletion.
func (x exclusion) outside(a, b *Tenure, end int64) string {
	for _, f := range x.deletions {
		across := a.Send <= f.End && b.Reply >= f.Start || b.Send <= f.End && a.Reply >= f.Start
		if across && end <= f.End+int64(x.ttl) {
			return f.Kind
		}
	}
	return ""
}

// interval is one hold's span of some kind (work, trust, in flight).
type interval struct {
	t          *Tenure
	start, end int64
}

// overlaps calls each for every pair of intervals of different owners that
// overlap, the earlier-starting first.
func overlaps(ivs []interval, each func(a, b interval)) {
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].start < ivs[j].start })
	var active []interval
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

// exclusion checks invariant (1) on one lease: no two holders' work
// intervals overlap, nor their trust windows. An overlap that a deletion
// caused is counted apart (OutsideContract). Windows counted from the
// acquire's send may overlap without harm (an acquire sent before the
// previous holder's deadline can be applied after the store expired that
// lease): counted, not a violation (docs/safety.md).
func (r *Report) exclusion(res string, holds []*Tenure, x exclusion) {
	var work, trust, inflight []interval
	for _, t := range holds {
		if n := len(t.Steps); n > 0 {
			work = append(work, interval{t, t.Steps[0], t.Steps[n-1]})
		}
		trust = append(trust, interval{t, t.Reply, t.End})
		inflight = append(inflight, interval{t, t.Send, t.End})
	}
	overlaps(work, func(a, b interval) {
		end := min(a.end, b.end)
		if k := x.outside(a.t, b.t, end); k != "" {
			r.outsideContract(k, "%s: work of %s (token %d) overlaps work of %s (token %d) by %v", resName(res), a.t.Owner, a.t.Token, b.t.Owner, b.t.Token, time.Duration(end-b.start))
			return
		}
		r.violate("exclusion-work", "%s: work of %s (token %d) in [%d, %d] overlaps work of %s (token %d) in [%d, %d] by %v",
			resName(res), a.t.Owner, a.t.Token, a.start, a.end, b.t.Owner, b.t.Token, b.start, b.end, time.Duration(end-b.start))
	})
	overlaps(trust, func(a, b interval) {
		end := min(a.end, b.end)
		if k := x.outside(a.t, b.t, end); k != "" {
			r.outsideContract(k, "%s: trust window of %s (token %d) overlaps that of %s (token %d) by %v", resName(res), a.t.Owner, a.t.Token, b.t.Owner, b.t.Token, time.Duration(end-b.start))
			return
		}
		r.violate("exclusion-trust", "%s: trust window of %s (token %d) [%d, %d] overlaps that of %s (token %d) [%d, %d] by %v",
			resName(res), a.t.Owner, a.t.Token, a.start, a.end, b.t.Owner, b.t.Token, b.start, b.end, time.Duration(end-b.start))
	})
	overlaps(inflight, func(a, b interval) { r.InflightOverlaps++ })
}

// holds checks that a confirmed hold (ReleaseAfter) of one lease keeps it
// from everyone else until it ends: no grant sent after the hold was
// confirmed may be answered before the hold can have ended.
func (r *Report) holds(res string, holds []*Tenure, deletions []Fault) {
	for _, h := range holds {
		if h.HeldUntil == 0 {
			continue
		}
		for _, t := range holds {
			if t.Owner == h.Owner || t.Send <= h.HeldConfirmed || t.Reply >= h.HeldUntil {
				continue
			}
			if k := deletedDuring(deletions, h.Release, t.Reply); k != "" {
				r.outsideContract(k, "%s: %s (token %d) granted inside the hold of %s (token %d)", resName(res), t.Owner, t.Token, h.Owner, h.Token)
				continue
			}
			r.violate("hold-broken", "%s: %s (token %d) granted at [%d, %d], inside the hold of %s (token %d) confirmed at %d, which lasts until %d at least",
				resName(res), t.Owner, t.Token, t.Send, t.Reply, h.Owner, h.Token, h.HeldConfirmed, h.HeldUntil)
		}
	}
}

// linearizable checks the store operations of hs against the profile's
// lease model with porcupine.
func (r *Report) linearizable(hs []*History, opt Options) {
	r.Linearizability = opt.Profile.CheckLinearizable(hs, opt.LinearizabilityTimeout, opt.LinearizabilityMemory, opt.VisualPath)
	if r.Linearizability.Result == "Illegal" {
		r.violate("linearizability", "the store operations are not linearizable against the %s lease model (%d operations, %d with unknown outcome)",
			opt.Profile.Name, r.Linearizability.Operations, r.Linearizability.Pending)
	}
}

func resName(res string) string {
	if res == "" {
		return "the lease"
	}
	return strconv.Quote(res)
}

// outsideContract counts an overlap caused by a fault kind outside the
// contract.
func (r *Report) outsideContract(kind, format string, args ...any) {
	if r.OutsideContract == nil {
		r.OutsideContract, r.OutsideReasons = map[string]int{}, map[string]string{}
	}
	r.OutsideContract[kind]++
	r.OutsideReasons[kind] = OutsideContract[kind]
	if len(r.OutsideExamples) < maxExamples/2 {
		r.OutsideExamples = append(r.OutsideExamples, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
}

// semaphoreHolders checks that no semaphore of N slots ever had more than N
// trusted holders (the sweep counts holds of every slot name of the
// semaphore, whatever number of slots its holders were started with), nor
// more than N holders working.
func (r *Report) semaphoreHolders(ts []*Tenure, deletions []Fault, outside func(a, b *Tenure, end int64) string) {
	bySem := map[string][]*Tenure{}
	var sems []string
	for _, t := range ts {
		if t.Sem == "" {
			continue
		}
		if _, ok := bySem[t.Sem]; !ok {
			sems = append(sems, t.Sem)
		}
		bySem[t.Sem] = append(bySem[t.Sem], t)
	}
	sort.Strings(sems)
	for _, sem := range sems {
		for _, kind := range []string{"semaphore-trust", "semaphore-work"} {
			active := map[semHolder]bool{}
			for _, e := range semEdges(bySem[sem], kind, deletions) {
				if !e.start {
					delete(active, e.h)
					continue
				}
				active[e.h] = true
				r.semaphoreAt(sem, kind, e, active, outside)
			}
		}
	}
}

// semHolder is a holder of a semaphore's slot: a tenure's trust window, or
// the hold that followed it (a slot kept by ReleaseAfter: from the end of
// trust until the hold's length after it was asked for): a kept slot
// counts as held.
type semHolder struct {
	t    *Tenure
	kept bool
}

// end is when h stops holding.
func (h semHolder) end() int64 {
	if h.kept {
		return h.t.HeldUntil
	}
	return h.t.End
}

// semEdge is the start or the end of a semHolder.
type semEdge struct {
	t     int64
	start bool
	h     semHolder
}

// semEdges returns the starts and ends of the holders of a semaphore's
// slots, in time order, for kind: semaphore-trust (trust windows and kept
// slots) or semaphore-work (from the first step to the last).
func semEdges(ts []*Tenure, kind string, deletions []Fault) []semEdge {
	var es []semEdge
	for _, t := range ts {
		s, e := t.Reply, t.End
		if kind == "semaphore-work" {
			if len(t.Steps) == 0 {
				continue
			}
			s, e = t.Steps[0], t.Steps[len(t.Steps)-1]
		}
		es = append(es, semEdge{s, true, semHolder{t, false}}, semEdge{e, false, semHolder{t, false}})
		if kind == "semaphore-trust" && t.HeldUntil > t.End {
			// An operator's deletion of the store's data ends the
			// hold (outside the contract, as for hold-broken).
			until := t.HeldUntil
			for _, f := range deletions {
				if f.Start <= until && f.End >= t.End {
					until = min(until, max(f.Start, t.End+1))
				}
			}
			if until > t.End+1 {
				es = append(es, semEdge{t.End + 1, true, semHolder{t, true}}, semEdge{until, false, semHolder{t, true}})
			}
		}
	}
	// Starts before ends at the same instant: touching holds count as
	// overlapping, as in the per-lease check.
	sort.Slice(es, func(i, j int) bool {
		if es[i].t != es[j].t {
			return es[i].t < es[j].t
		}
		return es[i].start && !es[j].start
	})
	return es
}

// semaphoreAt checks the holders active when the start e of a holder made
// them so: no more than the number of slots, and (for trust) no holders of
// another number of slots.
func (r *Report) semaphoreAt(sem, kind string, e semEdge, active map[semHolder]bool, outside func(a, b *Tenure, end int64) string) {
	// Every holder trusts at most its own number of slots (holders of one
	// semaphore may be started with different numbers: the marker must
	// keep them apart), so the limit is the least among the holders at
	// this instant.
	n := e.h.t.Slots
	mixed := false
	for a := range active {
		n = min(n, a.t.Slots)
		mixed = mixed || a.t.Slots != e.h.t.Slots
	}
	count := kind == "semaphore-trust" && mixed
	if len(active) <= n && !count {
		return
	}
	// Too many, or another count: outside the contract when an operator's
	// deletion explains it for one of the earlier holders.
	var others []string
	k := ""
	for a := range active {
		if a != e.h {
			what := ""
			if a.kept {
				what = ", kept"
			}
			others = append(others, fmt.Sprintf("%s (slot %d of %d, token %d%s)", a.t.Owner, a.t.Slot, a.t.Slots, a.t.Token, what))
			if k == "" {
				k = outside(a.t, e.h.t, min(a.end(), e.h.end()))
			}
		}
	}
	sort.Strings(others)
	if k != "" {
		r.outsideContract(k, "semaphore %q: %d holders at %d", sem, len(active), e.t)
		return
	}
	if len(active) > n {
		r.violate(kind, "semaphore %q of %d slots: %s (slot %d, token %d) at %d makes %d holders, with %s",
			sem, n, e.h.t.Owner, e.h.t.Slot, e.h.t.Token, e.t, len(active), strings.Join(others, ", "))
	}
	if count {
		r.violate("semaphore-count", "semaphore %q: %s holds slot %d of %d (token %d) from %d while a slot of another count is held or kept: %s",
			sem, e.h.t.Owner, e.h.t.Slot, e.h.t.Slots, e.h.t.Token, e.t, strings.Join(others, ", "))
	}
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

// histGroup and tenureGroup are the group a history's waits and a tenure's
// hold count in, for liveness: the semaphore, or the plain lease.
func histGroup(h *History) string {
	if h.RW != "" {
		return "rwlock " + h.RW
	}
	if h.Sem != "" {
		return "semaphore " + h.Sem
	}
	return "lease"
}

func tenureGroup(t *Tenure) string {
	if t.RW != "" {
		return "rwlock " + t.RW
	}
	if t.Sem != "" {
		return "semaphore " + t.Sem
	}
	return "lease"
}

// liveness checks that waiters are served: how long the lease stayed free
// while someone waited, the takeover after a holder was killed, and the
// hand-off after a release (and, through wakeUps, the wake-up after one).
func (r *Report) liveness(hs []*History, ts []*Tenure, faults []Fault, ttl time.Duration, opt Options) {
	lv := newLiveData(hs, ts, faults, ttl)
	r.freeGaps(lv)
	r.takeovers(lv, ts, opt)
	r.wakeUps(hs, faults, lv.byGroup, ttl, opt)
	r.handoffs(lv, hs, opt)
}

// liveData is what the liveness checks share: who waited when, and who
// held what, by group (histGroup, tenureGroup).
type liveData struct {
	waits    map[string][]span // waiting: from the start of a blocking Acquire until it returned, or the process ended
	from, to int64             // the first and last event
	byGroup  map[string][]*Tenure
	capacity map[string]int // the group's slots (1 for a lease)
	faults   []Fault
	ttl      time.Duration
}

func newLiveData(hs []*History, ts []*Tenure, faults []Fault, ttl time.Duration) *liveData {
	lv := &liveData{waits: map[string][]span{}, from: Never, byGroup: map[string][]*Tenure{}, capacity: map[string]int{}, faults: faults, ttl: ttl}
	for _, h := range hs {
		if !h.Operator() {
			lv.addWaits(h)
		}
	}
	for _, t := range ts {
		g := tenureGroup(t)
		lv.byGroup[g] = append(lv.byGroup[g], t)
		lv.capacity[g] = 1
		if t.Sem != "" {
			lv.capacity[g] = t.Slots
		}
	}
	return lv
}

// addWaits adds the waits of h, and widens the time range to its events.
func (lv *liveData) addWaits(h *History) {
	g := histGroup(h)
	var w int64
	for _, e := range h.Events {
		lv.from, lv.to = min(lv.from, e.T), max(lv.to, e.T)
		switch e.Ev {
		case EvWait:
			w = e.T
		case EvGrant, EvAcqErr, EvExit:
			if w != 0 {
				lv.waits[g] = append(lv.waits[g], span{w, e.T})
				w = 0
			}
		}
	}
	if w != 0 && h.Gone != nil {
		lv.waits[g] = append(lv.waits[g], span{w, h.Gone.T})
	}
}

// nextGrant returns the first grant in group g answered after after, and
// its process.
func (lv *liveData) nextGrant(g string, after int64) (int64, string, bool) {
	gts := lv.byGroup[g]
	i := sort.Search(len(gts), func(i int) bool { return gts[i].Reply > after })
	if i == len(gts) {
		return 0, "", false
	}
	return gts[i].Reply, gts[i].Process, true
}

// otherFault reports whether a fault other than self was active between s
// and e, or within one TTL before s (a fault ending just before still
// delays recovery).
func (lv *liveData) otherFault(self Fault, s, e int64) bool {
	for _, f := range lv.faults {
		if f != self && f.Start <= e && max(f.End, f.Start)+int64(lv.ttl) >= s {
			return true
		}
	}
	return false
}

// someoneWaits reports whether someone waited in group g at t.
func (lv *liveData) someoneWaits(g string, t int64) bool {
	for _, w := range lv.waits[g] {
		if w.start <= t && t <= w.end {
			return true
		}
	}
	return false
}

// freeGaps finds the longest time a group was not full while someone
// waited in it, with and without a fault near, and the faults near the
// longest.
func (r *Report) freeGaps(lv *liveData) {
	var groups []string
	for g := range lv.waits {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	var gaps []span
	for _, g := range groups {
		// Full: every slot (the one lease) trusted by someone.
		full := fullSpans(lv.byGroup[g], lv.capacity[g])
		gaps = append(gaps, intersect(complement(full, lv.from, lv.to), union(lv.waits[g]))...)
	}
	var longest, longestQuiet span
	for _, g := range gaps {
		if g.end-g.start > longest.end-longest.start {
			longest = g
		}
		// A gap is "without fault" when no fault was active from one TTL
		// before it (a fault ending just before still delays recovery).
		if !lv.otherFault(Fault{}, g.start, g.end) && g.end-g.start > longestQuiet.end-longestQuiet.start {
			longestQuiet = g
		}
	}
	r.LongestFreeGapNs = longest.end - longest.start
	r.LongestFreeGap = time.Duration(r.LongestFreeGapNs).Round(time.Millisecond).String()
	r.LongestGapNoFault = time.Duration(longestQuiet.end - longestQuiet.start).Round(time.Millisecond).String()
	for _, f := range lv.faults {
		if f.Start <= longest.end && max(f.End, f.Start)+int64(lv.ttl) >= longest.start && longest.end > longest.start {
			r.LongestGapFaults = append(r.LongestGapFaults, f.Kind)
		}
	}
}

// takeovers measures the takeover after a holder was killed: until the
// next grant's answer in its group. Bound: the store expires the lease
// within TTL of the holder's last write, and a waiter retries within the
// retry interval.
func (r *Report) takeovers(lv *liveData, ts []*Tenure, opt Options) {
	storeTTL := opt.Profile.MaxTTL
	if opt.Profile.Takeover != nil {
		storeTTL = opt.Profile.Takeover
	}
	bound := storeTTL(lv.ttl) + opt.RetryInterval + SlackLiveness
	r.LivenessBound = fmt.Sprintf("kill: store TTL+retry+%v = %v; release: retry+%v = %v", SlackLiveness, bound, SlackLiveness, opt.RetryInterval+SlackLiveness)
	groupOf := map[string]string{}
	for _, t := range ts {
		groupOf[t.Resource] = tenureGroup(t)
	}
	for _, f := range lv.faults {
		if f.Kind != FaultKill || !f.Holder {
			continue
		}
		g, ok := groupOf[f.Resource]
		if !ok {
			g = "lease"
		}
		next, _, ok := lv.nextGrant(g, f.Start)
		if !ok {
			continue
		}
		d := time.Duration(next - f.Start)
		r.TakeoverAfterKill.add(d)
		if d > bound && !lv.otherFault(f, f.Start, next) {
			r.LivenessExceeded++
		}
	}
}

// handoffs measures the hand-off after a release: until another process's
// grant was answered, when someone was waiting (a releaser that takes the
// lease again first did not leave it free).
func (r *Report) handoffs(lv *liveData, hs []*History, opt Options) {
	for _, h := range hs {
		g := histGroup(h)
		mode := ""
		for _, e := range h.Events {
			if e.Ev == EvGrant {
				mode = e.Mode
			}
			if e.Ev != EvReleased || e.Err != "" || !lv.someoneWaits(g, e.T) {
				continue
			}
			if mode == "shared" {
				// Other shared holders may hold on: the release of one
				// share frees nothing for the waiters.
				continue
			}
			next, proc, ok := lv.nextGrant(g, e.T)
			if !ok || proc == h.Owner {
				continue
			}
			d := time.Duration(next - e.T)
			r.HandoffAfterFree.add(d)
			if d > opt.RetryInterval+SlackLiveness && !lv.otherFault(Fault{}, e.T, next) {
				r.LivenessExceeded++
			}
		}
	}
}

// WakeUpSlack is what the wake-up check allows, beyond the store's poll
// bound, between a release's answer and the send of the acquire that is
// granted next: the notification's way to the waiter and the scheduling
// of its process on a loaded machine. Generous, so that only lost
// wake-ups pass the bound.
const WakeUpSlack = time.Second

// WakeUpBound is how long after a release a waiter (one that was granted
// later) may take to send the acquire that is granted: the store's poll
// bound (none with release notifications, the retry interval when waiters
// poll) plus WakeUpSlack, plus a quarter TTL when the workers' second
// waiters give up during wake-ups (their attempt is held back that long
// before its context ends, and only then is the wake-up passed on). The
// granted acquire's own round trip is not counted: its latency is the
// store's, however loaded. While a notify-halfopen fault is on, or began
// within the store's bound on silence before the release, the bound grows
// by that bound (Profile.SilenceBound).
func WakeUpBound(p Profile, ttl, retry time.Duration, cancelWaiters bool) time.Duration {
	b := p.PollBound(retry) + WakeUpSlack
	if cancelWaiters {
		b += ttl / 4
	}
	return b
}

// wakeUps checks that a freed resource with a waiter is granted within one
// round trip plus WakeUpBound: for every confirmed release while a waiter
// of another process waited (one whose wait ended in a grant: a waiter that
// gave up, or was refused for another slot count, does not count), the
// time until the send of the acquire of the next grant of the resource (of
// a slot of the semaphore) to anyone, the releaser included (the resource
// was then not left free; which waiter is served is the stores' order, not
// this check's), counted from the release's answer or, when the grantee
// had an attempt in flight then, from that attempt's answer (the one round
// trip), and 0 when the granted acquire was sent before. A release that a fault other than notify-halfopen overlapped
// (from a TTL before it to the grant) is left out (Excluded); the others
// past the bound are violations (wakeup-late). The distribution of all
// that were checked is reported.
func (r *Report) wakeUps(hs []*History, faults []Fault, byGroup map[string][]*Tenure, ttl time.Duration, opt Options) {
	wc := newWakeCheck(hs, faults, byGroup, ttl, opt)
	r.WakeUp.Bound = wc.bound.String()
	for _, h := range hs {
		if h.Operator() {
			continue
		}
		var releasing int64 // the release call began
		for _, e := range h.Events {
			if e.Ev == EvRelease {
				releasing = e.T
			}
			if e.Ev != EvReleased || e.Err != "" || releasing == 0 {
				continue
			}
			r.wakeUpAfter(wc, h, releasing, e)
		}
	}
	r.WakeUp.finish()
}

// wakeCheck is what the wake-up check reads: the waits for a grant in each
// group, when each process's acquire calls were answered, the grants, the
// faults, and the bound.
type wakeCheck struct {
	waits map[string][]wakeWait
	// answers: per process, when its acquire calls were answered (in
	// order): an attempt in flight at the release delays the next one.
	answers map[string][]int64
	byGroup map[string][]*Tenure
	faults  []Fault
	ttl     time.Duration
	opt     Options
	bound   time.Duration // WakeUpBound
}

// wakeWait is a process's wait that ended in a grant.
type wakeWait struct {
	span
	proc string
}

func newWakeCheck(hs []*History, faults []Fault, byGroup map[string][]*Tenure, ttl time.Duration, opt Options) *wakeCheck {
	wc := &wakeCheck{waits: map[string][]wakeWait{}, answers: map[string][]int64{}, byGroup: byGroup, faults: faults, ttl: ttl, opt: opt}
	cancelWaiters := false
	for _, h := range hs {
		if h.Operator() {
			continue
		}
		if strings.HasSuffix(h.File, "-c.jsonl") {
			cancelWaiters = true
		}
		wc.add(h)
	}
	wc.bound = WakeUpBound(opt.Profile, ttl, opt.RetryInterval, cancelWaiters)
	return wc
}

// add adds the answers to h's acquire calls, and its waits that ended in a
// grant.
func (wc *wakeCheck) add(h *History) {
	acquires := map[int64]bool{}
	for _, e := range h.Events {
		switch {
		case e.Ev == EvCall && e.Op == OpAcquire:
			acquires[e.ID] = true
		case e.Ev == EvReturn && acquires[e.ID]:
			wc.answers[h.Owner] = append(wc.answers[h.Owner], e.T)
		}
	}
	g := histGroup(h)
	var w int64
	for _, e := range h.Events {
		switch e.Ev {
		case EvWait:
			w = e.T
		case EvGrant:
			if w != 0 {
				wc.waits[g] = append(wc.waits[g], wakeWait{span{w, e.T}, h.Owner})
			}
			w = 0
		case EvAcqErr, EvExit:
			w = 0
		}
	}
}

// othersWaited reports whether a process other than owner waited in group
// g at some time between from and to.
func (wc *wakeCheck) othersWaited(g, owner string, from, to int64) bool {
	for _, w := range wc.waits[g] {
		if w.proc != owner && w.start < to && from < w.end {
			return true
		}
	}
	return false
}

// boundFor returns the bound on a wake-up after a release answered at
// released and the next grant answered at next, and whether a fault
// between them takes the wake-up out of the check.
func (wc *wakeCheck) boundFor(released, next int64) (b time.Duration, excluded bool) {
	b = wc.bound
	silence := wc.opt.Profile.SilenceBound
	// A fault may break the connection that carries the notifications
	// without closing it (a partition drops its packets): the store finds
	// it dead within its bound on silence after the fault, and until then
	// its waiters poll.
	after := int64(max(wc.ttl, silence))
	for _, f := range wc.faults {
		if f.Start > next || max(f.End, f.Start)+after < released {
			continue
		}
		if f.Kind != FaultNotifyHalfOpen {
			return b, true
		}
		b = wc.bound + silence
	}
	// A half-open connection may be found dead up to the bound on silence
	// after the fault began, and a release before its end may wait for
	// that.
	for _, f := range wc.faults {
		if f.Kind == FaultNotifyHalfOpen && f.Start <= next && f.Start+int64(silence) >= released {
			b = wc.bound + silence
		}
	}
	return b, false
}

// wakeUpAfter measures the wake-up after h's release e, whose call began
// at releasing, when another process waited.
func (r *Report) wakeUpAfter(wc *wakeCheck, h *History, releasing int64, e Event) {
	g := histGroup(h)
	// The store freed the resource between the release's start and its
	// answer; a grant answered after the start, to anyone (the releaser
	// included: the resource was not left free), ends the wait for a
	// grant.
	if !wc.othersWaited(g, h.Owner, releasing, e.T) {
		return
	}
	gts := wc.byGroup[g]
	i := sort.Search(len(gts), func(i int) bool { return gts[i].Reply > releasing })
	if i == len(gts) {
		return
	}
	next := gts[i]
	b, excluded := wc.boundFor(e.T, next.Reply)
	if excluded {
		r.WakeUp.Excluded++
		return
	}
	// From the release, or from the answer of the grantee's attempt that
	// was in flight then (one round trip), whichever is later.
	from := e.T
	as := wc.answers[next.Process]
	if j := sort.Search(len(as), func(j int) bool { return as[j] >= next.Send }); j > 0 {
		from = max(from, as[j-1])
	}
	d := time.Duration(max(next.Send-from, 0))
	r.WakeUp.add(d)
	if d > b {
		r.WakeUp.Over++
		r.violate("wakeup-late", "%s: released by %s (token %d) at %d while another process waited; the next grant's acquire (%s, token %d) was sent %v later, over the bound %v",
			g, h.Owner, e.Token, e.T, next.Owner, next.Token, d.Round(time.Millisecond), b)
	}
}

// deletedDuring returns the kind of a deletion of the store's data by an
// operator (OutsideContract) that overlaps [from, to], or "": a hold whose
// record was deleted after it began is gone, for the rest of its length.
func deletedDuring(deletions []Fault, from, to int64) string {
	for _, f := range deletions {
		if f.Start <= to && f.End >= from {
			return f.Kind
		}
	}
	return ""
}

// fullSpans returns when at least n of the holds were trusted, or kept by
// a hold, at once.
func fullSpans(ts []*Tenure, n int) []span {
	type edge struct {
		t int64
		d int
	}
	var es []edge
	for _, t := range ts {
		// A hold (ReleaseAfter) keeps the resource after the trust ended.
		if end := max(t.End, t.HeldUntil); end >= t.Reply {
			es = append(es, edge{t.Reply, 1}, edge{end, -1})
		}
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].t != es[j].t {
			return es[i].t < es[j].t
		}
		return es[i].d > es[j].d
	})
	var out []span
	c := 0
	var start int64
	for _, e := range es {
		c += e.d
		if e.d > 0 && c == n {
			start = e.t
		}
		if e.d < 0 && c == n-1 {
			out = append(out, span{start, e.t})
		}
	}
	return union(out)
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
	lin := r.Linearizability.Result
	if b := r.Linearizability.MemoryBound; b > 0 {
		lin += fmt.Sprintf("(heap-bound-%dMiB)", b>>20)
	}
	s := fmt.Sprintf("store=%s seed=%d duration=%s workers=%d ttl=%s handoffs=%d grants=%d faults=%s violations=%d longest-free-gap-while-waiting=%s linearizable=%s ops=%d failed-calls=%d",
		r.Store, r.Seed, r.Duration, r.Workers, r.TTL, r.Handoffs, r.Grants, strings.Join(fs, ","), r.Violations, r.LongestFreeGap,
		lin, r.Linearizability.Operations, r.StoreCallsFailed)
	if r.Violations > 0 {
		var vs []string
		for k, n := range r.ViolationsByKind {
			vs = append(vs, fmt.Sprintf("%s:%d", k, n))
		}
		sort.Strings(vs)
		s += " violation-kinds=" + strings.Join(vs, ",")
	}
	if len(r.OutsideContract) > 0 {
		var os []string
		for k, n := range r.OutsideContract {
			os = append(os, fmt.Sprintf("%s:%d", k, n))
		}
		sort.Strings(os)
		s += " outside-contract=" + strings.Join(os, ",")
	}
	if r.WakeUp.N > 0 {
		s += fmt.Sprintf(" wakeup-after-release=%s/%s/%s(p50/p99/max,n=%d,bound=%s,over=%d)",
			r.WakeUp.P50, r.WakeUp.P99, r.WakeUp.Max, r.WakeUp.N, r.WakeUp.Bound, r.WakeUp.Over)
	}
	if r.SemWorkers > 0 || r.SlotGrants > 0 {
		s += fmt.Sprintf(" slot-grants=%d slot-handoffs=%d", r.SlotGrants, r.SlotHandoffs)
	}
	if r.RWWorkers > 0 || r.SharedGrants+r.ExclusiveGrants > 0 {
		s += fmt.Sprintf(" shared-grants=%d exclusive-grants=%d most-shared-at-once=%d", r.SharedGrants, r.ExclusiveGrants, r.MostShared)
	}
	if r.Regrants > 0 {
		s += fmt.Sprintf(" regrants-after-loss=%d", r.Regrants)
	}
	if r.Unsafe {
		s += " client=UNSAFE"
	}
	if r.SharedOwner {
		s += " owners=SHARED-PER-LOCKER"
	}
	if len(r.Missing) > 0 {
		s += " missing-faults=" + strings.Join(r.Missing, ",")
	}
	return s
}
