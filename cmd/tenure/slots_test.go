//go:build linux

package main

// tenure run --slots N: at most N commands at once per resource, across
// processes, with a fencing token per slot.

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/memory"
)

// Ten "tenure run --slots 2" on one resource, on SQLite and on every
// network store: never more than 2 commands at once, every one runs,
// TENURE_SLOT names its slot, and tokens increase per slot.
func TestRunSlots(t *testing.T) {
	t.Parallel()
	stores := map[string]string{"sqlite": ""}
	for name, url := range networkStoresOrNone() {
		stores[name] = url
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if url != "" {
				e.store = url
			}
			e.init()
			checkSlots(t, e, uniqueResource("slots"), 2, 10)
		})
	}
}

// "tenure run --slots 2" with a TTL of a minute or more runs its command,
// as a plain lease of that TTL does, on SQLite and on every network store:
// a slot is trusted by its own TTL, not capped by the semaphore's marker.
func TestRunSlotsLongTTL(t *testing.T) {
	t.Parallel()
	stores := map[string]string{"sqlite": ""}
	for name, url := range networkStoresOrNone() {
		stores[name] = url
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if url != "" {
				e.store = url
			}
			e.init()
			for _, ttl := range []string{"59s", "1m", "10m"} {
				if code, _, stderr := e.run("run", "--slots", "2", "--ttl", ttl, uniqueResource("long"), "--", "true"); code != 0 {
					t.Errorf("run --slots 2 --ttl %s: exit %d:\n%s", ttl, code, stderr)
				}
			}
		})
	}
}

// checkSlots starts n "tenure run --slots slots" on resource at once and
// checks the commands' records.
func checkSlots(t *testing.T, e *env, resource string, slots, n int) {
	t.Helper()
	out := e.path("events")
	var procs []*proc
	for i := range n {
		procs = append(procs, e.start("p"+strconv.Itoa(i), startOpt{}, "run", "--slots", strconv.Itoa(slots), "--wait", "120s", "--ttl", "5s", resource, "--",
			helper("-out", out, "-tag", "p"+strconv.Itoa(i), "-hold", "100ms")))
	}
	for _, p := range procs {
		if code := p.wait(150 * time.Second); code != 0 {
			t.Fatalf("%s exited %d; stderr:\n%s", p.name, code, p.stderr())
		}
	}
	evs := readEvents(t, out)
	starts, ends := filter(evs, "start"), filter(evs, "end")
	if len(starts) != n || len(ends) != n {
		t.Fatalf("%d starts and %d ends, want %d each", len(starts), len(ends), n)
	}
	// Never more than slots at once: a sweep over starts and ends (an end
	// before a start at the same instant).
	sweep := append(append([]event{}, starts...), ends...)
	sort.Slice(sweep, func(i, j int) bool {
		if sweep[i].mono != sweep[j].mono {
			return sweep[i].mono < sweep[j].mono
		}
		return sweep[i].kind == "end"
	})
	running, most := 0, 0
	for _, ev := range sweep {
		if ev.kind == "start" {
			running++
		} else {
			running--
		}
		most = max(most, running)
	}
	if most > slots {
		t.Fatalf("%d commands ran at once, with %d slots", most, slots)
	}
	// Per slot: the slot is 1..slots, the runs do not overlap, and tokens
	// increase in start order.
	endOf := map[string]int64{}
	for _, ev := range ends {
		endOf[ev.tag] = ev.mono
	}
	bySlot := map[int][]event{}
	for _, ev := range starts {
		if ev.slot < 1 || ev.slot > slots {
			t.Fatalf("%s: TENURE_SLOT %d, want 1 to %d", ev.tag, ev.slot, slots)
		}
		bySlot[ev.slot] = append(bySlot[ev.slot], ev)
	}
	for slot, runs := range bySlot {
		sort.Slice(runs, func(i, j int) bool { return runs[i].mono < runs[j].mono })
		for i := 1; i < len(runs); i++ {
			if runs[i].token <= runs[i-1].token {
				t.Fatalf("slot %d: token %d after %d", slot, runs[i].token, runs[i-1].token)
			}
			if endOf[runs[i-1].tag] > runs[i].mono {
				t.Fatalf("slot %d: %s started before %s ended", slot, runs[i].tag, runs[i-1].tag)
			}
		}
	}
	t.Logf("%d commands on %d slots: at most %d at once; runs per slot: %v", n, slots, most, func() map[int]int {
		m := map[int]int{}
		for s, r := range bySlot {
			m[s] = len(r)
		}
		return m
	}())
}

// With every slot held: --no-wait exits 75 naming the holders, and so does
// --wait when it runs out; status and list say "2 of 2 slots held" and who
// holds them; a holder that asks for another number of slots is refused.
func TestSlotsHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	var holders []*proc
	owners := map[string]bool{}
	for i, name := range []string{"alpha", "beta"} {
		p := e.start(name, startOpt{stdinPipe: true}, "run", "--slots", "2", "--owner", name, "backups", "--",
			helper("-ready", e.path(name+".ready"), "-hold", "stdin"))
		info := waitReady(t, e.path(name+".ready"), 10*time.Second)
		owners[info.owner] = true
		holders = append(holders, p)
		_ = i
	}
	for _, args := range [][]string{
		{"run", "--slots", "2", "--no-wait", "backups", "--", "true"},
		{"run", "--slots", "2", "--wait", "500ms", "backups", "--", "true"},
	} {
		code, _, stderr := e.run(args)
		if code != exitNotAcquired || !strings.Contains(stderr, "all 2 slots") || !strings.Contains(stderr, "alpha#") || !strings.Contains(stderr, "beta#") {
			t.Errorf("%q: exit %d, want %d naming both holders:\n%s", args, code, exitNotAcquired, stderr)
		}
	}
	code, _, stderr := e.run("run", "--slots", "3", "--no-wait", "backups", "--", "true")
	if code != exitSlotsMismatch || !strings.Contains(stderr, "semaphore of 2 slots") {
		t.Errorf("--slots 3 with holders of 2 slots: exit %d, want %d saying the resource is a semaphore of 2 slots:\n%s", code, exitSlotsMismatch, stderr)
	}

	code, stdout, _ := e.run("status", "backups")
	if code != 0 || !strings.Contains(stdout, "2 of 2 slots held") || !strings.Contains(stdout, "slot 1 of 2") || !strings.Contains(stdout, "slot 2 of 2") {
		t.Errorf("status backups: exit %d:\n%s", code, stdout)
	}
	for o := range owners {
		if !strings.Contains(stdout, o) {
			t.Errorf("status backups should name %s:\n%s", o, stdout)
		}
	}
	code, stdout, _ = e.run("status", "--json", "backups")
	var st leaseJSON
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil || !st.Held || st.Slots != 2 || st.SlotsHeld != 2 || len(st.Holders) != 2 ||
		st.Holders[0].Semaphore != "backups" || st.Holders[0].Slot != 1 || !owners[st.Holders[0].Owner] {
		t.Errorf("status --json backups: exit %d, %v: %s", code, err, stdout)
	}
	code, stdout, _ = e.run("list")
	if code != 0 || !strings.Contains(stdout, "(2 of 2 slots held)") || !strings.Contains(stdout, "backups/slot-1-of-2") {
		t.Errorf("list: exit %d:\n%s", code, stdout)
	}
	code, _, stderr = e.run("release", "--force", "backups")
	if code != exitFree || !strings.Contains(stderr, "semaphore") || !strings.Contains(stderr, "backups/slot-") {
		t.Errorf("release of a semaphore's name: exit %d, want %d saying how to release a slot:\n%s", code, exitFree, stderr)
	}

	for _, p := range holders {
		p.stdin.Close()
		if code := p.wait(10 * time.Second); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, p.stderr())
		}
	}
	// The semaphore is free, and still a semaphore of 2 slots until its
	// marker expires: status and list say so (status said "is free" while
	// list showed the marker).
	if code, stdout, _ := e.run("status", "backups"); code != exitFree || !strings.Contains(stdout, "semaphore of 2 slots, none held") {
		t.Errorf("status after the holders ended: exit %d, want %d saying it is a semaphore of 2 slots:\n%s", code, exitFree, stdout)
	}
	code, stdout, _ = e.run("status", "--json", "backups")
	st = leaseJSON{}
	if err := json.Unmarshal([]byte(stdout), &st); code != exitFree || err != nil || st.Held || st.Slots != 2 || st.SlotsHeld != 0 {
		t.Errorf("status --json after the holders ended: exit %d, %v: %s", code, err, stdout)
	}
	if code, stdout, _ := e.run("list"); code != 0 || !strings.Contains(stdout, "(0 of 2 slots held)") || !strings.Contains(stdout, "backups/slots") {
		t.Errorf("list after the holders ended: exit %d:\n%s", code, stdout)
	}
}

// markerOf reads the marker lease that the library writes (its owner
// string is the library's: the two must stay in step), and nothing else.
func TestMarkerOfReadsTheLibrarysMarker(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	lk, _ := tenure.New(mem)
	sem, _ := lk.Semaphore("jobs", 7)
	sl, err := sem.TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Release(ctx)
	rec, err := mem.Get(ctx, tenure.MarkerName("jobs"))
	if err != nil {
		t.Fatal(err)
	}
	if r, n, ok := markerOf(rec); !ok || r != "jobs" || n != 7 {
		t.Fatalf("markerOf(%+v) = %q, %d, %v; want jobs, 7", rec, r, n, ok)
	}
	for _, rec := range []tenure.Record{
		{Resource: "jobs/slots", Owner: "someone#1.1"},
		{Resource: "jobs/slots", Owner: "tenure semaphore of 0 slots"},
		{Resource: "jobs/slots", Owner: "tenure semaphore of 7"},
		{Resource: "jobs/slot-1-of-7", Owner: "tenure semaphore of 7 slots"},
	} {
		if _, _, ok := markerOf(rec); ok {
			t.Errorf("markerOf(%+v) took it for a marker", rec)
		}
	}
}
