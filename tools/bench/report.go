package bench

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is everything one `tenure-bench` run measured; it is what -json
// writes.
type Report struct {
	Version  int               `json:"version"`
	Started  time.Time         `json:"started"`
	Finished time.Time         `json:"finished"`
	Command  string            `json:"command"`
	Machine  Machine           `json:"machine"`
	Config   map[string]string `json:"config"`
	Ops      []*OpsResult      `json:"ops"`
	Costs    []*CostResult     `json:"costs"`
	Scale    []*ScaleResult    `json:"scale,omitempty"`
	Failover []*FailoverResult `json:"failover,omitempty"`
	// Ratios are tenure's figures over each peer's, from the peers phase
	// of this run.
	Ratios     []*Ratio           `json:"ratios,omitempty"`
	Peers      map[string]string  `json:"peer_versions,omitempty"`
	Waiters    []*WaitersResult   `json:"waiters,omitempty"`
	Semaphores []*SemaphoreResult `json:"semaphores,omitempty"`
	Checks     []Check            `json:"checks"`
	Errors     []string           `json:"errors,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int        `json:"cpus"`
	CPUModel  string     `json:"cpu_model,omitempty"`
	GOOS      string     `json:"goos"`
	GOARCH    string     `json:"goarch"`
	Go        string     `json:"go"`
	Kernel    string     `json:"kernel,omitempty"`
	LoadStart [3]float64 `json:"load_start"`
	LoadEnd   [3]float64 `json:"load_end"`
}

// ReadMachine describes this machine now (load averages from
// /proc/loadavg where there is one).
func ReadMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Go: runtime.Version()}
	m.LoadStart = LoadAvg()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// LoadAvg returns the 1, 5 and 15 minute load averages, or zeros.
func LoadAvg() [3]float64 {
	var l [3]float64
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscan(string(b), &l[0], &l[1], &l[2])
	}
	return l
}

// Check is one performance target, checked on this
// run's figures.
type Check struct {
	Target string `json:"target"`
	Got    string `json:"got"`
	Pass   bool   `json:"pass"`
}

func findOps(ops []*OpsResult, store, system, mode string, clients int) *OpsResult {
	return findPhaseOps(ops, "", store, system, mode, clients)
}

func findPhaseOps(ops []*OpsResult, phase, store, system, mode string, clients int) *OpsResult {
	for _, o := range ops {
		if o.Phase == phase && o.Store == store && o.System == system && o.Mode == mode && o.Clients == clients {
			return o
		}
	}
	return nil
}

func findCost(costs []*CostResult, store, system, op string) *CostResult {
	for _, c := range costs {
		if c.Phase == "" && c.Store == store && c.System == system && c.Op == op {
			return c
		}
	}
	return nil
}

func p50(o *OpsResult, op string) float64 {
	if o == nil || o.Ops[op] == nil {
		return 0
	}
	return o.Ops[op].P50Ms
}

// Evaluate checks the performance targets that this run's figures cover.
func (r *Report) Evaluate() {
	r.Checks = nil
	r.computeRatios()
	add := func(pass bool, target, format string, args ...any) {
		r.Checks = append(r.Checks, Check{Target: target, Got: fmt.Sprintf(format, args...), Pass: pass})
	}
	if c := findCost(r.Costs, "cassandra", "tenure", CostRenew); c != nil {
		j := findCost(r.Costs, "cassandra", "jaeger-protocol", CostRenew)
		jm := 0.0
		if j != nil {
			jm = j.Mean
		}
		add(c.Min == 1 && c.Max == 1, "Cassandra renewal of a held lease: 1 LWT (Jaeger protocol: 2)",
			"tenure %v LWT per renewal (min %d, max %d, %d renewals counted); Jaeger protocol %v", c.Mean, c.Min, c.Max, c.Samples, jm)
	}
	clients := map[int]bool{}
	for _, o := range r.Ops {
		if o.Phase == "" && o.Store == "cassandra" && o.Mode == ModeDistinct {
			clients[o.Clients] = true
		}
	}
	var levels []int
	for c := range clients {
		levels = append(levels, c)
	}
	sort.Ints(levels)
	for _, c := range levels {
		t := findOps(r.Ops, "cassandra", "tenure", ModeDistinct, c)
		if j := findOps(r.Ops, "cassandra", "jaeger-protocol", ModeDistinct, c); t != nil && j != nil && p50(j, OpRenew) > 0 {
			ratio := p50(t, OpRenew) / p50(j, OpRenew)
			add(ratio <= 0.6, fmt.Sprintf("Cassandra renew p50 at most 0.6× the Jaeger protocol's (%d clients)", c),
				"%.2f× (tenure %.2f ms, Jaeger protocol %.2f ms)", ratio, p50(t, OpRenew), p50(j, OpRenew))
		}
		f := findOps(r.Ops, "cassandra", "raw-lwt", ModeDistinct, c)
		for _, sys := range []string{"tenure", "tenure-new-names"} {
			t := findOps(r.Ops, "cassandra", sys, ModeDistinct, c)
			if t != nil && f != nil && p50(f, OpAcquire) > 0 {
				ratio := p50(t, OpAcquire) / p50(f, OpAcquire)
				what := "a resource used before"
				if sys != "tenure" {
					what = "a new resource, as the raw LWT"
				}
				add(ratio <= 1.1, fmt.Sprintf("Cassandra uncontended acquire p50 within 1.1× of one raw LWT (%d clients, %s)", c, what),
					"%.2f× (tenure %.2f ms, raw INSERT IF NOT EXISTS %.2f ms)", ratio, p50(t, OpAcquire), p50(f, OpAcquire))
			}
		}
	}
	if o := findOps(r.Ops, "sqlite", "tenure", ModeDistinct, 64); o != nil && o.Ops[OpAcquire] != nil {
		p99 := o.Ops[OpAcquire].P99Ms
		add(p99 < 50, "SQLite p99 acquire at 64 clients under 50 ms",
			"p99 %.1f ms (p50 %.2f ms, %d acquires)", p99, o.Ops[OpAcquire].P50Ms, o.Ops[OpAcquire].N)
	}
	r.peerChecks(add)
	for _, s := range r.Scale {
		perLease := float64(s.GoroutinesPeak-s.GoroutinesBase) / float64(s.Leases)
		add(s.Lost == 0 && s.AcquireErrors == 0, fmt.Sprintf("%s: %d leases renewed with 0 lost", s.Store, s.Leases),
			"%d lost, %d not acquired, %d renewals, %d late (> interval + %.0f ms), %d failed", s.Lost, s.AcquireErrors, s.Renewals, s.Late, s.SlackMs, s.RenewErrors)
		add(s.Late == 0, fmt.Sprintf("%s: %d leases renewed with 0 late renewals", s.Store, s.Leases),
			"%d late of %d (confirmed > interval + %.0f ms after the previous send); worst gap %.0f ms (interval %.0f ms)", s.Late, s.Renewals, s.SlackMs, s.ConfirmGap.MaxMs, s.IntervalS*1000)
		add(s.HeapPerLease <= 2048 && s.HeapPerLeaseEnd <= 2048, fmt.Sprintf("%s: at most 2 KiB of heap per lease", s.Store),
			"%.0f B per lease after taking them, %.0f B at the end of the hold", s.HeapPerLease, s.HeapPerLeaseEnd)
		add(perLease <= 0.1, fmt.Sprintf("%s: well under one goroutine per lease (at most 0.1)", s.Store),
			"%.4f extra goroutines per lease (peak %d, base %d)", perLease, s.GoroutinesPeak, s.GoroutinesBase)
	}
	for _, f := range r.Failover {
		if f.Kind == FailoverKill {
			// docs/design.md: after a holder dies, another candidate is
			// granted within TTL plus one retry interval (followers retry
			// every RetryPeriod ±10%); Cassandra's whole-second expiry adds
			// up to cassandra.MaxExpirySlack (docs/election.md).
			bound := f.TTLS*1000 + f.RetryS*1100
			what := "TTL + retry period·1.1"
			if f.Store == "cassandra" {
				bound += 2000
				what += " + 2 s (Cassandra's MaxExpirySlack)"
			}
			add(f.Handoff.MaxMs <= bound, fmt.Sprintf("%s: design.md liveness, SIGKILL → new leader within %s = %.0f ms", f.Store, what, bound),
				"p50 %.0f ms, p90 %.0f ms, max %.0f ms over %d handoffs", f.Handoff.P50Ms, f.Handoff.P90Ms, f.Handoff.MaxMs, f.Handoff.N)
		}
		if f.Kind == FailoverRelease {
			add(f.Handoff.P50Ms < f.RetryS*1000, fmt.Sprintf("%s: release → new leader p50 under one retry period (%.0f ms)", f.Store, f.RetryS*1000),
				"p50 %.0f ms, p90 %.0f ms, max %.0f ms over %d handoffs", f.Handoff.P50Ms, f.Handoff.P90Ms, f.Handoff.MaxMs, f.Handoff.N)
		}
	}
}

// WriteText prints the report as tables.
func (r *Report) WriteText(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "machine: %d CPUs (%s), %s/%s, %s, kernel %s; load average %.2f at the start, %.2f at the end\n",
		m.CPUs, m.CPUModel, m.GOOS, m.GOARCH, m.Go, m.Kernel, m.LoadStart[0], m.LoadEnd[0])
	tw := func() *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight) }
	lat := func(o *OpsResult, op string) string {
		if o.Ops[op] == nil || o.Ops[op].N == 0 {
			return "-\t-"
		}
		return fmt.Sprintf("%s\t%s", fmtMs(o.Ops[op].P50Ms), fmtMs(o.Ops[op].P99Ms))
	}
	opsTables := func(phase, title string) {
		var distinct, contended []*OpsResult
		for _, o := range r.Ops {
			if o.Phase != phase {
				continue
			}
			if o.Mode == ModeDistinct {
				distinct = append(distinct, o)
			} else {
				contended = append(contended, o)
			}
		}
		if len(distinct) > 0 {
			fmt.Fprintf(w, "\n%sOperations, every client on its own resource (latency in ms: p50, p99; throughput: operations per second)\n", title)
			t := tw()
			fmt.Fprintln(t, "store\tsystem\tclients\tacquire p50\tp99\trenew p50\tp99\trelease p50\tp99\tcycles/s\tops/s\tclient CPU µs/op\trequests/cycle\terrors\t")
			for _, o := range distinct {
				fmt.Fprintf(t, "%s\t%s\t%d\t%s\t%s\t%s\t%.0f\t%.0f\t%.1f\t%s\t%d\t\n", o.Store, o.System, o.Clients,
					lat(o, OpAcquire), lat(o, OpRenew), lat(o, OpRelease), perS(o, OpAcquire), o.OpsPerS, o.ClientCPUUsPerOp, perCycle(o, o.Unit), o.Errors)
			}
			t.Flush()
		}
		if len(contended) > 0 {
			fmt.Fprintf(w, "\n%sContended: every client on one resource, acquiring in a loop and releasing when granted (ms)\n", title)
			t := tw()
			fmt.Fprintln(t, "store\tsystem\tclients\tgrants/s\tattempts/s\tgranted p50\tp99\theld p50\tp99\trelease p50\tp99\trequests/attempt\toverlaps\terrors\t")
			for _, o := range contended {
				attempts := 0.0
				if o.ElapsedS > 0 {
					attempts = float64(o.Cycles) / o.ElapsedS
				}
				fmt.Fprintf(t, "%s\t%s\t%d\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%d\t%d\t\n", o.Store, o.System, o.Clients, perS(o, OpAcquire), attempts,
					lat(o, OpAcquire), lat(o, "acquire-held"), lat(o, OpRelease), perCycle(o, o.Unit), o.Overlaps, o.Errors)
			}
			t.Flush()
		}
	}
	opsTables("", "")
	opsTables(PhasePeers, "Peers: ")
	if len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nPeers: tenure over each peer, same run (p50 against p50 per operation; cycles/s and wins/s: tenure's over the peer's)")
		t := tw()
		fmt.Fprintln(t, "store\ttenure\tpeer\tmode\tclients\tacquire\trenew\trelease\tcycles/s\twins/s (tenure, peer)\toverlaps (tenure, peer)\t")
		for _, x := range r.Ratios {
			wins, ov := "-", "-"
			if x.Mode == ModeContended {
				wins = fmt.Sprintf("%.0f, %.0f", x.TenureWinsPerS, x.PeerWinsPerS)
				ov = fmt.Sprintf("%d, %d", x.TenureOverlaps, x.PeerOverlaps)
			}
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", x.Store, x.Tenure, x.Peer, x.Mode, x.Clients,
				fmtRatio(x.Acquire), fmtRatio(x.Renew), fmtRatio(x.Release), fmtRatio(x.Throughput), wins, ov)
		}
		t.Flush()
		for _, k := range sortedKeys(r.Peers) {
			fmt.Fprintf(w, "  %s: %s\n", k, r.Peers[k])
		}
	}
	if len(r.Costs) > 0 {
		fmt.Fprintln(w, "\nStore requests per operation, counted by the driver's hooks, one operation at a time")
		t := tw()
		fmt.Fprintln(t, "phase\tstore\tsystem\toperation\tcounted\tunit\tmin\tmax\tall kinds (mean)\t")
		for _, c := range r.Costs {
			var kinds []string
			for _, k := range sortedKeys(c.PerOp) {
				kinds = append(kinds, fmt.Sprintf("%s %g", k, c.PerOp[k]))
			}
			phase := c.Phase
			if phase == "" {
				phase = PhaseCost
			}
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t\n", phase, c.Store, c.System, c.Op, c.Samples, c.Unit, c.Min, c.Max, strings.Join(kinds, ", "))
		}
		t.Flush()
	}
	if rs := r.ratios(); len(rs) > 0 {
		fmt.Fprintln(w, "\nRatios on Cassandra, same run (p50 against p50)")
		t := tw()
		fmt.Fprintln(t, "clients\ttenure renew / Jaeger renew\ttenure acquire / raw LWT\ttenure acquire of a new name / raw LWT\ttenure release / Jaeger release\ttenure ops/s / Jaeger ops/s\t")
		for _, x := range rs {
			fmt.Fprintln(t, x)
		}
		t.Flush()
	}
	for _, s := range r.Scale {
		fmt.Fprintf(w, "\nScale: %s, %d leases, TTL %gs, renewed every %gs by one Locker (at most %d renewals at once), held %gs\n",
			s.Store, s.Leases, s.TTLS, s.IntervalS, s.MaxRenewal, s.DurationS)
		fmt.Fprintf(w, "  taken in %.1fs (%d failed), released in %.1fs (%d failed)\n", s.AcquireS, s.AcquireErrors, s.ReleaseS, s.ReleaseErrors)
		fmt.Fprintf(w, "  leases lost %d; renewals %d confirmed, %d failed, %d late (confirmed > interval + %.0f ms after the previous send)\n",
			s.Lost, s.Renewals, s.RenewErrors, s.Late, s.SlackMs)
		fmt.Fprintf(w, "  renewal send time − schedule: p50 %s ms, p99 %s ms, max %s ms\n", fmtMs(s.SendLag.P50Ms), fmtMs(s.SendLag.P99Ms), fmtMs(s.SendLag.MaxMs))
		fmt.Fprintf(w, "  confirmation − previous send: p50 %s ms, p99 %s ms, max %s ms (interval %g ms)\n", fmtMs(s.ConfirmGap.P50Ms), fmtMs(s.ConfirmGap.P99Ms), fmtMs(s.ConfirmGap.MaxMs), s.IntervalS*1000)
		fmt.Fprintf(w, "  renewal call: p50 %s ms, p99 %s ms, max %s ms\n", fmtMs(s.RenewLatency.P50Ms), fmtMs(s.RenewLatency.P99Ms), fmtMs(s.RenewLatency.MaxMs))
		if s.Batched {
			fmt.Fprintf(w, "  renewals sent in %d batch calls (driver.BatchRenewer), %.0f leases per call\n", s.RenewCalls, float64(s.Renewals+s.RenewErrors)/max(float64(s.RenewCalls), 1))
		}
		fmt.Fprintf(w, "  goroutines: %d before, %d with the leases, peak %d while held\n", s.GoroutinesBase, s.GoroutinesHeld, s.GoroutinesPeak)
		fmt.Fprintf(w, "  heap: %s before, %s with the leases (%.0f B/lease), %s at the end of the hold, %s after release (%.0f B/lease)\n",
			fmtBytes(s.HeapBase), fmtBytes(s.HeapWith), s.HeapPerLease, fmtBytes(s.HeapWithEnd), fmtBytes(s.HeapAfter), s.HeapPerLeaseEnd)
		var load []string
		for _, k := range sortedKeys(s.PerSecond) {
			load = append(load, fmt.Sprintf("%.0f %s/s", s.PerSecond[k], k))
		}
		if len(load) > 0 {
			fmt.Fprintf(w, "  store load while held: %s\n", strings.Join(load, ", "))
		}
	}
	r.writeWaiters(w)
	r.writeSemaphores(w)
	if len(r.Failover) > 0 {
		fmt.Fprintln(w, "\nFailover between candidate processes (election.Candidate): signal to the leader → another candidate leads, CLOCK_MONOTONIC (ms)")
		t := tw()
		fmt.Fprintln(t, "store\tleader\tcandidates\tTTL\tretry period\thandoffs\tp50\tp90\tmax\tmin\ttoken errors\t")
		for _, f := range r.Failover {
			kind := "SIGKILL"
			if f.Kind == FailoverRelease {
				kind = "releases (SIGTERM)"
			}
			fmt.Fprintf(t, "%s\t%s\t%d\t%gs\t%gs\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t\n", f.Store, kind, f.Candidates, f.TTLS, f.RetryS,
				f.Handoff.N, f.Handoff.P50Ms, f.Handoff.P90Ms, f.Handoff.MaxMs, f.Handoff.MinMs, f.TokenErrors)
		}
		t.Flush()
	}
	if len(r.Checks) > 0 {
		fmt.Fprintln(w, "\nPerformance targets (ratios against the peers, and design.md's liveness bound)")
		for _, c := range r.Checks {
			verdict := "PASS"
			if !c.Pass {
				verdict = "FAIL"
			}
			fmt.Fprintf(w, "  %s  %s: %s\n", verdict, c.Target, c.Got)
		}
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "\nerror: %s\n", e)
	}
}

func (r *Report) ratios() []string {
	var out []string
	for _, o := range r.Ops {
		if o.Phase != "" || o.Store != "cassandra" || o.System != "tenure" || o.Mode != ModeDistinct {
			continue
		}
		j := findOps(r.Ops, "cassandra", "jaeger-protocol", ModeDistinct, o.Clients)
		f := findOps(r.Ops, "cassandra", "raw-lwt", ModeDistinct, o.Clients)
		ratio := func(a, b float64) string {
			if b == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", a/b)
		}
		n := findOps(r.Ops, "cassandra", "tenure-new-names", ModeDistinct, o.Clients)
		var jr, jrel, fr, nr, thr string = "-", "-", "-", "-", "-"
		if j != nil {
			jr, jrel, thr = ratio(p50(o, OpRenew), p50(j, OpRenew)), ratio(p50(o, OpRelease), p50(j, OpRelease)), ratio(o.OpsPerS, j.OpsPerS)
		}
		if f != nil {
			fr = ratio(p50(o, OpAcquire), p50(f, OpAcquire))
			if n != nil {
				nr = ratio(p50(n, OpAcquire), p50(f, OpAcquire))
			}
		}
		out = append(out, fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t", o.Clients, jr, fr, nr, jrel, thr))
	}
	return out
}

func perCycle(o *OpsResult, unit string) string {
	if o.Requests == nil || unit == "" {
		return "-"
	}
	return fmt.Sprintf("%.2f %s", o.PerCycle, unit)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// fmtMs formats milliseconds with three significant digits or so.
func fmtMs(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 0.01 && v > -0.01:
		return fmt.Sprintf("%.4f", v)
	case v < 1 && v > -1:
		return fmt.Sprintf("%.3f", v)
	case v < 10 && v > -10:
		return fmt.Sprintf("%.2f", v)
	case v < 100 && v > -100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtBytes(b uint64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
