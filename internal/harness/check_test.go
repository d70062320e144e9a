package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// hold is one tenure in a hand-made worker history, in milliseconds.
type hold struct {
	token       uint64
	send, reply int64
	deadline    int64
	steps       []int64
	release     int64 // 0: no release (lost, or killed)
	lost        int64 // the worker saw the loss
	holdFor     int64 // with release: ReleaseAfter for this long, confirmed a millisecond later
}

func whist(owner string, wait int64, holds ...hold) *History {
	h := &History{File: owner, Owner: owner, TTL: time.Second}
	h.Events = append(h.Events, Event{Ev: EvStart, T: 0, Owner: owner, TTL: int64(time.Second)})
	w := wait
	for _, x := range holds {
		h.Events = append(h.Events, Event{Ev: EvWait, T: w * ms})
		h.Events = append(h.Events, Event{Ev: EvGrant, T: x.reply * ms, Token: x.token, Send: x.send * ms, Reply: x.reply * ms, Deadline: x.deadline * ms})
		for _, s := range x.steps {
			h.Events = append(h.Events, Event{Ev: EvStep, T: s * ms, Token: x.token, Deadline: x.deadline * ms})
		}
		switch {
		case x.lost != 0:
			h.Events = append(h.Events, Event{Ev: EvLost, T: x.lost * ms, Token: x.token})
			w = x.lost + 1
		case x.release != 0 && x.holdFor != 0:
			h.Events = append(h.Events, Event{Ev: EvRelease, T: x.release * ms, Token: x.token})
			h.Events = append(h.Events, Event{Ev: EvHold, T: (x.release + 1) * ms, Token: x.token, TTL: x.holdFor * ms})
			w = x.release + 2
		case x.release != 0:
			h.Events = append(h.Events, Event{Ev: EvRelease, T: x.release * ms, Token: x.token})
			h.Events = append(h.Events, Event{Ev: EvReleased, T: (x.release + 1) * ms, Token: x.token})
			w = x.release + 2
		}
	}
	return h
}

func check(hs []*History, faults ...Fault) *Report {
	return Check(hs, faults, Options{Profile: SQLiteProfile, RetryInterval: 250 * time.Millisecond, SkipLinearizability: true})
}

func TestCheckPasses(t *testing.T) {
	hs := []*History{
		whist("A", 0,
			hold{token: 1, send: 0, reply: 5, deadline: 990, steps: []int64{10, 200, 400}, release: 450},
			hold{token: 3, send: 1002, reply: 1003, deadline: 1990, steps: []int64{1010}, release: 1100}),
		whist("B", 100,
			hold{token: 2, send: 455, reply: 460, deadline: 1445, steps: []int64{470, 900}, release: 1000}),
	}
	r := check(hs)
	if r.Violations != 0 {
		t.Fatalf("violations: %+v", r.Examples)
	}
	if r.Grants != 3 || r.Handoffs != 2 || r.WorkSteps != 6 {
		t.Errorf("grants %d handoffs %d steps %d, want 3 2 6", r.Grants, r.Handoffs, r.WorkSteps)
	}
	// B waited from 100; the resource was free from A's release (450) to
	// B's grant (460), and A waited again from 452, while B held it until
	// 1000.
	if r.LongestFreeGapNs != 10*ms {
		t.Errorf("longest free gap while waiting = %v, want 10ms", time.Duration(r.LongestFreeGapNs))
	}
	if r.HandoffAfterFree.N != 2 || r.HandoffAfterFree.Max != "9ms" {
		t.Errorf("handoff after release: %+v", r.HandoffAfterFree)
	}
}

// A grant inside a confirmed hold (ReleaseAfter) is a violation; one after
// the hold ended is not.
func TestCheckHoldBroken(t *testing.T) {
	hs := []*History{
		whist("A", 0, hold{token: 1, send: 0, reply: 5, deadline: 990, steps: []int64{10}, release: 400, holdFor: 2000}),
		whist("B", 100, hold{token: 2, send: 1500, reply: 1510, deadline: 2500, steps: []int64{1520}, release: 1600}),
		whist("C", 100, hold{token: 3, send: 2410, reply: 2420, deadline: 3400, steps: []int64{2430}, release: 2500}),
	}
	r := check(hs)
	if r.Violations != 1 || r.ViolationsByKind["hold-broken"] != 1 {
		t.Fatalf("violations %d %v, want one hold-broken: %+v", r.Violations, r.ViolationsByKind, r.Examples)
	}
	// An operator deleted the store's records during the hold (key-delete,
	// more than a TTL before the grant): outside the contract.
	r = check(hs, Fault{Kind: FaultKeyDelete, Start: 450 * ms, End: 460 * ms})
	if r.Violations != 0 || r.OutsideContract[FaultKeyDelete] != 1 {
		t.Fatalf("a hold deleted by an operator: violations %d %v, outside the contract %v", r.Violations, r.ViolationsByKind, r.OutsideContract)
	}
}

// Every acquire is a grant of its own: a Locker that lost its lease
// locally and was granted the same token again adopted its earlier grant
// (the behaviour before grant identity), which the checker reports.
func TestCheckAdoptedGrantIsAViolation(t *testing.T) {
	hs := []*History{whist("A", 0,
		hold{token: 4, send: 0, reply: 2, deadline: 990, steps: []int64{10}, lost: 995},
		hold{token: 4, send: 1000, reply: 1002, deadline: 1990, steps: []int64{1010}, release: 1100})}
	r := check(hs)
	if r.ViolationsByKind["token-order"] != 1 {
		t.Fatalf("token-order violations: %v; want 1", r.ViolationsByKind)
	}
	if r.Regrants != 1 {
		t.Errorf("regrants after loss = %d, want 1", r.Regrants)
	}
}

func TestCheckFinds(t *testing.T) {
	cases := []struct {
		name string
		hs   []*History
		kind string
	}{
		{"overlapping work", []*History{
			whist("A", 0, hold{token: 1, send: 0, reply: 5, deadline: 990, steps: []int64{10, 500}, release: 600}),
			whist("B", 0, hold{token: 2, send: 300, reply: 305, deadline: 1290, steps: []int64{400}, release: 450}),
		}, "exclusion-work"},
		{"overlapping trust windows", []*History{
			whist("A", 0, hold{token: 1, send: 0, reply: 5, deadline: 990, steps: []int64{10}}),
			whist("B", 0, hold{token: 2, send: 900, reply: 905, deadline: 1890, steps: []int64{1000}, release: 1100}),
		}, "exclusion-trust"},
		{"work after the deadline", []*History{
			whist("A", 0, hold{token: 1, send: 0, reply: 5, deadline: 990, steps: []int64{10, 995}, release: 1000}),
		}, "work-after-deadline"},
		{"tokens that do not increase", []*History{
			whist("A", 0, hold{token: 7, send: 0, reply: 5, deadline: 990, steps: []int64{10}, release: 100}),
			whist("B", 0, hold{token: 7, send: 200, reply: 205, deadline: 1190, steps: []int64{210}, release: 300}),
		}, "token-order"},
		{"tokens that go back", []*History{
			whist("A", 0, hold{token: 7, send: 0, reply: 5, deadline: 990, steps: []int64{10}, release: 100}),
			whist("B", 0, hold{token: 6, send: 200, reply: 205, deadline: 1190, steps: []int64{210}, release: 300}),
		}, "token-order"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := check(c.hs)
			if r.ViolationsByKind[c.kind] == 0 {
				t.Fatalf("no %s violation; report: %+v", c.kind, r.ViolationsByKind)
			}
		})
	}
}

func TestUnsafeBeliefExtendsTrust(t *testing.T) {
	// An unsafe worker keeps working after a failed release: its trust
	// window runs to its last step and overlaps B's.
	a := whist("A", 0, hold{token: 1, send: 0, reply: 5, deadline: 990, steps: []int64{10, 1500}})
	a.Unsafe = true
	a.Events = append(a.Events,
		Event{Ev: EvRelease, T: 1600 * ms, Token: 1},
		Event{Ev: EvReleased, T: 1601 * ms, Token: 1, Err: "lease lost"})
	b := whist("B", 0, hold{token: 2, send: 1100, reply: 1105, deadline: 2090, steps: []int64{1200}, release: 1300})
	r := check([]*History{a, b})
	for _, k := range []string{"exclusion-trust", "work-after-deadline"} {
		if r.ViolationsByKind[k] == 0 {
			t.Errorf("no %s violation: %+v", k, r.ViolationsByKind)
		}
	}
}

func TestTakeoverAfterKill(t *testing.T) {
	a := whist("A", 0, hold{token: 1, send: 0, reply: 5, deadline: 990, steps: []int64{10}})
	a.Gone = &Event{Ev: EvGone, T: 300 * ms}
	b := whist("B", 100, hold{token: 2, send: 1000, reply: 1010, deadline: 1990, steps: []int64{1100}, release: 1200})
	r := check([]*History{a, b}, Fault{Kind: FaultKill, Start: 300 * ms, End: 300 * ms, Holder: true, Token: 1})
	if r.Violations != 0 {
		t.Fatalf("violations: %+v", r.Examples)
	}
	if r.TakeoverAfterKill.N != 1 || r.TakeoverAfterKill.Max != "710ms" {
		t.Errorf("takeover after kill: %+v", r.TakeoverAfterKill)
	}
	// B waited from 100; A trusted until 990, B from 1010.
	if r.LongestFreeGapNs != 20*ms {
		t.Errorf("longest free gap = %v, want 20ms", time.Duration(r.LongestFreeGapNs))
	}
}

func TestRecorderSurvivesAndReads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.jsonl")
	rec, err := NewRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	rec.Record(Event{Ev: EvStart, T: 1, Owner: "A", TTL: int64(time.Second)})
	rec.Record(Event{Ev: EvWait, T: 2})
	rec.Close()
	if err := AppendEvent(path, Event{Ev: EvGone, T: 3, Err: "killed"}); err != nil {
		t.Fatal(err)
	}
	// A torn last line (a write cut short) is counted, not fatal.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"ev":"st`)
	f.Close()
	h, err := ReadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	if h.Owner != "A" || len(h.Events) != 2 || h.Gone == nil || h.Gone.T != 3 || h.Torn != 1 {
		t.Errorf("history: %+v", h)
	}
}

func TestMonoOf(t *testing.T) {
	now := MonoNow()
	d := MonoOf(time.Now().Add(time.Second))
	if diff := d - now - int64(time.Second); diff < 0 || diff > int64(50*time.Millisecond) {
		t.Errorf("MonoOf(now+1s) - MonoNow() - 1s = %v", time.Duration(diff))
	}
}

// The report counts the store calls that failed and the longest run of
// failed calls in one worker.
func TestCheckCountsFailedCalls(t *testing.T) {
	h := &History{File: "A", Owner: "A", TTL: time.Second}
	call := func(id, send, reply int64, res, err string) {
		h.Events = append(h.Events,
			Event{Ev: EvCall, T: send * ms, ID: id, Op: OpAcquire, Owner: "A"},
			Event{Ev: EvReturn, T: reply * ms, ID: id, Res: res, Err: err})
	}
	call(1, 0, 5, ResHeld, "")
	call(2, 10, 20, ResError, "gocql: no hosts available in the pool")
	call(3, 30, 1030, ResUnknown, "context deadline exceeded")
	call(4, 1040, 1050, ResHeld, "")
	call(5, 1100, 1400, ResError, "gocql: no hosts available in the pool")
	r := check([]*History{h})
	if r.StoreCalls != 5 || r.StoreCallsFailed != 3 || r.StoreCallsNoHosts != 2 {
		t.Errorf("calls %d, failed %d, no hosts %d; want 5, 3, 2", r.StoreCalls, r.StoreCallsFailed, r.StoreCallsNoHosts)
	}
	if r.LongestFailStreak != "1.02s" {
		t.Errorf("longest failed-call streak %s, want 1.02s (sent at 10 ms, last answer at 1030 ms)", r.LongestFailStreak)
	}
}

// slotHist is a history of one semaphore worker holding slot of a
// semaphore of n slots from reply to end (milliseconds).
func slotHist(owner string, slot, n int, token uint64, reply, end int64) *History {
	res := fmt.Sprintf("S/slot-%d-of-%d", slot, n)
	h := &History{File: owner, Owner: owner, TTL: time.Second, Workload: WorkloadSemaphore, Sem: "S", Slots: n}
	h.Events = []Event{
		{Ev: EvStart, T: 0, Owner: owner, Workload: WorkloadSemaphore, Sem: "S", Slots: n},
		{Ev: EvWait, T: 0},
		{Ev: EvGrant, T: reply * ms, Resource: res, Owner: owner + ".1", Sem: "S", Slots: n, Slot: slot, Token: token, Send: (reply - 1) * ms, Reply: reply * ms, Deadline: (end + 500) * ms},
		{Ev: EvStep, T: (reply + 1) * ms, Token: token, Deadline: (end + 500) * ms},
		{Ev: EvStep, T: (end - 1) * ms, Token: token, Deadline: (end + 500) * ms},
		{Ev: EvRelease, T: end * ms, Token: token},
		{Ev: EvReleased, T: (end + 1) * ms, Token: token},
	}
	return h
}

func TestCheckSemaphore(t *testing.T) {
	// Two slots, three holders over time, never more than two at once.
	ok := []*History{
		slotHist("A", 1, 2, 1, 0, 500),
		slotHist("B", 2, 2, 1, 100, 700),
		slotHist("C", 1, 2, 2, 510, 900),
	}
	if r := check(ok); r.Violations != 0 || r.SlotGrants != 3 || r.SlotHandoffs != 1 {
		t.Fatalf("violations %+v, slot grants %d, slot hand-offs %d; want 0, 3, 1", r.Examples, r.SlotGrants, r.SlotHandoffs)
	}
	// A third holder while both slots are trusted: on a slot of another
	// number of slots, so no slot is held twice; the semaphore's count is
	// what catches it.
	bad := append(ok, slotHist("D", 3, 3, 1, 200, 300))
	r := check(bad)
	if r.ViolationsByKind["semaphore-trust"] == 0 || r.ViolationsByKind["semaphore-work"] == 0 {
		t.Fatalf("no semaphore violation: %v", r.ViolationsByKind)
	}
	if r.ViolationsByKind["exclusion-trust"] != 0 {
		t.Errorf("exclusion-trust across different slots: %v", r.ViolationsByKind)
	}
	// Holders started with different numbers of slots: a holder of 3 slots
	// first, then two holders of 2 beside it. Three holders is one more than
	// a holder of 2 trusts, whichever holder came first (the check used
	// the first holder's number, 3, and missed it).
	mixed := []*History{
		slotHist("D", 3, 3, 1, 0, 300),
		slotHist("A", 1, 2, 1, 100, 500),
		slotHist("B", 2, 2, 1, 150, 700),
	}
	if r := check(mixed); r.ViolationsByKind["semaphore-trust"] == 0 {
		t.Fatalf("holders of 2 slots beside a holder of 3, three at once: no violation (%v)", r.ViolationsByKind)
	}
}

// An overlap right after an operator deleted the holder's lease is outside
// the contract; the same overlap long after it is a violation.
func TestCheckOutsideContract(t *testing.T) {
	hs := []*History{
		whist("A", 0, hold{token: 1, send: 0, reply: 5, deadline: 990, steps: []int64{10, 600}, release: 700}),
		whist("B", 0, hold{token: 2, send: 300, reply: 305, deadline: 1290, steps: []int64{400}, release: 450}),
	}
	del := Fault{Kind: FaultKeyDelete, Start: 290 * ms, End: 295 * ms, Holder: true, Token: 1}
	r := check(hs, del)
	if r.Violations != 0 || r.OutsideContract[FaultKeyDelete] != 2 {
		t.Fatalf("violations %v, outside the contract %v; want 0 and 2 (trust and work)", r.ViolationsByKind, r.OutsideContract)
	}
	if r.OutsideReasons[FaultKeyDelete] == "" {
		t.Error("no reason given")
	}
	// Tokens must still increase.
	hs[1] = whist("B", 0, hold{token: 1, send: 300, reply: 305, deadline: 1290, steps: []int64{400}, release: 450})
	if r := check(hs, del); r.ViolationsByKind["token-order"] == 0 {
		t.Errorf("a token repeated after a deletion went unnoticed: %v", r.ViolationsByKind)
	}
	// A deletion of several keys may delete a grant applied between two of
	// its commands, answered just after the deletion ended: still outside
	// the contract.
	mid := []*History{
		whist("A", 0, hold{token: 1, send: 293, reply: 296, deadline: 1280, steps: []int64{300, 600}, release: 700}),
		whist("B", 0, hold{token: 2, send: 296, reply: 297, deadline: 1290, steps: []int64{400}, release: 450}),
	}
	if r := check(mid, del); r.Violations != 0 || r.OutsideContract[FaultKeyDelete] != 2 {
		t.Errorf("a grant sent during the deletion and answered after it: violations %v, outside the contract %v; want 0 and 2", r.ViolationsByKind, r.OutsideContract)
	}
	// A deletion long before does not explain the overlap.
	hs[1] = whist("B", 0, hold{token: 2, send: 300, reply: 305, deadline: 1290, steps: []int64{400}, release: 450})
	old := Fault{Kind: FaultKeyDelete, Start: -5000 * ms, End: -4990 * ms}
	if r := check(hs, old); r.ViolationsByKind["exclusion-trust"] == 0 {
		t.Errorf("an overlap long after a deletion was excused: %v %v", r.ViolationsByKind, r.OutsideContract)
	}
}

func TestLockerOwner(t *testing.T) {
	for in, want := range map[string]string{
		"w1-42#9f86d081884c7d65.3":    "w1-42#9f86d081884c7d65",
		"host.example:1#abcdef.12":    "host.example:1#abcdef",
		"tenure semaphore of 2 slots": "tenure semaphore of 2 slots",
		"jaeger-collector":            "jaeger-collector",
	} {
		if got := lockerOwner(in); got != want {
			t.Errorf("lockerOwner(%q) = %q, want %q", in, got, want)
		}
	}
}

// keptSlot is slotHist whose round ends with a confirmed ReleaseAfter of
// holdFor milliseconds instead of a release.
func keptSlot(owner string, slot, n int, token uint64, reply, end, holdFor int64) *History {
	h := slotHist(owner, slot, n, token, reply, end)
	h.Events[len(h.Events)-1] = Event{Ev: EvHold, T: (end + 1) * ms, Token: token, TTL: holdFor * ms}
	return h
}

// A kept slot (ReleaseAfter) keeps the semaphore's count: a holder of
// another number of slots beside it is a violation (semaphore-count),
// and so are more holders than slots with the kept one counted; after the
// hold, another count is fine.
func TestCheckSemaphoreCount(t *testing.T) {
	kept := keptSlot("A", 1, 2, 1, 0, 100, 2000)
	ok := []*History{kept, slotHist("D", 1, 3, 2, 2200, 2500)}
	if r := check(ok); r.Violations != 0 {
		t.Fatalf("another count after the hold: %+v", r.Examples)
	}
	other := []*History{kept, slotHist("D", 1, 3, 2, 1500, 1800)}
	if r := check(other); r.ViolationsByKind["semaphore-count"] != 1 {
		t.Fatalf("another count during the hold: %v %+v; want one semaphore-count", r.ViolationsByKind, r.Examples)
	}
	full := []*History{kept, keptSlot("B", 2, 2, 2, 50, 150, 2000), slotHist("C", 1, 2, 3, 1000, 1200)}
	if r := check(full); r.ViolationsByKind["semaphore-trust"] == 0 {
		t.Fatalf("a third holder of 2 slots while both are kept: no violation (%v)", r.ViolationsByKind)
	}
}

// A release while another process waits must be followed by a grant
// within WakeUpBound (wakeup-late); a fault other than notify-halfopen
// excludes it, and a notify-halfopen fault extends the bound by the
// store's bound on silence.
func TestCheckWakeUpLate(t *testing.T) {
	late := []*History{
		whist("A", 0, hold{token: 1, send: 0, reply: 5, deadline: 990, steps: []int64{10}, release: 450}),
		whist("B", 100, hold{token: 2, send: 2990, reply: 3000, deadline: 3990, steps: []int64{3010}, release: 3100}),
	}
	r := check(late)
	if r.ViolationsByKind["wakeup-late"] != 1 || r.WakeUp.N != 1 || r.WakeUp.Over != 1 {
		t.Fatalf("grant 2.55 s after the release: %v, %+v; want one wakeup-late", r.ViolationsByKind, r.WakeUp)
	}
	if want := WakeUpBound(SQLiteProfile, time.Second, 250*time.Millisecond, false); r.WakeUp.Bound != want.String() {
		t.Errorf("bound %s, want %v", r.WakeUp.Bound, want)
	}
	if r := check(late, Fault{Kind: FaultPause, Start: 400 * ms, End: 2000 * ms}); r.Violations != 0 || r.WakeUp.Excluded != 1 {
		t.Fatalf("with a pause during the hand-off: %v, %+v; want it excluded", r.ViolationsByKind, r.WakeUp)
	}
	pg := Check(late, []Fault{{Kind: FaultNotifyHalfOpen, Start: 300 * ms, End: 10300 * ms}},
		Options{Profile: PostgresProfile, RetryInterval: 250 * time.Millisecond, SkipLinearizability: true})
	if pg.Violations != 0 || pg.WakeUp.N != 1 {
		t.Fatalf("with a half-open notification connection: %v, %+v; want the bound extended", pg.ViolationsByKind, pg.WakeUp)
	}
	// A waiter that gave up does not count.
	gaveUp := late[:1:1]
	b := &History{File: "B", Owner: "B", TTL: time.Second}
	b.Events = []Event{{Ev: EvStart, Owner: "B"}, {Ev: EvWait, T: 100 * ms}, {Ev: EvAcqErr, T: 3000 * ms}}
	if r := check(append(gaveUp, b)); r.Violations != 0 || r.WakeUp.N != 0 {
		t.Fatalf("a waiter that gave up: %v, %+v; want nothing checked", r.ViolationsByKind, r.WakeUp)
	}
}

// A deletion between two grants explains their overlap whichever hold
// begins first: an exclusive holder of a shared/exclusive lock begins to
// trust its lease once the shared holders are gone, after a later grant's
// hold began (a MySQL run: the gate granted at 0 ms, every row deleted at
// 1,200 ms, another holder granted at 1,210 ms, the first exclusive from
// 1,220 ms until its renewal found the lease lost).
func TestDeletionExplainsOverlapEitherOrder(t *testing.T) {
	x := exclusion{deletions: []Fault{{Kind: FaultKeyDelete, Start: 1200 * ms, End: 1205 * ms}}, ttl: time.Second}
	first := &Tenure{Owner: "A", Send: 0, Reply: 2 * ms}
	second := &Tenure{Owner: "B", Send: 1207 * ms, Reply: 1210 * ms}
	if k := x.outside(second, first, 1300*ms); k != FaultKeyDelete {
		t.Fatalf("the later grant's hold first: %q", k)
	}
	if k := x.outside(first, second, 1300*ms); k != FaultKeyDelete {
		t.Fatalf("the earlier grant's hold first: %q", k)
	}
	late := &Tenure{Owner: "C", Send: 1300 * ms, Reply: 1310 * ms}
	if k := x.outside(second, late, 1400*ms); k != "" {
		t.Fatalf("two grants after the deletion: %q", k)
	}
}
