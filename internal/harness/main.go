package harness

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Exit codes of the tenure-harness command.
const (
	ExitOK        = 0
	ExitViolation = 1 // violations, a requested fault never injected, no handoff, or linearizability undecided
	ExitUsage     = 2
	ExitError     = 3 // the harness itself failed
	exitAbandon   = 4 // a worker exited without releasing, on purpose
)

// Main is the tenure-harness command: it runs the subcommand args[0]
// ("run", "worker" or "check") with the rest of args and returns the exit
// code; usage is printed to stderr for "help" or a missing or unknown
// subcommand. Commands that add stores to the harness register them
// before calling it.
func Main(args []string, stdout, stderr io.Writer, usage string) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return ExitUsage
	}
	switch args[0] {
	case "run":
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, "tenure-harness:", err)
			return ExitError
		}
		return RunMain(args[1:], stdout, stderr, exe)
	case "worker":
		return WorkerMain(args[1:])
	case "check":
		return CheckMain(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stderr, usage)
		return ExitOK
	default:
		fmt.Fprintln(stderr, usage)
		return ExitUsage
	}
}

// WorkerMain is the "worker" subcommand: one contender process.
func WorkerMain(args []string) int {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	var cfg WorkerConfig
	var translate string
	fs.StringVar(&cfg.Store, "store", "", "store URL")
	fs.StringVar(&cfg.Resource, "resource", "harness", "resource to contend for")
	fs.DurationVar(&cfg.TTL, "ttl", time.Second, "lease TTL")
	fs.DurationVar(&cfg.Retry, "retry", 250*time.Millisecond, "largest backoff delay of a blocking acquire")
	fs.StringVar(&cfg.History, "history", "", "history file (JSON lines)")
	fs.IntVar(&cfg.Worker, "worker", 0, "worker slot")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the worker's random choices (with its pid)")
	fs.BoolVar(&cfg.Unsafe, "unsafe", false, "ignore the lease's deadline checks (a deliberately unsafe client)")
	fs.Float64Var(&cfg.ExitProb, "exit-prob", 0.1, "probability of exiting without releasing after a piece of work")
	fs.StringVar(&translate, "translate", "", "Cassandra: node=proxy address pairs")
	fs.StringVar(&cfg.Workload, "workload", WorkloadLease, "what the worker does: "+strings.Join(Workloads, ", "))
	fs.IntVar(&cfg.Slots, "slots", 2, "the semaphore's number of slots (-workload semaphore)")
	fs.BoolVar(&cfg.SharedOwner, "shared-owner", false, "give the store one owner string per Locker, as before grant identity (deliberately unsafe)")
	fs.Float64Var(&cfg.HoldProb, "hold-prob", 0, "probability of ending a round with ReleaseAfter (a hold of two TTLs) instead of Release")
	fs.BoolVar(&cfg.HoldByRenew, "hold-by-renew", false, "make ReleaseAfter one renewal with the hold's TTL, as before driver.Keeper (deliberately unsafe)")
	fs.IntVar(&cfg.SlotsAlt, "slots-alt", 0, "the other slot count of -slot-change-prob (-workload semaphore)")
	fs.Float64Var(&cfg.SlotChangeProb, "slot-change-prob", 0, "probability that a round takes a slot of -slots-alt slots instead of -slots (-workload semaphore)")
	fs.BoolVar(&cfg.CancelWaiter, "cancel-waiter", false, "run a second waiter in the process, which gives up during half of its wake-ups (-workload lease or reacquire)")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if cfg.Store == "" || cfg.History == "" {
		fmt.Fprintln(os.Stderr, "worker: -store and -history are required")
		return ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := runWorker(ctx, cfg, translate, os.Stdout)
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrAbandon):
		return exitAbandon
	}
	fmt.Fprintln(os.Stderr, "worker:", err)
	return ExitError
}

// RunMain is the "run" subcommand: the orchestrator. exe is the harness
// binary (it runs itself with "worker").
func RunMain(args []string, stdout, stderr io.Writer, exe string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	var faults, out string
	var seed int64
	fs.StringVar(&cfg.Store, "store", "", "store URL: sqlite:PATH, cassandra://HOST[,HOST...][:PORT]/KEYSPACE[?replication=3], postgres://..., mysql://..., etcd://HOST:PORT, redis://HOST:PORT/DB, redis+sentinel://... or redis+cluster://... (default: sqlite:OUT/leases.db)")
	fs.IntVar(&cfg.Workers, "workers", 5, "contending worker processes")
	fs.DurationVar(&cfg.Duration, "duration", 45*time.Second, "how long to inject faults (CI: the default; soaks: e.g. 30m)")
	fs.DurationVar(&cfg.TTL, "ttl", 0, "lease TTL (default 2s for Cassandra and etcd, 1s for the others)")
	fs.DurationVar(&cfg.Retry, "retry", 250*time.Millisecond, "the workers' retry interval (largest backoff delay)")
	fs.Int64Var(&seed, "seed", 0, "seed of the fault schedule and of the workers' choices (default: from the clock; printed)")
	fs.StringVar(&faults, "faults", "", "comma-separated fault kinds (default: every kind that applies to the store): "+strings.Join(AllFaults, ","))
	fs.BoolVar(&cfg.Unsafe, "unsafe", false, "run a deliberately unsafe client, which works while it believes it holds the lease; the checker must report violations")
	fs.BoolVar(&cfg.SharedOwner, "shared-owner", false, "the workers give the store one owner string per Locker instead of one per grant, as tenure did before grant identity (deliberately unsafe; the checker must report violations)")
	fs.StringVar(&cfg.Workload, "workload", WorkloadReacquire, "what the -workers workers do: lease (rest before every acquire) or reacquire (after a loss, acquire again at once with the same Locker)")
	fs.IntVar(&cfg.SemWorkers, "sem-workers", 3, "workers that hold slots of a semaphore (on a resource of their own), besides the -workers workers")
	fs.BoolVar(&cfg.SemMixed, "sem-mixed", false, "start the semaphore workers with different settings: every other one with twice the TTL, the last one with one slot more (the marker must keep it apart)")
	fs.IntVar(&cfg.Slots, "slots", 2, "the semaphore's number of slots")
	fs.IntVar(&cfg.RWWorkers, "rw-workers", 3, "workers that hold a shared/exclusive lock (on a resource of their own), each round shared or, one time in three, exclusive, besides the -workers and -sem-workers workers")
	fs.Float64Var(&cfg.SlotChangeProb, "slot-change-prob", 0.2, "probability that a semaphore worker's round takes a slot of -slots+1 slots instead (0: never): the count may change only when no slot of the old one is held or kept")
	fs.BoolVar(&cfg.CancelWaiter, "cancel-waiters", true, "every lease worker process runs a second waiter on its store, which gives up during half of its wake-ups (the wake-up must reach the other waiter)")
	fs.StringVar(&out, "out", "", "output directory for histories, logs and report.json (default: a new temporary directory)")
	fs.Float64Var(&cfg.ExitProb, "exit-prob", 0.1, "probability that a worker exits without releasing after a piece of work")
	fs.Float64Var(&cfg.HoldProb, "hold-prob", 0.15, "probability that a worker ends a round with Lease.ReleaseAfter, a hold of two TTLs (for half of a semaphore worker's holds, 30 s (the marker's TTL) more) that nobody may be granted within, instead of Release (not with -shared-owner)")
	fs.BoolVar(&cfg.HoldByRenew, "hold-by-renew", false, "the workers' ReleaseAfter is one renewal with the hold's TTL, as before driver.Keeper (deliberately unsafe: a late renewal cuts the hold short; the checker must report it)")
	fs.StringVar(&cfg.CassandraScript, "cassandra-script", "scripts/cassandra", "the script that kills, restarts, pauses and resumes Cassandra nodes")
	fs.StringVar(&cfg.EtcdScript, "etcd-script", "scripts/etcd", "the script that kills, restarts, pauses and resumes the members of a three-member etcd cluster (start3) and moves its leader")
	fs.StringVar(&cfg.PostgresScript, "postgres-script", "scripts/postgres", "the script that crashes and restarts the PostgreSQL server (with -server-faults)")
	fs.StringVar(&cfg.MySQLScript, "mysql-script", "scripts/mariadb", "the script that crashes and restarts the MySQL/MariaDB server (with -server-faults), and kills, restarts, pauses and resumes Galera nodes (with -galera)")
	fs.StringVar(&cfg.Galera, "galera", "", "MySQL: the three nodes of a Galera cluster (HOST:PORT,HOST:PORT,HOST:PORT, scripts/mariadb start3) whose first node -store names: the workers are spread over the nodes, and node-kill and node-pause act on them through -mysql-script")
	fs.StringVar(&cfg.RedisSentinelScript, "redis-sentinel-script", "scripts/redis-sentinel", "the script that kills a Redis Sentinel set's master and restarts it (master-failover, with -server-faults)")
	fs.StringVar(&cfg.RedisClusterScript, "redis-cluster-script", "scripts/redis-cluster", "the script that kills a Redis Cluster's master and restarts it (master-failover, with -server-faults)")
	fs.BoolVar(&cfg.ServerFaults, "server-faults", false, "PostgreSQL and MySQL: add server-restart, which kills and restarts the server through -postgres-script or -mysql-script; Redis Sentinel and Cluster: add master-failover through -redis-sentinel-script or -redis-cluster-script (their env must name the store's servers: never point them at servers others use)")
	fs.DurationVar(&cfg.LinearizabilityTimeout, "lin-timeout", 5*time.Minute, "bound of the linearizability check (0: none)")
	fs.Int64Var(&cfg.LinearizabilityMemory, "lin-memory", 0, "bound of the linearizability check's heap, in bytes (0: 8 GiB; -1: none); a check stopped by it answers Unknown")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if seed == 0 {
		seed = time.Now().UnixNano() & (1<<53 - 1)
	}
	cfg.Seed = uint64(seed)
	if faults != "" {
		cfg.Faults = strings.Split(faults, ",")
	}
	if out == "" {
		d, err := os.MkdirTemp("", "tenure-harness-")
		if err != nil {
			fmt.Fprintln(stderr, "tenure-harness:", err)
			return ExitError
		}
		out = d
	}
	cfg.Out = out
	if cfg.Store == "" {
		abs, err := filepath.Abs(filepath.Join(out, "leases.db"))
		if err != nil {
			fmt.Fprintln(stderr, "tenure-harness:", err)
			return ExitError
		}
		cfg.Store = "sqlite:" + abs
	}
	if cfg.TTL == 0 {
		cfg.TTL = time.Second
		if strings.HasPrefix(cfg.Store, "cassandra:") || strings.HasPrefix(cfg.Store, "etcd:") {
			cfg.TTL = 2 * time.Second
		}
	}
	cfg.Exe = exe
	cfg.Log = stderr
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Fprintf(stderr, "tenure-harness: seed %d (replay with -seed %d)\n", cfg.Seed, cfg.Seed)
	rep, err := Run(ctx, cfg)
	if rep != nil {
		fmt.Fprintln(stdout, rep.Summary())
		fmt.Fprintf(stderr, "tenure-harness: report %s\n", filepath.Join(out, "report.json"))
		for _, v := range rep.Examples {
			fmt.Fprintf(stderr, "tenure-harness: VIOLATION %s: %s\n", v.Kind, v.Detail)
		}
		printTrouble(stderr, rep.Linearizability)
	}
	if err != nil {
		fmt.Fprintln(stderr, "tenure-harness:", err)
		return ExitError
	}
	if rep.Violations > 0 || len(rep.Missing) > 0 || rep.Handoffs == 0 || rep.Linearizability.Result != "Ok" {
		return ExitViolation
	}
	return ExitOK
}

// CheckMain is the "check" subcommand: it checks the histories of an
// earlier run again (or of a run still going, up to now) and prints the
// summary line.
func CheckMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var out, store, jsonOut string
	var o Options
	fs.StringVar(&out, "out", "", "the run's output directory")
	fs.StringVar(&jsonOut, "json", "", "also write the report as JSON to this file")
	fs.StringVar(&store, "store", "sqlite", "the store's kind: sqlite, cassandra, postgres, mysql, etcd or redis, or one the harness command registers (kubernetes, in the Kubernetes store's module)")
	fs.DurationVar(&o.TTL, "ttl", 0, "the workers' TTL (default: from the histories)")
	fs.DurationVar(&o.RetryInterval, "retry", 250*time.Millisecond, "the workers' retry interval")
	fs.DurationVar(&o.LinearizabilityTimeout, "lin-timeout", 5*time.Minute, "bound of the linearizability check (0: none)")
	fs.Int64Var(&o.LinearizabilityMemory, "lin-memory", 0, "bound of the linearizability check's heap, in bytes (0: 8 GiB; -1: none); a check stopped by it answers Unknown")
	if err := fs.Parse(args); err != nil || out == "" {
		fmt.Fprintln(stderr, "check: -out DIR is required")
		return ExitUsage
	}
	p, err := ProfileFor(store)
	if err != nil {
		fmt.Fprintln(stderr, "check:", err)
		return ExitUsage
	}
	o.Profile = p
	hs, err := ReadHistories(filepath.Join(out, "histories"))
	if err != nil {
		fmt.Fprintln(stderr, "check:", err)
		return ExitError
	}
	faults, err := ReadFaults(filepath.Join(out, "faults.jsonl"))
	if err != nil {
		fmt.Fprintln(stderr, "check:", err)
		return ExitError
	}
	rep := Check(hs, faults, o)
	fmt.Fprintln(stdout, rep.Summary())
	if jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(jsonOut, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "check:", err)
			return ExitError
		}
	}
	for _, v := range rep.Examples {
		fmt.Fprintf(stderr, "check: VIOLATION %s: %s\n", v.Kind, v.Detail)
	}
	printTrouble(stderr, rep.Linearizability)
	if rep.Violations > 0 || rep.Linearizability.Result != "Ok" {
		return ExitViolation
	}
	return ExitOK
}

func printTrouble(w io.Writer, r LinearizabilityResult) {
	if r.Result == "Ok" || r.FirstTrouble == 0 {
		return
	}
	fmt.Fprintf(w, "tenure-harness: linearizability %s; the history cut at %d is the shortest that is not shown linearizable; calls answered in the second before:\n", r.Result, r.FirstTrouble)
	for _, a := range r.Around {
		fmt.Fprintf(w, "    %s\n", a)
	}
}
