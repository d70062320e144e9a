//go:build linux

package main

// tenure run --shared and --exclusive: any number of shared runs of a
// resource at once, never beside an exclusive one, tokens in grant order
// across both modes; status and list show the shared holders.

import (
	"encoding/json"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// storesForCLI returns SQLite ("") and every network store configured.
func storesForCLI() map[string]string {
	stores := map[string]string{"sqlite": ""}
	for name, url := range networkStoresOrNone() {
		stores[name] = url
	}
	return stores
}

// Three shared runs hold together; an exclusive --no-wait is refused
// naming them; status and list show them; an exclusive run that waits
// holds the resource alone after them, and a shared run that came while
// it waited runs after it; tokens grow in that order.
func TestRunShared(t *testing.T) {
	t.Parallel()
	for name, url := range storesForCLI() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if url != "" {
				e.store = url
			}
			e.init()
			r := uniqueResource("shared")
			out := e.path("events")
			var readers []*proc
			for i := range 3 {
				tag := "s" + strconv.Itoa(i)
				readers = append(readers, e.start(tag, startOpt{stdinPipe: true}, "run", "--shared", "--wait", "120s", "--ttl", "5s", r, "--",
					helper("-out", out, "-tag", tag, "-hold", "stdin")))
			}
			waitFor(t, 120*time.Second, "three shared runs at once", func() bool { return len(filter(readEvents(t, out), "start")) == 3 })

			code, _, stderr := e.run("run", "--no-wait", r, "--", "true")
			if code != exitNotAcquired || !strings.Contains(stderr, "3 shared holders") {
				t.Fatalf("an exclusive --no-wait beside 3 shared runs: exit %d, stderr:\n%s", code, stderr)
			}
			code, stdout, stderr := e.run("status", r)
			if code != 0 || !strings.Contains(stdout, "3 shared holders") || strings.Count(stdout, "shared holder:") != 3 {
				t.Fatalf("status: exit %d:\n%s%s", code, stdout, stderr)
			}
			code, stdout, stderr = e.run("list")
			if code != 0 || !strings.Contains(stdout, "(3 shared holders)") {
				t.Fatalf("list: exit %d:\n%s%s", code, stdout, stderr)
			}
			code, stdout, _ = e.run("list", "--json", r)
			var recs []leaseJSON
			if err := json.Unmarshal([]byte(stdout), &recs); code != 0 || err != nil || len(recs) != 3 || recs[0].Mode != "shared" || recs[0].Lock != r {
				t.Fatalf("list --json: exit %d (%v):\n%s", code, err, stdout)
			}

			writer := e.start("x", startOpt{}, "run", "--wait", "120s", "--ttl", "5s", r, "--", helper("-out", out, "-tag", "x", "-hold", "100ms"))
			waitFor(t, 120*time.Second, "the exclusive run to hold the resource, waiting for the shared runs", func() bool {
				_, stdout, _ := e.run("status", "--json", r)
				var j leaseJSON
				return json.Unmarshal([]byte(stdout), &j) == nil && j.Mode == "exclusive-waiting" && j.SharedHeld == 3
			})
			late := e.start("late", startOpt{}, "run", "--shared", "--wait", "120s", "--ttl", "5s", r, "--", helper("-out", out, "-tag", "late", "-hold", "100ms"))
			// Let the late shared run try while the exclusive one waits.
			time.Sleep(300 * time.Millisecond)
			if evs := filter(readEvents(t, out), "start"); len(evs) != 3 {
				t.Fatalf("%d commands started while the exclusive run waited for the shared ones; want the 3 shared", len(evs))
			}
			for _, p := range readers {
				p.stdin.Close()
			}
			for _, p := range append(readers, writer, late) {
				if code := p.wait(120 * time.Second); code != 0 {
					t.Fatalf("%s exited %d; stderr:\n%s", p.name, code, p.stderr())
				}
			}
			evs := readEvents(t, out)
			at := map[string]event{}
			endAt := map[string]int64{}
			for _, ev := range evs {
				switch ev.kind {
				case "start":
					at[ev.tag] = ev
				case "end":
					endAt[ev.tag] = ev.mono
				}
			}
			x, l := at["x"], at["late"]
			for i := range 3 {
				s := at["s"+strconv.Itoa(i)]
				if x.mono < endAt[s.tag] {
					t.Errorf("the exclusive run started before shared run %s ended", s.tag)
				}
				if x.token <= s.token {
					t.Errorf("exclusive token %d, not above shared token %d granted before it", x.token, s.token)
				}
			}
			if l.mono < endAt["x"] || l.token <= x.token {
				t.Errorf("the late shared run started at %d (token %d); the exclusive run ended at %d (token %d)", l.mono, l.token, endAt["x"], x.token)
			}
		})
	}
}

// Shared and exclusive runs at once, in random modes: never a command
// beside an exclusive one, and each exclusive token above every token
// started before it and below every token started after it ended.
func TestRunSharedExclusiveMix(t *testing.T) {
	t.Parallel()
	for name, url := range storesForCLI() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if url != "" {
				e.store = url
			}
			e.init()
			r := uniqueResource("mix")
			out := e.path("events")
			const n = 10
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
			exclusive := map[string]bool{}
			var procs []*proc
			for i := range n {
				tag := "p" + strconv.Itoa(i)
				mode := "--shared"
				if i%3 == 0 || rng.IntN(4) == 0 {
					mode, exclusive[tag] = "--exclusive", true
				}
				procs = append(procs, e.start(tag, startOpt{}, "run", mode, "--wait", "120s", "--ttl", "5s", r, "--",
					helper("-out", out, "-tag", tag, "-hold", "100ms")))
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
			endOf := map[string]int64{}
			for _, ev := range ends {
				endOf[ev.tag] = ev.mono
			}
			sort.Slice(starts, func(i, j int) bool { return starts[i].mono < starts[j].mono })
			for _, x := range starts {
				if !exclusive[x.tag] {
					continue
				}
				for _, o := range starts {
					if o.tag == x.tag {
						continue
					}
					if o.mono < endOf[x.tag] && endOf[o.tag] > x.mono {
						t.Errorf("%s ran beside the exclusive run %s", o.tag, x.tag)
					}
					if o.mono < x.mono && o.token >= x.token {
						t.Errorf("%s (token %d) started before the exclusive run %s (token %d)", o.tag, o.token, x.tag, x.token)
					}
					if o.mono > endOf[x.tag] && o.token <= x.token {
						t.Errorf("%s (token %d) started after the exclusive run %s (token %d) ended", o.tag, o.token, x.tag, x.token)
					}
				}
			}
		})
	}
}

func TestRunSharedBadFlags(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, args := range [][]string{
		{"run", "--shared", "--exclusive", "r", "--", "true"},
		{"run", "--shared", "--slots", "2", "r", "--", "true"},
		{"run", "--exclusive", "--slots", "2", "r", "--", "true"},
		{"run", "--shared", strings.Repeat("x", 240), "--", "true"},
	} {
		if code, _, stderr := e.run(args); code != exitUsage {
			t.Errorf("tenure %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, exitUsage, stderr)
		}
	}
	// A name too long for shared holders: the exclusive run is a plain lease.
	if code, _, stderr := e.run("run", strings.Repeat("x", 240), "--", "true"); code != 0 {
		t.Errorf("exclusive run of a 240-byte name: exit %d:\n%s", code, stderr)
	}
}
