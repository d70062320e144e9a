//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenure-go/tenure/tools/bench"
)

// benchBin is the tenure-bench binary the tests run (the failover phase
// starts it as candidate processes).
var benchBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tenure-bench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	benchBin = filepath.Join(dir, "tenure-bench")
	if out, err := exec.Command("go", "build", "-o", benchBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestBenchShort runs every phase of tenure-bench on memory and a SQLite
// file with tiny settings, and checks the output's shape and the counts
// (never the timings).
func TestBenchShort(t *testing.T) {
	dir := t.TempDir()
	jsonFile := filepath.Join(dir, "bench.json")
	cmd := exec.Command(benchBin,
		"--sqlite", "sqlite:"+filepath.Join(dir, "leases.db"),
		"--clients", "1,2", "--contended", "3", "--duration", "400ms", "--rounds", "2", "--max-samples", "40",
		"--cost-cycles", "4",
		"--scale-leases", "100", "--scale-ttl", "3s", "--scale-duration", "2s",
		"--handoffs", "2", "--candidates", "2", "--failover-ttl", "1s", "--failover-retry", "200ms",
		"--json", jsonFile)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("tenure-bench: %v\n%s\n%s", err, out, stderr)
	}
	text := string(out)
	for _, want := range []string{
		"Operations, every client on its own resource", "Contended:", "Store requests per operation",
		"Scale: sqlite, 100 leases", "Failover between candidate processes", "Performance targets (",
		"sqlite: 100 leases renewed with 0 lost", "sqlite: release → new leader p50 under one retry period",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	b, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var r bench.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Errors) > 0 || r.Machine.CPUs == 0 || r.Config["prefix"] == "" {
		t.Errorf("errors %v, machine %+v, config %v", r.Errors, r.Machine, r.Config)
	}

	// Operations: memory and SQLite, 1 and 2 clients on distinct resources
	// (40 cycles each: --max-samples), 3 contended clients.
	type key struct {
		store, mode string
		clients     int
	}
	seen := map[key]*bench.OpsResult{}
	for _, o := range r.Ops {
		if o.System != "tenure" {
			t.Errorf("unexpected system %q", o.System)
		}
		seen[key{o.Store, o.Mode, o.Clients}] = o
	}
	for _, store := range []string{"memory", "sqlite"} {
		for _, c := range []int{1, 2} {
			o := seen[key{store, bench.ModeDistinct, c}]
			if o == nil {
				t.Errorf("%s, %d clients: missing", store, c)
				continue
			}
			if o.Errors != 0 || o.Cycles == 0 || o.Cycles > 40 {
				t.Errorf("%s, %d clients: %d cycles, %d errors (%s)", store, c, o.Cycles, o.Errors, o.FirstError)
			}
			for _, op := range []string{bench.OpAcquire, bench.OpRenew, bench.OpRelease} {
				if o.Ops[op] == nil || int64(o.Ops[op].N) != o.Cycles {
					t.Errorf("%s, %d clients, %s: %+v, %d cycles", store, c, op, o.Ops[op], o.Cycles)
				}
			}
			// One client: a transaction per operation; more share them.
			if store == "sqlite" && (o.PerCycle > 3 || o.PerCycle < 1 || c == 1 && (o.PerCycle != 3 || o.Requests[bench.KindRowWrite] != 4*o.Cycles)) {
				t.Errorf("sqlite, %d clients: %v transactions per cycle (%v); want 3 (1 client), at most 3", c, o.PerCycle, o.Requests)
			}
		}
		if o := seen[key{store, bench.ModeContended, 3}]; o == nil || o.Ops[bench.OpAcquire] == nil {
			t.Errorf("%s contended: %+v", store, o)
		}
	}

	// Costs, counted by SQLite's commit, rollback and pre-update hooks: one
	// transaction each, and the rows written.
	want := map[string]float64{bench.CostAcquireNew: 2, bench.CostAcquire: 2, bench.CostAcquireHeld: 0, bench.CostRenew: 1, bench.CostRelease: 1}
	for _, c := range r.Costs {
		if c.Store != "sqlite" || c.Unit != bench.KindTransaction {
			t.Errorf("cost %+v", c)
			continue
		}
		if c.Mean != 1 || c.Min != c.Max || c.PerOp[bench.KindRowWrite] != want[c.Op] {
			t.Errorf("%s: %+v; want 1 transaction, %v row writes", c.Op, c, want[c.Op])
		}
		delete(want, c.Op)
	}
	if len(want) != 0 {
		t.Errorf("costs missing: %v", want)
	}

	// Scale: SQLite only (the default --scale-stores), 100 leases.
	if len(r.Scale) != 1 {
		t.Errorf("scale: %d results; want 1", len(r.Scale))
	} else if s := r.Scale[0]; s.Store != "sqlite" || s.Leases != 100 || s.AcquireErrors != 0 || s.Renewals == 0 ||
		s.RenewLatency.N != int(s.Renewals) || s.Requests[bench.KindTransaction] == 0 {
		t.Errorf("scale: %+v", *s)
	}

	// Failover: SQLite, kill and release, 2 handoffs each.
	kinds := map[string]bool{}
	for _, f := range r.Failover {
		kinds[f.Kind] = true
		if f.Store != "sqlite" || f.Handoff.N != 2 || f.TokenErrors != 0 || f.Candidates != 2 {
			t.Errorf("failover: %+v", f)
		}
	}
	if !kinds[bench.FailoverKill] || !kinds[bench.FailoverRelease] {
		t.Errorf("failover kinds: %v", kinds)
	}
	if len(r.Checks) == 0 {
		t.Error("no targets checked")
	}
}

// TestBenchWaitersSemaphore runs the waiters and semaphore phases on a
// SQLite file with tiny settings and checks the JSON's shape.
func TestBenchWaitersSemaphore(t *testing.T) {
	dir := t.TempDir()
	jsonFile := filepath.Join(dir, "bench.json")
	cmd := exec.Command(benchBin, "--skip", "memory", "--sqlite", "sqlite:"+filepath.Join(dir, "leases.db"),
		"--phases", "waiters,semaphore", "--waiters", "5", "--waiters-settle", "300ms", "--waiters-window", "200ms",
		"--sem-clients", "4", "--sem-slots", "2", "--sem-duration", "300ms", "--json", jsonFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tenure-bench: %v\n%s", err, out)
	}
	b, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var r bench.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Waiters) != 1 || r.Waiters[0].Store != "sqlite" || r.Waiters[0].Grants != 5 || r.Waiters[0].Waiters != 5 {
		t.Errorf("waiters: %+v", r.Waiters)
	}
	if len(r.Semaphores) != 1 || r.Semaphores[0].Slots != 2 || len(r.Semaphores[0].Wins) != 4 || r.Semaphores[0].Overlaps != 0 {
		t.Errorf("semaphores: %+v", r.Semaphores)
	}
	if len(r.Ops) != 0 || len(r.Errors) != 0 {
		t.Errorf("ops %d, errors %v", len(r.Ops), r.Errors)
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--phases", "nope"},
		{"--clients", "0"},
		{"extra"},
		{"--candidates", "1"},
		{"--peer-clients", "0"},
		{"--sem-slots", "0"},
		{"--waiters-settle", "1s", "--waiters-window", "2s"},
		{"--scale-leases", "0"},
		{"--scale-acquire-rate", "-1"},
		{"--scale-acquire-rate", "NaN"},
		{"--store", "bogus://x", "candidate"},
	} {
		cmd := exec.Command(benchBin, args...)
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitUsage {
			t.Errorf("%v: %v; want exit code %d", args, err, exitUsage)
		}
	}
}
