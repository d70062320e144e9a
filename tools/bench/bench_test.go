package bench

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
)

func TestSummarizeNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	s := Summarize(d)
	if s.N != 100 || s.MinMs != 1 || s.P50Ms != 50 || s.P90Ms != 90 || s.P99Ms != 99 || s.MaxMs != 100 || s.MeanMs != 50.5 {
		t.Fatalf("%+v", s)
	}
	if s := Summarize([]time.Duration{7 * time.Millisecond}); s.P50Ms != 7 || s.P99Ms != 7 {
		t.Fatalf("one sample: %+v", s)
	}
	if s := Summarize(nil); s.N != 0 {
		t.Fatalf("no samples: %+v", s)
	}
}

func openSQLite(t *testing.T) *Target {
	t.Helper()
	tg, err := Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "leases.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

// TestSQLiteCounts checks the transaction and row-write counts against the
// SQLite store (store/sqlite): one operation at a time, each is one
// transaction; a grant writes the lease's row and the token counter's, a
// renewal and a release one row each, an acquire of a held resource none;
// Get is no transaction.
func TestSQLiteCounts(t *testing.T) {
	tg := openSQLite(t)
	costs, err := RunCost(context.Background(), tg, tg.Tenure(), "test", time.Minute, 5)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]float64{ // transactions, row writes
		CostAcquireNew:  {1, 2},
		CostAcquire:     {1, 2},
		CostAcquireHeld: {1, 0},
		CostRenew:       {1, 1},
		CostRelease:     {1, 1},
	}
	for _, c := range costs {
		w, ok := want[c.Op]
		if !ok {
			t.Errorf("unexpected operation %q", c.Op)
			continue
		}
		delete(want, c.Op)
		if c.PerOp[KindTransaction] != w[0] || c.PerOp[KindRowWrite] != w[1] || c.Min != c.Max || c.Unit != KindTransaction {
			t.Errorf("%s: %+v; want %v transactions and %v row writes each", c.Op, c, w[0], w[1])
		}
	}
	if len(want) > 0 {
		t.Errorf("not counted: %v", want)
	}

	// Acquire by the holder (renews: one row) and Get (no transaction).
	ctx := context.Background()
	owner, _ := tenure.NewOwner("t")
	if _, err := tg.Store.Acquire(ctx, "r", owner, time.Minute); err != nil {
		t.Fatal(err)
	}
	before := tg.Meter.Snapshot()
	if _, err := tg.Store.Acquire(ctx, "r", owner, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := tg.Meter.Snapshot().Sub(before); d[KindTransaction] != 1 || d[KindRowWrite] != 1 {
		t.Errorf("acquire by the holder: %v", d)
	}
	before = tg.Meter.Snapshot()
	if _, err := tg.Store.Get(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if d := tg.Meter.Snapshot().Sub(before); d[KindTransaction] != 0 || d[KindRowWrite] != 0 {
		t.Errorf("get: %v", d)
	}
}

func TestRunOpsCounts(t *testing.T) {
	for _, name := range []string{"memory", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			var tg *Target
			if name == "memory" {
				var err error
				if tg, err = Open(context.Background(), "memory"); err != nil {
					t.Fatal(err)
				}
				defer tg.Close()
			} else {
				tg = openSQLite(t)
			}
			res, err := RunOps(context.Background(), tg, tg.Systems(), OpsConfig{
				Mode: ModeDistinct, Clients: 3, Duration: time.Minute, Rounds: 2, MaxCycles: 10, TTL: time.Minute, Prefix: "t",
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 1 {
				t.Fatalf("%d results", len(res))
			}
			r := res[0]
			if r.Cycles != 60 || r.Errors != 0 || r.FirstError != "" {
				t.Fatalf("%d cycles, %d errors (%s); want 60 and 0", r.Cycles, r.Errors, r.FirstError)
			}
			for _, op := range []string{OpAcquire, OpRenew, OpRelease} {
				if r.Ops[op] == nil || r.Ops[op].N != 60 {
					t.Errorf("%s: %+v", op, r.Ops[op])
				}
			}
			// Three clients at once share transactions: at most 3 per
			// cycle, and at most 4 row writes (the lease's row three times,
			// the counter at most once).
			if name == "sqlite" && (r.PerCycle > 3 || r.PerCycle < 1 || r.Requests[KindRowWrite] > 4*60 || r.Requests[KindRowWrite] < 3*60) {
				t.Errorf("requests %v, %v transactions per cycle; want at most 3 per cycle and 3 to 4 row writes", r.Requests, r.PerCycle)
			}

			res, err = RunOps(context.Background(), tg, tg.Systems(), OpsConfig{
				Mode: ModeContended, Clients: 4, Duration: time.Minute, Rounds: 1, MaxCycles: 25, TTL: time.Minute, Prefix: "t",
			})
			if err != nil {
				t.Fatal(err)
			}
			r = res[0]
			granted, held := 0, 0
			if o := r.Ops[OpAcquire]; o != nil {
				granted = o.N
			}
			if o := r.Ops["acquire-held"]; o != nil {
				held = o.N
			}
			if r.Cycles != 100 || int64(granted+held) != r.Cycles-r.Errors || granted == 0 || r.Ops[OpRelease].N != granted {
				t.Errorf("contended: %d attempts, %d granted, %d held, %d errors (%s), %+v released", r.Cycles, granted, held, r.Errors, r.FirstError, r.Ops[OpRelease])
			}
		})
	}
}

// TestRunScaleShape runs a small scale phase on memory and checks that
// everything it reports adds up (no timing is checked).
func TestRunScaleShape(t *testing.T) {
	tg, err := Open(context.Background(), "memory")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	res, err := RunScale(context.Background(), tg, ScaleConfig{Leases: 200, TTL: 600 * time.Millisecond, Duration: time.Second, Slack: time.Second, Prefix: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Leases != 200 || res.AcquireErrors != 0 || res.ReleaseErrors != 0 {
		t.Fatalf("%+v", res)
	}
	if res.Renewals == 0 || res.SendLag.N != int(res.Renewals) || res.ConfirmGap.N != int(res.Renewals) || res.RenewLatency.N != int(res.Renewals) {
		t.Errorf("renewals %d; samples %d %d %d", res.Renewals, res.SendLag.N, res.ConfirmGap.N, res.RenewLatency.N)
	}
	if res.HeapWith == 0 || res.GoroutinesPeak < res.GoroutinesBase || res.IntervalS != 0.2 {
		t.Errorf("%+v", res)
	}
}

func TestEvaluate(t *testing.T) {
	ops := func(sys string, clients int, acq, renew float64) *OpsResult {
		return &OpsResult{Store: "cassandra", System: sys, Mode: ModeDistinct, Clients: clients, Ops: map[string]*OpResult{
			OpAcquire: {Summary: Summary{N: 1, P50Ms: acq}}, OpRenew: {Summary: Summary{N: 1, P50Ms: renew}},
		}}
	}
	r := &Report{
		Ops: []*OpsResult{ops("tenure", 1, 3, 3), ops("jaeger-protocol", 1, 3, 6), ops("raw-lwt", 1, 3, 0), ops("tenure-new-names", 1, 3.5, 3)},
		Costs: []*CostResult{
			{Store: "cassandra", System: "tenure", Op: CostRenew, Min: 1, Max: 1, Mean: 1, Samples: 3},
			{Store: "cassandra", System: "jaeger-protocol", Op: CostRenew, Min: 2, Max: 2, Mean: 2, Samples: 3},
		},
		Failover: []*FailoverResult{{Store: "sqlite", Kind: FailoverRelease, RetryS: 1, Handoff: Summary{N: 50, P50Ms: 400}}},
	}
	r.Evaluate()
	pass := map[bool]int{}
	for _, c := range r.Checks {
		pass[c.Pass]++
	}
	// 1 LWT: pass; renew 0.5×: pass; acquire 1.0×: pass; new names 1.17×:
	// fail; release 400 ms < 1 s: pass.
	if pass[true] != 4 || pass[false] != 1 {
		t.Fatalf("%+v", r.Checks)
	}
}
