// Command tenure-bench measures what tenure's leases cost each store and
// how fast leadership moves between processes: latency, throughput, store
// requests per operation, one Locker holding many leases, and failover
// between candidate processes, with baselines on Cassandra. It is a tool of
// the repository, not part of the tenure command; docs/benchmarks.md shows
// its figures and the commands that made them.
//
//	go run ./cmd/tenure-bench --phases cost,ops,contended --duration 3s   # from tools/
//	go run ./cmd/tenure-bench --cassandra cassandra://127.0.0.1/tenure_bench --json bench.json
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store"
	_ "github.com/tenure-go/tenure/store/all"
	"github.com/tenure-go/tenure/tools/bench"
)

// Exit codes (sysexits.h).
const (
	exitUsage       = 64  // EX_USAGE: bad flags
	exitUnavailable = 69  // EX_UNAVAILABLE: a store could not be opened or a phase failed
	exitSoftware    = 70  // EX_SOFTWARE: an internal error
	exitSignalBase  = 128 // 128+N: interrupted by signal N
)

// envStore names the environment variable that holds a store URL to
// measure when no store flag is given.
const envStore = "TENURE_STORE"

func main() { os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr)) }

// exitError is an error with the exit code it calls for; an empty message
// prints nothing.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

func usage(format string, args ...any) error { return fail(exitUsage, format, args...) }

func exitWith(code int) error { return &exitError{code: code} }

// app holds what the commands share.
type app struct {
	stdout, stderr io.Writer
	storeURL       string
}

// Main runs tenure-bench with args (without the program name) and returns
// the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	root := a.newBenchCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var xe *exitError
	if errors.As(err, &xe) {
		if xe.msg != "" {
			fmt.Fprintf(stderr, "tenure-bench: %s\n", xe.msg)
		}
		return xe.code
	}
	fmt.Fprintf(stderr, "tenure-bench: %s (see tenure-bench --help)\n", err)
	return exitUsage
}

type benchFlags struct {
	sqlite, cassandra, postgres, mysql, etcd, redis string
	skip                                            []string

	phases     []string
	clients    []int
	contended  []int
	duration   time.Duration
	rounds     int
	maxSamples int
	ttl        time.Duration
	costCycles int

	scaleLeases   []int
	scaleStopLate bool
	scaleTTL      time.Duration
	scaleDuration time.Duration
	lateSlack     time.Duration
	maxRenewals   int
	scaleStores   []string
	scaleRate     float64

	peerClients   []int
	peerContended []int
	peerTTL       time.Duration
	peerHold      time.Duration

	waiters        int
	waitersTTL     time.Duration
	waitersHold    time.Duration
	waitersSettle  time.Duration
	waitersWindow  time.Duration
	waitersLimit   time.Duration
	waitersStagger time.Duration
	waitersStores  []string

	semSlots    int
	semClients  int
	semDuration time.Duration
	semTTL      time.Duration
	semHold     time.Duration
	semStores   []string

	handoffs       int
	candidates     int
	failoverTTL    time.Duration
	failoverRetry  time.Duration
	failoverStores []string

	jsonFile   string
	prefix     string
	cpuProfile string
}

const benchLong = `tenure-bench measures what leases cost a store and how fast leadership moves, for
tenure and, on Cassandra, for two baselines on the same server in the same
run: a single raw INSERT ... IF NOT EXISTS (the floor: one lightweight
transaction) and the Jaeger protocol (a client issuing the statements of
Jaeger's Cassandra lock, whose renewal of a held lease is an insert-if-not-
exists followed by a conditional update).

Stores: the in-memory store, SQLite (a new file in a temporary directory
unless --sqlite names one), the store of --store (or $TENURE_STORE when no
other store flag is given), and each of --cassandra, --postgres, --mysql,
--etcd and --redis that is given; --skip leaves kinds out. The Cassandra keyspace of
the URL gets tenure's native and Jaeger-mode tables if it lacks them: give
the bench a keyspace of its own. Every resource name starts with --prefix,
so a bench can run next to other users of the store.

Phases (--phases):
  cost       each operation's store requests, counted by the driver's own
             hooks (Cassandra's query and batch observers: lightweight
             transactions; SQLite's commit, rollback and pre-update hooks:
             transactions and row writes; pgx's tracer; go-redis's hooks; gRPC
             interceptors), one operation at a time
  ops        acquire, renew and release latency (p50, p99) and throughput
             with each --clients level, every client (its own Locker) on its
             own resource; the systems take turns, --rounds times
  contended  --contended clients on one resource, acquiring in a loop
  peers      tenure against the libraries a user would otherwise pick, on the
             same server in the same run, the systems taking turns round by
             round: on Redis bsm/redislock and go-redsync/redsync, on etcd
             client/v3/concurrency's Mutex (a Session per lock, and one
             Session shared by a client's locks), on PostgreSQL
             cirello.io/pglock and plain advisory locks (session locks: no
             TTL, no fencing token), on MySQL GET_LOCK and a row locked by
             SELECT ... FOR UPDATE NOWAIT in an open transaction (both tied
             to a connection: no TTL, no fencing token), on Cassandra the
             Jaeger protocol and a raw LWT; the cycle is
             acquire a free lock (TTL --peer-ttl), renew it once, release it,
             at --peer-clients clients on distinct names, and
             --peer-contended clients on one name (wins/s, overlapping
             grants counted); requests counted by the drivers' hooks, one
             operation at a time; ratios tenure p50 / peer p50 per operation
  waiters    --waiters blocked Acquires on one resource (each its own Locker,
             default options): the store calls while they wait, in the
             second after one release, and per grant while the resource is
             handed down the whole queue; the spread of the waits, and how
             far the order of grants is from the order of arrival; on
             --waiters-stores
  semaphore  --sem-clients contenders on one Semaphore of --sem-slots slots,
             TryAcquire in a loop: latency, wins per client (fairness), most
             holders at once; on --sem-stores
  scale      one Locker holding --scale-leases leases (TTL --scale-ttl,
             renewed every TTL/3) for --scale-duration: leases lost,
             renewals late, goroutines, heap per lease, store load; on the
             stores of --scale-stores; several counts (10000,20000,40000)
             run in turn, and --scale-stop-on-late skips the counts after
             the first with a late renewal or a lost lease
  failover   --handoffs handoffs between --candidates candidate processes
             (this binary, "tenure-bench candidate", using election.Candidate)
             after SIGKILL of the leader and after the leader releases
             (SIGTERM), timed on CLOCK_MONOTONIC; on --failover-stores

The default phases are cost, ops, contended, scale and failover; peers,
waiters and semaphore run when --phases names them.

The output is a table per phase, the ratios against the baselines, and a
PASS or FAIL line for each performance target that the run covers (its
ratios against the peers, and design.md's liveness bounds). --json writes every figure. Exit codes: 0 the run finished (whatever the targets
say); 64 bad flags; 69 a store could not be opened or a phase failed.`

func (a *app) newBenchCmd() *cobra.Command {
	var f benchFlags
	c := &cobra.Command{
		Use:   "tenure-bench",
		Short: "Measure latency, throughput, store requests, scale and failover per store",
		Long:  benchLong,
		Example: `  # memory and a temporary SQLite file, the quick phases only
  tenure-bench --phases cost,ops,contended --duration 3s

  # everything, with Cassandra, as docs/benchmarks.md was made
  tenure-bench --cassandra cassandra://127.0.0.1/tenure_bench --json bench.json`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usage("takes no arguments (see tenure-bench --help)")
			}
			return nil
		},
		RunE:          func(c *cobra.Command, args []string) error { return a.bench(c, &f) },
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	c.CompletionOptions.DisableDefaultCmd = true
	c.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usage("%s (see %s --help)", err, c.CommandPath())
	})
	c.PersistentFlags().StringVar(&a.storeURL, "store", "", "a store URL to measure besides memory and SQLite (default $"+envStore+" when no store flag is given)")
	fl := c.Flags()
	fl.StringVar(&f.sqlite, "sqlite", "", "SQLite store URL (default: a new file in a temporary directory)")
	fl.StringVar(&f.cassandra, "cassandra", "", "Cassandra store URL, e.g. cassandra://127.0.0.1/tenure_bench (a keyspace of its own)")
	fl.StringVar(&f.postgres, "postgres", "", "PostgreSQL store URL")
	fl.StringVar(&f.mysql, "mysql", "", "MySQL or MariaDB store URL")
	fl.StringVar(&f.etcd, "etcd", "", "etcd store URL")
	fl.StringVar(&f.redis, "redis", "", "Redis store URL")
	fl.StringSliceVar(&f.skip, "skip", nil, "store kinds not to measure, e.g. memory,sqlite")
	fl.StringSliceVar(&f.phases, "phases", bench.DefaultPhases, "phases to run: "+strings.Join(bench.AllPhases, ","))
	fl.IntSliceVar(&f.clients, "clients", []int{1, 8, 64}, "concurrent clients on distinct resources, per level")
	fl.IntSliceVar(&f.contended, "contended", []int{8, 64}, "concurrent clients on one resource, per level")
	fl.DurationVar(&f.duration, "duration", 6*time.Second, "measured time per system and level (split into --rounds rounds)")
	fl.IntVar(&f.rounds, "rounds", 3, "rounds per level; the systems of a store take turns round by round")
	fl.IntVar(&f.maxSamples, "max-samples", 300000, "at most this many cycles per system and level (bounds memory on fast stores)")
	fl.DurationVar(&f.ttl, "ttl", 30*time.Second, "lease TTL in the cost, ops and contended phases")
	fl.IntVar(&f.costCycles, "cost-cycles", 20, "cycles counted one operation at a time in the cost phase")
	fl.IntSliceVar(&f.scaleLeases, "scale-leases", []int{10000}, "leases one Locker holds in the scale phase (several counts run in turn)")
	fl.BoolVar(&f.scaleStopLate, "scale-stop-on-late", false, "skip the larger --scale-leases counts after the first run with a late renewal or a lost lease")
	fl.DurationVar(&f.scaleTTL, "scale-ttl", 30*time.Second, "TTL of the scale leases (renewed every TTL/3)")
	fl.DurationVar(&f.scaleDuration, "scale-duration", 5*time.Minute, "how long the scale leases are held")
	fl.DurationVar(&f.lateSlack, "late-slack", time.Second, "a renewal is late when confirmed more than renew interval + this after the previous send")
	fl.IntVar(&f.maxRenewals, "max-renewals", 0, "tenure.WithMaxConcurrentRenewals in the scale phase (0: the default, 64)")
	fl.Float64Var(&f.scaleRate, "scale-acquire-rate", 0, "scale phase: take at most this many leases a second (0: as fast as 64 at once go; leases/interval keeps their first renewals at the steady rate)")
	fl.StringSliceVar(&f.scaleStores, "scale-stores", []string{"sqlite", "cassandra"}, "store kinds the scale phase runs on")
	fl.IntSliceVar(&f.peerClients, "peer-clients", []int{1, 8, 32}, "peers phase: concurrent clients on distinct names, per level")
	fl.IntSliceVar(&f.peerContended, "peer-contended", []int{8}, "peers phase: concurrent clients on one name, per level")
	fl.DurationVar(&f.peerTTL, "peer-ttl", 10*time.Second, "peers phase: lock TTL")
	fl.DurationVar(&f.peerHold, "peer-hold", 0, "peers phase: how long a contended client keeps a grant before releasing it")
	fl.IntVar(&f.waiters, "waiters", 200, "waiters phase: blocked Acquires on one resource")
	fl.DurationVar(&f.waitersTTL, "waiters-ttl", 30*time.Second, "waiters phase: lease TTL")
	fl.DurationVar(&f.waitersHold, "waiters-hold", 0, "waiters phase: how long each waiter keeps the resource once granted")
	fl.DurationVar(&f.waitersSettle, "waiters-settle", 3*time.Second, "waiters phase: how long all waiters wait before the first release")
	fl.DurationVar(&f.waitersWindow, "waiters-window", time.Second, "waiters phase: the span whose calls are counted before and after the first release")
	fl.DurationVar(&f.waitersStagger, "waiters-stagger", 5*time.Millisecond, "waiters phase: time between two waiters' starts (they arrive in a known order)")
	fl.DurationVar(&f.waitersLimit, "waiters-timeout", 10*time.Minute, "waiters phase: bound on each store's run")
	fl.StringSliceVar(&f.waitersStores, "waiters-stores", []string{"sqlite", "postgres", "redis", "etcd"}, "store kinds the waiters phase runs on")
	fl.IntVar(&f.semSlots, "sem-slots", 3, "semaphore phase: slots")
	fl.IntVar(&f.semClients, "sem-clients", 8, "semaphore phase: contenders")
	fl.DurationVar(&f.semDuration, "sem-duration", 6*time.Second, "semaphore phase: measured time per store")
	fl.DurationVar(&f.semTTL, "sem-ttl", 10*time.Second, "semaphore phase: slot TTL")
	fl.DurationVar(&f.semHold, "sem-hold", 10*time.Millisecond, "semaphore phase: how long a contender keeps a slot before releasing it")
	fl.StringSliceVar(&f.semStores, "sem-stores", []string{"memory", "sqlite", "postgres", "redis", "etcd", "cassandra"}, "store kinds the semaphore phase runs on")
	fl.IntVar(&f.handoffs, "handoffs", 50, "handoffs per store and kind in the failover phase")
	fl.IntVar(&f.candidates, "candidates", 3, "candidate processes in the failover phase")
	fl.DurationVar(&f.failoverTTL, "failover-ttl", 3*time.Second, "election TTL in the failover phase")
	fl.DurationVar(&f.failoverRetry, "failover-retry", time.Second, "election retry period in the failover phase")
	fl.StringSliceVar(&f.failoverStores, "failover-stores", []string{"sqlite", "cassandra"}, "store kinds the failover phase runs on")
	fl.StringVar(&f.jsonFile, "json", "", "write every figure as JSON to this file")
	fl.StringVar(&f.prefix, "prefix", "", "prefix of every resource name (default bench/ and a random id)")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	c.AddCommand(a.newBenchCandidateCmd())
	return c
}

func (a *app) bench(c *cobra.Command, f *benchFlags) error {
	for _, p := range f.phases {
		if !contains(bench.AllPhases, p) {
			return usage("unknown phase %q (phases: %s)", p, strings.Join(bench.AllPhases, ","))
		}
	}
	for _, n := range slices.Concat(f.clients, f.contended, f.peerClients, f.peerContended) {
		if n < 1 || n > 4096 {
			return usage("%d clients: want 1 to 4096", n)
		}
	}
	for _, n := range f.scaleLeases {
		if n < 1 {
			return usage("--scale-leases %d: want a positive count", n)
		}
	}
	switch {
	case f.duration <= 0 || f.rounds < 1 || f.costCycles < 1:
		return usage("--duration, --rounds and --cost-cycles must be positive")
	case f.ttl <= 0 || f.scaleTTL <= 0 || f.failoverTTL <= 0 || f.failoverRetry <= 0:
		return usage("TTLs and the retry period must be positive")
	case len(f.scaleLeases) == 0 || f.scaleDuration <= 0 || f.lateSlack < 0 || f.maxRenewals < 0 || f.scaleRate < 0 || math.IsNaN(f.scaleRate) || math.IsInf(f.scaleRate, 0):
		return usage("--scale-leases and --scale-duration must be positive, --late-slack, --max-renewals and --scale-acquire-rate not negative")
	case f.peerTTL <= 0 || f.peerHold < 0:
		return usage("--peer-ttl must be positive and --peer-hold not negative")
	case f.waiters < 1 || f.waiters > 10000 || f.waitersTTL <= 0 || f.waitersHold < 0 || f.waitersSettle <= 0 || f.waitersWindow <= 0 || f.waitersLimit <= 0 || f.waitersStagger < 0:
		return usage("--waiters must be 1 to 10000, its durations positive (--waiters-hold not negative)")
	case f.waitersSettle < f.waitersWindow:
		return usage("--waiters-settle must be at least --waiters-window")
	case f.semSlots < 1 || f.semSlots > tenure.MaxSlots || f.semClients < 1 || f.semClients > 4096 || f.semDuration <= 0 || f.semTTL <= 0 || f.semHold < 0:
		return usage("--sem-slots must be 1 to %d, --sem-clients 1 to 4096, --sem-duration and --sem-ttl positive, --sem-hold not negative", tenure.MaxSlots)
	case f.handoffs < 1 || f.candidates < 2:
		return usage("--handoffs must be positive and --candidates at least 2")
	}
	if contains(f.phases, bench.PhaseFailover) && runtime.GOOS != "linux" {
		return usage("the failover phase needs Linux (CLOCK_MONOTONIC shared by processes); leave it out of --phases")
	}
	prefix := f.prefix
	if prefix == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		prefix = "bench/" + hex.EncodeToString(b[:])
	}

	stores := []string{"memory"}
	explicit := strings.TrimSpace(a.storeURL)
	if explicit == "" {
		explicit = strings.TrimSpace(os.Getenv(envStore))
		if c.Flags().Changed("sqlite") || f.cassandra != "" || f.postgres != "" || f.mysql != "" || f.etcd != "" || f.redis != "" {
			explicit = "" // the per-store flags say what to measure
		}
	}
	sqliteURL := f.sqlite
	if sqliteURL == "" && bench.Scheme(explicit) != "sqlite" {
		dir, err := os.MkdirTemp("", "tenure-bench-")
		if err != nil {
			return fail(exitUnavailable, "%v", err)
		}
		defer os.RemoveAll(dir)
		sqliteURL = "sqlite:" + filepath.Join(dir, "leases.db")
	}
	for _, u := range []string{sqliteURL, explicit, f.cassandra, f.postgres, f.mysql, f.etcd, f.redis} {
		if u != "" && !contains(stores, u) {
			stores = append(stores, u)
		}
	}
	kept := stores[:0]
	for _, u := range stores {
		if !contains(f.skip, bench.Scheme(u)) {
			kept = append(kept, u)
		}
	}
	stores = kept

	exe, err := os.Executable()
	if err != nil && contains(f.phases, bench.PhaseFailover) {
		return fail(exitSoftware, "cannot find this program to start candidates: %v", err)
	}
	cfg := bench.RunConfig{
		Stores: stores, Phases: f.phases,
		Clients: f.clients, Contended: f.contended, Duration: f.duration, Rounds: f.rounds,
		MaxSamples: f.maxSamples, TTL: f.ttl, CostCycles: f.costCycles,
		Scale: bench.ScaleConfig{
			Leases: f.scaleLeases[0], TTL: f.scaleTTL, Duration: f.scaleDuration, Slack: f.lateSlack,
			MaxConcurrentRenewals: f.maxRenewals, AcquireRate: f.scaleRate,
		},
		ScaleLeases: f.scaleLeases, ScaleStopOnLate: f.scaleStopLate,
		ScaleStores: f.scaleStores,
		PeerClients: f.peerClients, PeerContended: f.peerContended, PeerTTL: f.peerTTL, PeerHold: f.peerHold,
		Waiters: bench.WaitersConfig{
			Waiters: f.waiters, TTL: f.waitersTTL, Hold: f.waitersHold, Settle: f.waitersSettle,
			Window: f.waitersWindow, Timeout: f.waitersLimit, Stagger: f.waitersStagger,
		},
		WaitersStores: f.waitersStores,
		Semaphore: bench.SemaphoreConfig{
			Slots: f.semSlots, Clients: f.semClients, Duration: f.semDuration, TTL: f.semTTL, Hold: f.semHold,
		},
		SemaphoreStores: f.semStores,
		Handoffs:        f.handoffs, Candidates: f.candidates, FailoverTTL: f.failoverTTL, FailoverRetry: f.failoverRetry,
		FailoverStores: f.failoverStores,
		Candidate: func(storeURL, resource string, ttl, retry time.Duration) *exec.Cmd {
			return exec.Command(exe, "--store", storeURL, "candidate",
				"--resource", resource, "--ttl", ttl.String(), "--retry-period", retry.String())
		},
		Prefix: prefix,
		Progress: func(s string) {
			fmt.Fprintf(a.stderr, "%s %s\n", time.Now().Format("15:04:05"), s)
		},
	}
	report := &bench.Report{Version: 1, Started: time.Now().UTC(), Machine: bench.ReadMachine(), Command: benchCommandLine(c), Config: map[string]string{}}
	c.Flags().VisitAll(func(fl *pflag.Flag) { report.Config[fl.Name] = redactFlag(fl) })
	report.Config["prefix"] = prefix
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return fail(exitUsage, "%v", err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return fail(exitUsage, "cpu profile: %v", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			pf.Close()
		}()
	}
	bench.Run(ctx, cfg, report)
	report.Finished = time.Now().UTC()
	report.Machine.LoadEnd = bench.LoadAvg()
	report.WriteText(a.stdout)
	if f.jsonFile != "" {
		b, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return fail(exitSoftware, "%v", err)
		}
		if err := os.WriteFile(f.jsonFile, append(b, '\n'), 0o644); err != nil {
			return fail(exitUnavailable, "write %s: %v", f.jsonFile, err)
		}
	}
	if ctx.Err() != nil {
		return exitWith(exitSignalBase + int(syscall.SIGINT))
	}
	if len(report.Errors) > 0 {
		return exitWith(exitUnavailable)
	}
	return nil
}

// benchCommandLine is the command as run, store URLs redacted.
func benchCommandLine(c *cobra.Command) string {
	parts := []string{"tenure-bench"}
	c.Flags().Visit(func(fl *pflag.Flag) { parts = append(parts, "--"+fl.Name+"="+redactFlag(fl)) })
	return strings.Join(parts, " ")
}

func redactFlag(fl *pflag.Flag) string {
	v := fl.Value.String()
	if sv, ok := fl.Value.(pflag.SliceValue); ok {
		v = strings.Join(sv.GetSlice(), ",")
	}
	if strings.Contains(v, "://") {
		v = store.Redact(v)
	}
	return v
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// newBenchCandidateCmd is the hidden candidate process of the failover
// phase.
func (a *app) newBenchCandidateCmd() *cobra.Command {
	var cfg bench.CandidateConfig
	c := &cobra.Command{
		Use:    "candidate",
		Short:  "A candidate process for the failover phase (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if a.storeURL == "" {
				return usage("candidate: --store is required")
			}
			s, err := store.Open(ctx, a.storeURL)
			if errors.Is(err, store.ErrBadURL) {
				return usage("candidate: %v", err)
			} else if err != nil {
				return fail(exitUnavailable, "candidate: %v", err)
			}
			defer s.Close()
			if err := bench.RunCandidate(ctx, s, cfg, os.Getpid(), a.stdout); err != nil {
				return fail(exitUnavailable, "candidate: %v", err)
			}
			return nil
		},
	}
	c.Flags().StringVar(&cfg.Resource, "resource", "", "election resource")
	c.Flags().StringVar(&cfg.Identity, "identity", "", "readable id (default HOST:PID)")
	c.Flags().DurationVar(&cfg.TTL, "ttl", 3*time.Second, "election TTL")
	c.Flags().DurationVar(&cfg.RetryPeriod, "retry-period", time.Second, "election retry period")
	return c
}
