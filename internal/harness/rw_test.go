package harness

import (
	"testing"
	"time"
)

// rwHist is a history of one shared/exclusive worker holding the lock R
// in mode from start to end (milliseconds): a shared holder's grant is its
// own lease's (answered at start), an exclusive one's the gate's (answered
// earlier, granted at start). holdFor > 0 ends it with a confirmed
// ReleaseAfter of that length.
func rwHist(owner, mode string, token uint64, start, end, holdFor int64) *History {
	res, reply := "R/shared-00000000000000"+owner[:1]+owner[:1], start
	if mode == "exclusive" {
		res, reply = "R", start-50
	}
	h := &History{File: owner, Owner: owner, TTL: time.Second, Workload: WorkloadRW, RW: "R"}
	h.Events = []Event{
		{Ev: EvStart, T: 0, Owner: owner, Workload: WorkloadRW, RW: "R"},
		{Ev: EvWait, T: 0},
		{Ev: EvGrant, T: start * ms, Resource: res, Owner: owner + ".1", RW: "R", Mode: mode, Token: token, Send: (reply - 1) * ms, Reply: reply * ms, Deadline: (end + 500) * ms},
		{Ev: EvStep, T: (start + 1) * ms, Token: token, Deadline: (end + 500) * ms},
		{Ev: EvStep, T: (end - 1) * ms, Token: token, Deadline: (end + 500) * ms},
		{Ev: EvRelease, T: end * ms, Token: token},
	}
	if holdFor > 0 {
		h.Events = append(h.Events, Event{Ev: EvHold, T: (end + 1) * ms, Token: token, TTL: holdFor * ms})
	} else {
		h.Events = append(h.Events, Event{Ev: EvReleased, T: (end + 1) * ms, Token: token})
	}
	return h
}

func TestCheckRW(t *testing.T) {
	// Three shared holders at once, an exclusive one after them, a shared
	// one after it; tokens in that order.
	ok := []*History{
		rwHist("A", "shared", 10, 0, 500, 0),
		rwHist("B", "shared", 11, 100, 600, 0),
		rwHist("C", "shared", 12, 200, 650, 0),
		rwHist("D", "exclusive", 13, 700, 900, 0),
		rwHist("E", "shared", 14, 950, 1100, 0),
	}
	r := check(ok)
	if r.Violations != 0 || r.SharedGrants != 4 || r.ExclusiveGrants != 1 || r.MostShared != 3 {
		t.Fatalf("violations %v %+v, shared %d, exclusive %d, most shared %d; want 0, 4, 1, 3",
			r.ViolationsByKind, r.Examples, r.SharedGrants, r.ExclusiveGrants, r.MostShared)
	}
	// An exclusive holder beside a shared one; the exclusive gate's answer
	// (50 ms before its grant) does not count.
	beside := append(ok[:4:4], rwHist("E", "shared", 14, 880, 1100, 0))
	r = check(beside)
	if r.ViolationsByKind["rw-trust"] == 0 || r.ViolationsByKind["rw-work"] == 0 {
		t.Fatalf("a shared holder beside the exclusive one: %v", r.ViolationsByKind)
	}
	touching := append(ok[:4:4], rwHist("E", "shared", 14, 901, 1100, 0))
	touching[3] = rwHist("D", "exclusive", 13, 660, 900, 0)
	if r := check(touching); r.Violations != 0 {
		t.Fatalf("holds that do not overlap: %v %+v", r.ViolationsByKind, r.Examples)
	}
	// Tokens out of grant order across modes.
	order := []*History{
		rwHist("A", "shared", 10, 0, 500, 0),
		rwHist("D", "exclusive", 9, 700, 900, 0),
	}
	if r := check(order); r.ViolationsByKind["rw-token-order"] != 1 {
		t.Fatalf("an exclusive token below an earlier shared one: %v", r.ViolationsByKind)
	}
	// A shared holder's hold keeps exclusive holders out until it ends.
	held := []*History{
		rwHist("A", "shared", 10, 0, 500, 1000),
		rwHist("D", "exclusive", 13, 700, 900, 0),
	}
	if r := check(held); r.ViolationsByKind["hold-broken"] != 1 {
		t.Fatalf("an exclusive holder within a shared holder's hold: %v", r.ViolationsByKind)
	}
	// ... but not shared ones.
	sharedInHold := []*History{
		rwHist("A", "shared", 10, 0, 500, 1000),
		rwHist("B", "shared", 11, 700, 900, 0),
	}
	if r := check(sharedInHold); r.Violations != 0 {
		t.Fatalf("a shared holder within a shared holder's hold: %v", r.ViolationsByKind)
	}
	// An exclusive holder's hold keeps everyone out.
	exHeld := []*History{
		rwHist("D", "exclusive", 13, 0, 500, 1000),
		rwHist("B", "shared", 14, 700, 900, 0),
	}
	if r := check(exHeld); r.ViolationsByKind["hold-broken"] != 1 {
		t.Fatalf("a shared holder within an exclusive holder's hold: %v", r.ViolationsByKind)
	}
	// An overlap right after an operator deleted the store's records is
	// outside the contract.
	r = check(beside, Fault{Kind: FaultKeyDelete, Start: 690 * ms, End: 695 * ms})
	if r.ViolationsByKind["rw-trust"] != 0 || r.OutsideContract[FaultKeyDelete] == 0 {
		t.Fatalf("after a key deletion: violations %v, outside the contract %v", r.ViolationsByKind, r.OutsideContract)
	}
}

func rwRun(t *testing.T, unsafe bool, faults []string, d time.Duration) *Report {
	t.Helper()
	return sqliteRun(t, unsafe, faults, d, func(c *Config) {
		c.Workers, c.RWWorkers, c.HoldProb = 2, 4, 0.15
	})
}

// TestSQLiteRunRW runs shared/exclusive workers (and two lease workers)
// on a real SQLite file with pause, kill and stuck-writer, and expects no
// violation, shared holders together and exclusive grants. Whether two
// shared holds overlap in a short run is chance (faults and random holds
// decide it), so up to three runs are made until one has; every run must
// be free of violations.
func TestSQLiteRunRW(t *testing.T) {
	var shared, exclusive, most int
	for run := 0; run < 3 && (shared == 0 || exclusive == 0 || most < 2); run++ {
		rep := rwRun(t, false, []string{FaultPause, FaultKill, FaultStuckWriter}, 6*time.Second)
		if rep.Violations != 0 {
			t.Fatalf("violations: %v %+v", rep.ViolationsByKind, rep.Examples)
		}
		if len(rep.Missing) > 0 {
			t.Fatalf("faults never injected: %v", rep.Missing)
		}
		shared, exclusive, most = shared+rep.SharedGrants, exclusive+rep.ExclusiveGrants, max(most, rep.MostShared)
	}
	if shared == 0 || exclusive == 0 || most < 2 {
		t.Fatalf("shared grants %d, exclusive grants %d, most shared at once %d in three runs: the runs did not exercise the lock", shared, exclusive, most)
	}
}

// TestSQLiteRunRWUnsafe: workers that keep working while they believe they
// hold the lock (not checking their deadline) are caught by the
// shared/exclusive checks when a pause outlasts a holder's lease.
func TestSQLiteRunRWUnsafe(t *testing.T) {
	kinds := map[string]int{}
	for run := 0; run < 3 && kinds["rw-trust"]+kinds["rw-work"] == 0; run++ {
		rep := rwRun(t, true, []string{FaultPause}, 6*time.Second)
		for k, n := range rep.ViolationsByKind {
			kinds[k] += n
		}
	}
	if kinds["rw-trust"]+kinds["rw-work"] == 0 {
		t.Fatalf("an unsafe client's shared/exclusive overlaps went unnoticed in three runs: %v", kinds)
	}
}
