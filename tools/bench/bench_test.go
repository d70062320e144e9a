package bench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure/internal/naming"
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
	owner, _ := naming.NewOwner("t")
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
// everything it reports adds up (no timing is checked, nor how the
// goroutine count moves: goroutines of the warm-up may still be ending
// when the base is counted, so the peak can be below it).
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
	if !res.Batched || res.BatchCalls == 0 {
		t.Errorf("the memory store renews in batches: batched %v, %d batch calls", res.Batched, res.BatchCalls)
	}
	if res.Renewals == 0 || res.SendLag.N != int(res.Renewals) || res.ConfirmGap.N != int(res.Renewals) || res.RenewLatency.N != int(res.Renewals) {
		t.Errorf("renewals %d; samples %d %d %d", res.Renewals, res.SendLag.N, res.ConfirmGap.N, res.RenewLatency.N)
	}
	if res.HeapWith == 0 || res.GoroutinesPeak <= 0 || res.IntervalS != 0.2 {
		t.Errorf("%+v", res)
	}
}

// TestRunScalePaced: with AcquireRate, the i-th acquire starts no sooner
// than i/rate after the first, so 40 leases at 40 a second take at least
// 0.975 s (a lower bound only: a slow machine makes it longer).
func TestRunScalePaced(t *testing.T) {
	tg, err := Open(context.Background(), "memory")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	res, err := RunScale(context.Background(), tg, ScaleConfig{Leases: 40, TTL: 3 * time.Second, Duration: 100 * time.Millisecond, Slack: time.Second, AcquireRate: 40, Prefix: "paced"})
	if err != nil {
		t.Fatal(err)
	}
	if res.AcquireErrors != 0 || res.AcquireRate != 40 {
		t.Fatalf("%+v", res)
	}
	if res.AcquireS < 0.975 {
		t.Errorf("40 leases paced at 40 a second taken in %.3f s", res.AcquireS)
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

// unsafeSystem grants every acquire: a broken lock, for the overlap count.
type unsafeSystem struct{}

func (unsafeSystem) Name() string                     { return "unsafe" }
func (unsafeSystem) Ops() []string                    { return []string{OpAcquire, OpRelease} }
func (unsafeSystem) NewClient(string) (Client, error) { return unsafeClient{}, nil }

type unsafeClient struct{}

func (unsafeClient) Acquire(context.Context, string, time.Duration) error { return nil }
func (unsafeClient) Renew(context.Context) error                          { return nil }
func (unsafeClient) Release(context.Context) error                        { return nil }
func (unsafeClient) Close()                                               {}

// TestRunOpsOverlaps checks that the contended mode's overlap count
// catches a lock that grants everyone, and finds none for tenure.
func TestRunOpsOverlaps(t *testing.T) {
	tg, err := Open(context.Background(), "memory")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	res, err := RunOps(context.Background(), tg, []System{tg.Tenure(), unsafeSystem{}}, OpsConfig{
		Mode: ModeContended, Clients: 4, Duration: time.Minute, Rounds: 1, MaxCycles: 50, TTL: time.Minute,
		Prefix: "t", Hold: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results", len(res))
	}
	if res[0].System != "tenure" || res[0].Overlaps != 0 || res[0].Errors != 0 {
		t.Errorf("tenure: %d overlaps, %d errors (%s)", res[0].Overlaps, res[0].Errors, res[0].FirstError)
	}
	if res[1].System != "unsafe" || res[1].Overlaps == 0 {
		t.Errorf("unsafe: %d overlaps in %d grants; want some", res[1].Overlaps, grantsOf(res[1]))
	}
}

func TestComputeRatios(t *testing.T) {
	ops := func(store, sys, mode string, clients int, acq, renew, rel, perS float64, overlaps int64) *OpsResult {
		o := &OpsResult{Phase: PhasePeers, Store: store, System: sys, Mode: mode, Clients: clients, Overlaps: overlaps, Ops: map[string]*OpResult{
			OpAcquire: {Summary: Summary{N: 1, P50Ms: acq}, PerS: perS}, OpRelease: {Summary: Summary{N: 1, P50Ms: rel}},
		}}
		if renew > 0 {
			o.Ops[OpRenew] = &OpResult{Summary: Summary{N: 1, P50Ms: renew}}
		}
		return o
	}
	r := &Report{Ops: []*OpsResult{
		ops("redis", "tenure", ModeDistinct, 1, 0.1, 0.1, 0.1, 100, 0),
		ops("redis", PeerRedislock, ModeDistinct, 1, 0.05, 0.1, 0.2, 200, 0),
		ops("redis", "tenure", ModeContended, 8, 0.3, 0, 0.3, 50, 0),
		ops("redis", PeerRedislock, ModeContended, 8, 0.3, 0, 0.3, 100, 2),
		ops("postgres", "tenure", ModeDistinct, 1, 1, 1, 1, 10, 0),
		ops("postgres", PeerPgAdvisory, ModeDistinct, 1, 0.5, 0, 0.5, 20, 0),
		ops("postgres", PeerPglock, ModeDistinct, 1, 2, 2, 0.9, 5, 0),
		// The ops phase: not a peers result.
		{Store: "redis", System: PeerRedislock, Mode: ModeDistinct, Clients: 8, Ops: map[string]*OpResult{}},
	}}
	r.Evaluate()
	if len(r.Ratios) != 4 {
		t.Fatalf("%d ratios: %+v", len(r.Ratios), r.Ratios)
	}
	pg, pl, rd, rc := r.Ratios[0], r.Ratios[1], r.Ratios[2], r.Ratios[3]
	if pl.Peer != PeerPglock || pl.Acquire != 0.5 || pl.Release != 1.111 || pl.Throughput != 2 {
		t.Errorf("postgres against pglock: %+v", pl)
	}
	if pg.Store != "postgres" || pg.Acquire != 2 || pg.Renew != 0 || pg.Release != 2 || pg.Throughput != 0.5 {
		t.Errorf("postgres: %+v", pg)
	}
	if rd.Mode != ModeDistinct || rd.Acquire != 2 || rd.Renew != 1 || rd.Release != 0.5 || rd.Throughput != 0.5 {
		t.Errorf("redis distinct: %+v", rd)
	}
	if rc.Mode != ModeContended || rc.TenureWinsPerS != 50 || rc.PeerWinsPerS != 100 || rc.PeerOverlaps != 2 || rc.Renew != 0 {
		t.Errorf("redis contended: %+v", rc)
	}
	if r.Peers[PeerRedislock] == "" || r.Peers[PeerPgAdvisory] == "" {
		t.Errorf("versions: %v", r.Peers)
	}
	// Redis against redislock: acquire 2× fails the 1.1× target.
	wantFailedCheck(t, r, "Redis: every operation")
	// PostgreSQL against pglock: release 1.11× fails the 1.0× target.
	wantFailedCheck(t, r, "PostgreSQL: release")
}

// wantFailedCheck fails t unless r has checks whose target starts with
// prefix, and none of them passed.
func wantFailedCheck(t *testing.T, r *Report, prefix string) {
	t.Helper()
	found := false
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Target, prefix) {
			found = true
			if c.Pass {
				t.Errorf("%+v", c)
			}
		}
	}
	if !found {
		t.Errorf("no check %q: %+v", prefix, r.Checks)
	}
}

// TestRunSemaphoreShape runs the semaphore phase on memory: no more
// holders than slots, every grant counted for one client.
func TestRunSemaphoreShape(t *testing.T) {
	tg, err := Open(context.Background(), "memory")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	res, err := RunSemaphore(context.Background(), tg, SemaphoreConfig{Slots: 3, Clients: 8, Duration: 300 * time.Millisecond, Hold: time.Millisecond, Prefix: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var wins int64
	for _, w := range res.Wins {
		wins += w
	}
	grants, held := 0, 0
	if o := res.Ops[OpAcquire]; o != nil {
		grants = o.N
	}
	if o := res.Ops["acquire-held"]; o != nil {
		held = o.N
	}
	if res.Errors != 0 || grants == 0 || int64(grants) != wins || int64(grants+held) != res.Attempts || res.Ops[OpRelease].N != grants {
		t.Errorf("%d attempts, %d granted, %d held, wins %v, %d errors (%s)", res.Attempts, grants, held, res.Wins, res.Errors, res.FirstError)
	}
	if res.Overlaps != 0 || res.MaxHolders > 3 || res.MaxHolders < 1 || res.Fairness <= 0 || res.Fairness > 1 {
		t.Errorf("%+v", res)
	}
}

// TestRunWaitersSQLite hands one resource down 10 waiters on SQLite.
func TestRunWaitersSQLite(t *testing.T) {
	tg := openSQLite(t)
	res, err := RunWaiters(context.Background(), tg, WaitersConfig{
		Waiters: 10, Settle: 300 * time.Millisecond, Window: 200 * time.Millisecond, Timeout: time.Minute, Prefix: "t",
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Grants != 10 || res.Errors != 0 || res.Wait.N != 10 || res.Queue.N != 10 || res.Unit != KindTransaction {
		t.Fatalf("%+v", res)
	}
	if res.CallsWaiting <= 0 || res.CallsAfterRelease <= 0 || res.CallsHandDown <= 0 || res.CallsPerGrant <= 0 {
		t.Errorf("calls: %+v", res)
	}
	if res.OrderInversions < 0 || res.OrderInversions > 1 || res.Handover.N != 10 {
		t.Errorf("%+v", res)
	}
}
