package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// Ratio is tenure's figure over a peer's, from the peers phase of one run,
// for one store, mode and number of clients.
type Ratio struct {
	Store string `json:"store"`
	// Tenure is the tenure system compared: "tenure", or on Cassandra
	// "tenure-new-names" against the raw LWT (which also takes a new name
	// each time).
	Tenure  string `json:"tenure"`
	Peer    string `json:"peer"`
	Mode    string `json:"mode"`
	Clients int    `json:"clients"`
	// Acquire, Renew and Release are tenure's p50 over the peer's (0 when
	// one of them lacks the operation): below 1, tenure is faster.
	Acquire float64 `json:"acquire"`
	Renew   float64 `json:"renew"`
	Release float64 `json:"release"`
	// Throughput is tenure's granted acquires per second over the peer's
	// (cycles/s on distinct names, wins/s in contended mode): above 1,
	// tenure does more. 0 against a peer without a release (the raw LWT),
	// whose cycle is a lone acquire.
	Throughput float64 `json:"throughput"`
	// Contended mode: grants per second and overlaps of each.
	TenureWinsPerS float64 `json:"tenure_wins_per_s,omitempty"`
	PeerWinsPerS   float64 `json:"peer_wins_per_s,omitempty"`
	TenureOverlaps int64   `json:"tenure_overlaps"`
	PeerOverlaps   int64   `json:"peer_overlaps"`
}

func perS(o *OpsResult, op string) float64 {
	if o == nil || o.Ops[op] == nil {
		return 0
	}
	return o.Ops[op].PerS
}

func div(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return round3(a / b)
}

func fmtRatio(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

func isTenure(system string) bool { return strings.HasPrefix(system, "tenure") }

// computeRatios fills r.Ratios from the peers phase's results.
func (r *Report) computeRatios() {
	r.Ratios = nil
	for _, o := range r.Ops {
		if o.Phase != PhasePeers || isTenure(o.System) {
			continue
		}
		refs := []string{"tenure"}
		if o.System == PeerRawLWT {
			refs = append(refs, "tenure-new-names")
		}
		for _, ref := range refs {
			t := findPhaseOps(r.Ops, PhasePeers, o.Store, ref, o.Mode, o.Clients)
			if t == nil {
				continue
			}
			x := &Ratio{
				Store: o.Store, Tenure: ref, Peer: o.System, Mode: o.Mode, Clients: o.Clients,
				Acquire: div(p50(t, OpAcquire), p50(o, OpAcquire)),
				Release: div(p50(t, OpRelease), p50(o, OpRelease)),
			}
			if o.Mode == ModeDistinct {
				x.Renew = div(p50(t, OpRenew), p50(o, OpRenew))
			}
			if o.Ops[OpRelease] != nil {
				// A cycle on both sides (not the raw LWT's lone acquire).
				x.Throughput = div(perS(t, OpAcquire), perS(o, OpAcquire))
			}
			if o.Mode == ModeContended {
				x.TenureWinsPerS, x.PeerWinsPerS = perS(t, OpAcquire), perS(o, OpAcquire)
				x.TenureOverlaps, x.PeerOverlaps = t.Overlaps, o.Overlaps
			}
			r.Ratios = append(r.Ratios, x)
		}
	}
	sort.SliceStable(r.Ratios, func(i, j int) bool {
		a, b := r.Ratios[i], r.Ratios[j]
		if a.Store != b.Store {
			return a.Store < b.Store
		}
		if a.Peer != b.Peer {
			return a.Peer < b.Peer
		}
		if a.Mode != b.Mode {
			return a.Mode == ModeDistinct
		}
		return a.Clients < b.Clients
	})
	r.Peers = nil
	for _, x := range r.Ratios {
		if v, ok := PeerVersions[x.Peer]; ok {
			if r.Peers == nil {
				r.Peers = map[string]string{}
			}
			r.Peers[x.Peer] = v
		}
	}
}

// peerChecks checks the targets set against the peers.
func (r *Report) peerChecks(add func(pass bool, target, format string, args ...any)) {
	for _, x := range r.Ratios {
		if x.Mode != ModeDistinct || x.Tenure != "tenure" {
			continue
		}
		var what string
		switch {
		case x.Store == "redis" && x.Peer == PeerRedislock:
			what = "Redis: every operation's p50 at most 1.1× redislock's"
		case x.Store == "etcd" && x.Peer == PeerEtcdSharedSession:
			what = "etcd: every operation's p50 at most 1.1× concurrency's Mutex on a shared session"
		default:
			continue
		}
		worst := max(x.Acquire, x.Renew, x.Release)
		add(worst > 0 && worst <= 1.1, fmt.Sprintf("%s (%d clients)", what, x.Clients),
			"acquire %s, renew %s, release %s", fmtRatio(x.Acquire), fmtRatio(x.Renew), fmtRatio(x.Release))
	}
	for _, x := range r.Ratios {
		if x.Store != "postgres" || x.Peer != PeerPglock || x.Mode != ModeDistinct || x.Tenure != "tenure" {
			continue
		}
		add(x.Acquire > 0 && x.Acquire < 1 && x.Renew > 0 && x.Renew < 1 && x.Release > 0 && x.Release <= 1 && x.Throughput >= 1,
			fmt.Sprintf("PostgreSQL: release at most 1.0× pglock's, acquire and renew ahead, cycles/s at least pglock's (%d clients)", x.Clients),
			"acquire %s, renew %s, release %s, cycles/s %s", fmtRatio(x.Acquire), fmtRatio(x.Renew), fmtRatio(x.Release), fmtRatio(x.Throughput))
	}
	for _, x := range r.Ratios {
		if x.Store != "cassandra" || x.Peer != PeerRawLWT || x.Mode != ModeDistinct || x.Clients < 8 {
			continue
		}
		what := "a resource used before"
		if x.Tenure != "tenure" {
			what = "a new name each time, as the raw LWT"
		}
		add(x.Acquire > 0 && x.Acquire <= 1.1, fmt.Sprintf("Cassandra: acquire p50 at most 1.1× one raw LWT (%d clients, %s)", x.Clients, what),
			"%s×", fmtRatio(x.Acquire))
	}
	for _, c := range r.Costs {
		if c.Phase == PhasePeers && c.Store == "etcd" && c.System == "tenure" && c.Op == CostRenew {
			add(c.Max == 1, "etcd: a renewal in 1 RPC", "%g RPCs per renewal (min %d, max %d, %d counted)", c.Mean, c.Min, c.Max, c.Samples)
		}
	}
	for _, o := range r.Ops {
		if o.Phase == PhasePeers && o.Mode == ModeContended && isTenure(o.System) {
			add(o.Overlaps == 0, fmt.Sprintf("%s: no overlapping grants, %d clients contending for one name", o.Store, o.Clients),
				"%d overlaps in %d grants", o.Overlaps, grantsOf(o))
		}
	}
	for _, w := range r.Waiters {
		add(w.Grants == w.Waiters && w.Errors == 0, fmt.Sprintf("%s: %d waiters on one resource, every one granted", w.Store, w.Waiters),
			"%d granted, %d errors; %.1f %s per grant", w.Grants, w.Errors, w.CallsPerGrant, w.Unit)
	}
	for _, s := range r.Semaphores {
		add(s.Overlaps == 0 && s.MaxHolders <= int64(s.Slots), fmt.Sprintf("%s: semaphore of %d slots never has more holders", s.Store, s.Slots),
			"at most %d holders at once, %d overlaps", s.MaxHolders, s.Overlaps)
	}
}

func grantsOf(o *OpsResult) int {
	if o.Ops[OpAcquire] == nil {
		return 0
	}
	return o.Ops[OpAcquire].N
}

func (r *Report) writeWaiters(w io.Writer) {
	if len(r.Waiters) == 0 {
		return
	}
	fmt.Fprintln(w, "\nWaiters: blocked Acquires on one resource (each its own Locker, default options), the resource handed down the whole queue")
	t := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(t, "store\twaiters\tunit\tcalls/s waiting\tcalls in the s after 1 release\tfirst grant ms\tgranted\thand-down s\tcalls/grant\tgranted after the release p50 ms\tp90\tmax\thandover p50 ms\tp99\torder inversions\terrors\t")
	for _, x := range r.Waiters {
		perSec := func(c int64) float64 {
			if x.WindowMs <= 0 {
				return 0
			}
			return float64(c) * 1000 / x.WindowMs
		}
		fmt.Fprintf(t, "%s\t%d\t%s\t%.0f\t%.0f\t%s\t%d\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%.2f\t%d\t\n", x.Store, x.Waiters, x.Unit,
			perSec(x.CallsWaiting), perSec(x.CallsAfterRelease), fmtMs(x.FirstGrantMs), x.Grants, x.HandDownS, x.CallsPerGrant,
			fmtMs(x.Queue.P50Ms), fmtMs(x.Queue.P90Ms), fmtMs(x.Queue.MaxMs), fmtMs(x.Handover.P50Ms), fmtMs(x.Handover.P99Ms),
			x.OrderInversions, x.Errors)
	}
	t.Flush()
	for _, x := range r.Waiters {
		if x.FirstError != "" {
			fmt.Fprintf(w, "  %s: first error: %s\n", x.Store, x.FirstError)
		}
	}
}

func (r *Report) writeSemaphores(w io.Writer) {
	if len(r.Semaphores) == 0 {
		return
	}
	fmt.Fprintln(w, "\nSemaphore: contenders (each its own Locker) on one Semaphore, TryAcquire in a loop, release when granted (ms)")
	t := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(t, "store\tslots\tclients\tgrants/s\tattempts/s\tgranted p50\tp99\tall held p50\tp99\trelease p50\tp99\twins per client\tJain\tmin/max\tmax holders\toverlaps\trequests/attempt\terrors\t")
	lat := func(x *SemaphoreResult, op string) string {
		if x.Ops[op] == nil || x.Ops[op].N == 0 {
			return "-\t-"
		}
		return fmt.Sprintf("%s\t%s", fmtMs(x.Ops[op].P50Ms), fmtMs(x.Ops[op].P99Ms))
	}
	for _, x := range r.Semaphores {
		wins := make([]string, len(x.Wins))
		for i, n := range x.Wins {
			wins[i] = fmt.Sprint(n)
		}
		grants := 0.0
		if x.Ops[OpAcquire] != nil {
			grants = x.Ops[OpAcquire].PerS
		}
		per := "-"
		if x.Unit != "" {
			per = fmt.Sprintf("%.2f %s", x.PerAttempt, x.Unit)
		}
		attempts := 0.0
		if x.DurationS > 0 {
			attempts = float64(x.Attempts) / x.DurationS
		}
		fmt.Fprintf(t, "%s\t%d\t%d\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%.3f\t%.2f\t%d\t%d\t%s\t%d\t\n", x.Store, x.Slots, x.Clients, grants, attempts,
			lat(x, OpAcquire), lat(x, "acquire-held"), lat(x, OpRelease), strings.Join(wins, " "), x.Fairness, x.MinMax,
			x.MaxHolders, x.Overlaps, per, x.Errors)
	}
	t.Flush()
}
