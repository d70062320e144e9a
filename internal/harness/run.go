package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenure-go/tenure/internal/faultinject"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/store"
)

// Config configures one harness run.
type Config struct {
	Store    string        // store URL: sqlite:PATH, cassandra://...
	Workers  int           // contending processes at any time
	Duration time.Duration // how long faults are injected
	TTL      time.Duration // lease TTL
	Retry    time.Duration // the workers' retry interval (largest backoff delay)
	Seed     uint64        // seeds the fault schedule and the workers
	Faults   []string      // fault kinds; nil means every kind that applies to the store
	Unsafe   bool          // run the deliberately unsafe client
	// SharedOwner makes the workers give the store one owner string per
	// Locker, as tenure did before grant identity (deliberately unsafe).
	SharedOwner bool
	Out         string  // output directory: histories/, logs/, faults.jsonl, report.json
	ExitProb    float64 // probability that a worker exits without releasing after a piece of work
	// HoldProb and HoldByRenew: see WorkerConfig.
	HoldProb    float64
	HoldByRenew bool

	// Workload is what the Workers workers do: WorkloadLease or
	// WorkloadReacquire (default).
	Workload string
	// SemWorkers more workers hold slots of a semaphore of Slots slots, on
	// a resource of their own (WorkloadSemaphore).
	SemWorkers int
	Slots      int
	// SemMixed starts the semaphore workers with different settings, as
	// processes of one deployment may be during a rollout: every other one
	// with twice the TTL, and the last one with one slot more (its marker
	// must keep it apart from holders of Slots slots, with
	// ErrSlotsMismatch). The kind of the marker-TTL bug, where a short-TTL
	// holder shortened the shared marker.
	SemMixed bool
	// RWWorkers more workers hold a shared/exclusive lock on a resource of
	// their own (WorkloadRW), each round in a mode drawn at random.
	RWWorkers int

	// SlotChangeProb is the probability that a semaphore worker's round
	// takes a slot of Slots+1 slots instead (WorkerConfig.SlotChangeProb).
	SlotChangeProb float64
	// CancelWaiter runs a second waiter in every lease worker's process
	// (WorkerConfig.CancelWaiter).
	CancelWaiter bool

	// ServerFaults allows faults that crash and restart the store's server
	// (server-restart on PostgreSQL and MySQL, through PostgresScript and
	// MySQLScript); the server
	// must be one of the script's (its env names the store's address).
	ServerFaults bool

	// Exe and ExeArgs run a worker: Exe ExeArgs... worker FLAGS.
	Exe     string
	ExeArgs []string

	// CassandraScript is scripts/cassandra, for node faults.
	CassandraScript string
	// EtcdScript is scripts/etcd, for the member faults of a three-member
	// cluster.
	EtcdScript string
	// PostgresScript is scripts/postgres, for server-restart.
	PostgresScript string
	// MySQLScript is scripts/mariadb, for server-restart and Galera node
	// faults.
	MySQLScript string
	// Galera names the nodes of a Galera cluster ("host:port,..."): the
	// workers are spread over them, each through a proxy of its own.
	Galera string
	// RedisSentinelScript and RedisClusterScript are scripts/redis-sentinel
	// and scripts/redis-cluster, for master-failover.
	RedisSentinelScript, RedisClusterScript string

	// LinearizabilityTimeout bounds porcupine (0: no limit).
	LinearizabilityTimeout time.Duration
	// LinearizabilityMemory bounds the heap during porcupine's check, in
	// bytes (0: DefaultLinearizabilityMemory; below 0: no limit).
	LinearizabilityMemory int64

	// Log receives progress lines (nil: discarded).
	Log io.Writer
}

// Run runs the harness: it starts the workers, injects faults on the
// seeded schedule for cfg.Duration, stops the workers (they release what
// they hold), and checks the histories. The report's Violations must be 0
// and its Missing empty.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Workers < 2 {
		return nil, errors.New("harness: need at least 2 workers")
	}
	if cfg.Workload == "" {
		cfg.Workload = WorkloadReacquire
	}
	if cfg.Workload != WorkloadLease && cfg.Workload != WorkloadReacquire {
		return nil, fmt.Errorf("harness: workload %q: the -workers workers run %s or %s (the semaphore's are -sem-workers)", cfg.Workload, WorkloadLease, WorkloadReacquire)
	}
	if cfg.SemWorkers < 0 || cfg.SemWorkers > 0 && (cfg.Slots < 1 || cfg.Slots >= cfg.SemWorkers) {
		return nil, fmt.Errorf("harness: %d semaphore workers for %d slots: want more workers than slots, and at least one slot", cfg.SemWorkers, cfg.Slots)
	}
	if cfg.RWWorkers < 0 {
		return nil, fmt.Errorf("harness: %d shared/exclusive workers", cfg.RWWorkers)
	}
	if cfg.TTL <= 0 || cfg.Retry <= 0 || cfg.Duration <= 0 {
		return nil, errors.New("harness: TTL, retry and duration must be positive")
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	for _, d := range []string{"histories", "logs"} {
		if err := os.MkdirAll(filepath.Join(cfg.Out, d), 0o755); err != nil {
			return nil, err
		}
	}
	env, err := setupStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer env.close()
	kinds := cfg.Faults
	if kinds == nil {
		kinds = env.faults
	}
	for _, k := range kinds {
		if !slices.Contains(env.faults, k) && !slices.Contains(env.extra, k) {
			return nil, fmt.Errorf("harness: fault %q does not apply to %s stores (they have: %s)", k, env.scheme, strings.Join(append(slices.Clone(env.faults), env.extra...), ","))
		}
	}
	ff, err := os.OpenFile(filepath.Join(cfg.Out, "faults.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer ff.Close()
	op, err := NewRecorder(filepath.Join(cfg.Out, "histories", operatorHistory))
	if err != nil {
		return nil, err
	}
	defer op.Close()
	op.Record(Event{Ev: EvStart, T: MonoNow(), Owner: operatorOwner, Worker: -1})
	o := &orch{
		cfg:      cfg,
		env:      env,
		rng:      rand.New(rand.NewPCG(cfg.Seed, 0x7e17e)),
		targets:  rand.New(rand.NewPCG(cfg.Seed, 0x7a76e7)),
		faultsF:  ff,
		operator: op,
		changed:  make(chan struct{}, 1),
		resource: fmt.Sprintf("harness-%d-%d", cfg.Seed, MonoNow()),
	}
	fmt.Fprintf(cfg.Log, "harness: store=%s seed=%d workers=%d (%s) semaphore-workers=%d slots=%d rw-workers=%d ttl=%v duration=%v faults=%s out=%s\n",
		env.scheme, cfg.Seed, cfg.Workers, cfg.Workload, cfg.SemWorkers, cfg.Slots, cfg.RWWorkers, cfg.TTL, cfg.Duration, strings.Join(kinds, ","), cfg.Out)
	for i := 0; i < cfg.Workers+cfg.SemWorkers+cfg.RWWorkers; i++ {
		s := &slot{idx: i, sem: i >= cfg.Workers && i < cfg.Workers+cfg.SemWorkers, rw: i >= cfg.Workers+cfg.SemWorkers}
		o.slots = append(o.slots, s)
		if err := o.start(s); err != nil {
			o.shutdown()
			return nil, err
		}
	}
	// An etcd cluster's elections extend its leases: record them.
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if env.scheme == "etcd" && len(env.nodes) > 1 {
			if err := o.watchTerms(wctx); err != nil {
				fmt.Fprintf(cfg.Log, "harness: watching the leader: %v\n", err)
			}
		}
	}()
	runErr := o.inject(ctx, kinds)
	o.shutdown()
	stopWatch()
	<-watched

	hs, err := ReadHistories(filepath.Join(cfg.Out, "histories"))
	if err != nil {
		return nil, err
	}
	faults, err := ReadFaults(filepath.Join(cfg.Out, "faults.jsonl"))
	if err != nil {
		return nil, err
	}
	rep := Check(hs, faults, Options{
		Profile:                env.profile,
		TTL:                    cfg.TTL,
		RetryInterval:          cfg.Retry,
		LinearizabilityTimeout: cfg.LinearizabilityTimeout,
		LinearizabilityMemory:  cfg.LinearizabilityMemory,
		VisualPath:             filepath.Join(cfg.Out, "linearizability.html"),
	})
	rep.Store = env.scheme
	if env.scheme == "cassandra" && len(env.nodes) > 1 {
		rep.Store = fmt.Sprintf("cassandra-%dnodes", len(env.nodes))
	}
	if env.scheme == "etcd" && len(env.nodes) > 1 {
		rep.Store = fmt.Sprintf("etcd-%dmembers", len(env.nodes))
	}
	rep.Seed, rep.Workers, rep.TTL, rep.Duration, rep.Unsafe = cfg.Seed, cfg.Workers, cfg.TTL.String(), cfg.Duration.String(), cfg.Unsafe
	rep.Workload, rep.SemWorkers, rep.SharedOwner, rep.RWWorkers = cfg.Workload, cfg.SemWorkers, cfg.SharedOwner, cfg.RWWorkers
	if cfg.SemWorkers > 0 {
		rep.Slots = cfg.Slots
	}
	for _, k := range kinds {
		if rep.Faults[k] == 0 {
			rep.Missing = append(rep.Missing, k)
		}
	}
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.Out, "report.json"), append(b, '\n'), 0o644); err != nil {
		return rep, err
	}
	return rep, runErr
}

// The operator's history: the deletions and resets of key-delete and
// store-reset, as operations on the store.
const (
	operatorHistory = "operator.jsonl"
	operatorOwner   = "operator"
)

type orch struct {
	cfg      Config
	env      *storeEnv
	rng      *rand.Rand // the schedule: kinds, durations, gaps, nodes
	lastKind int        // the kind of the last holder struck (slot.kind)
	targets  *rand.Rand // workers picked among holders, or when none holds a lease (timing-dependent, so apart from the schedule)
	faultsF  *os.File
	operator *Recorder
	changed  chan struct{}
	resource string

	mu       sync.Mutex
	slots    []*slot
	stopping bool
	wg       sync.WaitGroup
}

type slot struct {
	idx      int
	sem      bool // a semaphore worker
	rw       bool // a shared/exclusive lock's worker
	gen      int
	pid      int
	proc     *os.Process
	holding  bool
	token    uint64
	resource string // of the lease it holds
	history  string
}

// semResource is the semaphore workers' resource.
func (o *orch) semResource() string { return o.resource + "-sem" }

// semSettings returns the TTL and number of slots of semaphore worker idx
// with SemMixed: twice the TTL for every other one, one slot more for the
// last one.
func (o *orch) semSettings(idx int) (time.Duration, int) {
	k := idx - o.cfg.Workers
	ttl, slots := o.cfg.TTL, o.cfg.Slots
	if k%2 == 1 {
		ttl *= 2
	}
	if k == o.cfg.SemWorkers-1 {
		slots++
	}
	return ttl, slots
}

// resources lists every lease name of the run: the lease workers'
// resource, the semaphore's slots and its marker.
func (o *orch) resources() []string {
	rs := []string{o.resource}
	if o.cfg.SemWorkers > 0 {
		// The slot counts the workers may use: Slots, one more for
		// SemMixed's last worker, and one more than each with
		// SlotChangeProb.
		most := o.cfg.Slots
		if o.cfg.SemMixed {
			most++
		}
		if o.cfg.SlotChangeProb > 0 {
			most++
		}
		for n := o.cfg.Slots; n <= most; n++ {
			for i := 1; i <= n; i++ {
				rs = append(rs, naming.SlotName(o.semResource(), i, n))
			}
		}
		rs = append(rs, naming.MarkerName(o.semResource()))
	}
	if o.cfg.RWWorkers > 0 {
		rs = append(rs, o.rwResource()) // the gate; shared holders' leases: rwShared
	}
	return rs
}

func (o *orch) notify() {
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

// start launches the worker process of slot s, and a goroutine that replaces
// it whenever it ends, until shutdown.
func (o *orch) start(s *slot) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.startLocked(s)
}

func (o *orch) startLocked(s *slot) error {
	name := fmt.Sprintf("w%02d-%03d", s.idx, s.gen)
	hist := filepath.Join(o.cfg.Out, "histories", name+".jsonl")
	resource, workload := o.resource, o.cfg.Workload
	ttl, slots := o.cfg.TTL, o.cfg.Slots
	if s.sem {
		resource, workload = o.semResource(), WorkloadSemaphore
		if o.cfg.SemMixed {
			ttl, slots = o.semSettings(s.idx)
		}
	}
	if s.rw {
		resource, workload = o.rwResource(), WorkloadRW
	}
	workerURL := o.env.workerURL
	if len(o.env.workerURLs) > 0 {
		workerURL = o.env.workerURLs[s.idx%len(o.env.workerURLs)]
	}
	args := append(slices.Clone(o.cfg.ExeArgs), "worker",
		"-store", workerURL,
		"-resource", resource,
		"-workload", workload,
		"-slots", strconv.Itoa(slots),
		"-ttl", ttl.String(),
		"-retry", o.cfg.Retry.String(),
		"-history", hist,
		"-worker", strconv.Itoa(s.idx),
		"-seed", strconv.FormatUint(o.cfg.Seed, 10),
		"-exit-prob", strconv.FormatFloat(o.cfg.ExitProb, 'g', -1, 64))
	if o.env.translate != "" {
		args = append(args, "-translate", o.env.translate)
	}
	if o.cfg.Unsafe {
		args = append(args, "-unsafe")
	}
	if o.cfg.SharedOwner {
		args = append(args, "-shared-owner")
	} else if o.cfg.HoldProb > 0 {
		args = append(args, "-hold-prob", strconv.FormatFloat(o.cfg.HoldProb, 'g', -1, 64))
	}
	if o.cfg.HoldByRenew {
		args = append(args, "-hold-by-renew")
	}
	if s.sem && o.cfg.SlotChangeProb > 0 {
		args = append(args, "-slots-alt", strconv.Itoa(slots+1), "-slot-change-prob", strconv.FormatFloat(o.cfg.SlotChangeProb, 'g', -1, 64))
	}
	if !s.sem && o.cfg.CancelWaiter && !o.cfg.Unsafe {
		args = append(args, "-cancel-waiter")
	}
	logf, err := os.Create(filepath.Join(o.cfg.Out, "logs", name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(o.cfg.Exe, args...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("harness: start worker: %w", err)
	}
	s.pid, s.proc, s.history, s.holding = cmd.Process.Pid, cmd.Process, hist, false
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		defer logf.Close()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			o.mu.Lock()
			switch f[0] {
			case statusGrant:
				s.holding = true
				if len(f) > 1 {
					s.token, _ = strconv.ParseUint(f[1], 10, 64)
				}
				if len(f) > 2 {
					s.resource = f[2]
				}
			case statusEnd:
				s.holding = false
			}
			o.mu.Unlock()
			o.notify()
		}
		err := cmd.Wait()
		gone := Event{Ev: EvGone, T: MonoNow(), Err: "exited"}
		if err != nil {
			gone.Err = err.Error()
		}
		if err := AppendEvent(hist, gone); err != nil {
			fmt.Fprintf(o.cfg.Log, "harness: %v\n", err)
		}
		if c := CompanionHistory(hist); fileExists(c) {
			if err := AppendEvent(c, gone); err != nil {
				fmt.Fprintf(o.cfg.Log, "harness: %v\n", err)
			}
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		s.holding, s.proc = false, nil
		o.notify()
		if o.stopping {
			return
		}
		s.gen++
		if err := o.startLocked(s); err != nil {
			fmt.Fprintf(o.cfg.Log, "harness: restart worker %d: %v\n", s.idx, err)
		}
	}()
	return nil
}

// shutdown stops every worker with SIGTERM (they release what they hold),
// and SIGKILLs those that have not exited after a while.
func (o *orch) shutdown() {
	o.mu.Lock()
	o.stopping = true
	for _, s := range o.slots {
		if s.proc != nil {
			s.proc.Signal(syscall.SIGCONT)
			s.proc.Signal(syscall.SIGTERM)
		}
	}
	o.mu.Unlock()
	done := make(chan struct{})
	go func() { o.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(3*o.cfg.TTL + 30*time.Second):
	}
	o.mu.Lock()
	for _, s := range o.slots {
		if s.proc != nil {
			s.proc.Kill()
		}
	}
	o.mu.Unlock()
	<-done
}

func (o *orch) between(lo, hi float64) time.Duration {
	return time.Duration((lo + (hi-lo)*o.rng.Float64()) * float64(o.cfg.TTL))
}

// sleep waits for d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (o *orch) record(f Fault) {
	b, _ := json.Marshal(f)
	o.faultsF.Write(append(b, '\n'))
	fmt.Fprintf(o.cfg.Log, "harness: fault %s on %s for %v%s\n", f.Kind, f.Target,
		time.Duration(f.End-f.Start).Round(time.Millisecond), map[bool]string{true: " (holder)", false: ""}[f.Holder])
}

// inject runs the fault schedule: every kind once, in a seeded order, then
// kinds drawn at random until the duration is up, with gaps of one to two
// and a half TTLs in between. Faults never overlap, and each is healed
// before the next. A run lasts at least until every kind was injected once.
func (o *orch) inject(ctx context.Context, kinds []string) error {
	if len(kinds) == 0 {
		sleep(ctx, o.cfg.Duration)
		return ctx.Err()
	}
	end := time.Now().Add(o.cfg.Duration)
	order := o.rng.Perm(len(kinds))
	for i := 0; ; i++ {
		// The run lasts the duration, and at least until every kind was
		// tried once.
		if i >= len(order) && !time.Now().Add(o.cfg.TTL).Before(end) {
			return ctx.Err()
		}
		if !sleep(ctx, o.between(1, 2.5)) {
			return ctx.Err()
		}
		if i >= len(order) && !time.Now().Before(end) {
			return ctx.Err()
		}
		kind := kinds[o.rng.IntN(len(kinds))]
		if i < len(order) {
			kind = kinds[order[i]]
		}
		f, err := o.fault(ctx, kind)
		if errors.Is(err, errNoFault) {
			continue
		}
		if err != nil {
			return fmt.Errorf("harness: fault %s: %w", kind, err)
		}
		o.record(f)
	}
}

// holder waits up to d for a worker that holds a lease, and returns one at
// random; without one it returns a random worker.
func (o *orch) holder(ctx context.Context, d time.Duration) *slot {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		o.mu.Lock()
		var holders []*slot
		for _, s := range o.slots {
			if s.holding && s.proc != nil {
				holders = append(holders, s)
			}
		}
		if len(holders) > 0 {
			// Strike the holders of each workload in turn (the lease's,
			// the semaphore's, the shared/exclusive lock's), so that every
			// fault kind meets every workload (a slot holder drawn at
			// random among three holders was missed by three pauses in a
			// row often enough to fail a short test).
			var turn []*slot
			for k := 1; k <= 3 && len(turn) == 0; k++ {
				for _, s := range holders {
					if s.kind() == (o.lastKind+k)%3 {
						turn = append(turn, s)
					}
				}
			}
			s := turn[o.targets.IntN(len(turn))]
			o.lastKind = s.kind()
			o.mu.Unlock()
			return s
		}
		o.mu.Unlock()
		select {
		case <-o.changed:
			continue
		case <-ctx.Done():
		case <-t.C:
		}
		break
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var live []*slot
	for _, s := range o.slots {
		if s.proc != nil {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[o.targets.IntN(len(live))]
}

func (o *orch) fault(ctx context.Context, kind string) (Fault, error) {
	f := Fault{Kind: kind}
	switch kind {
	case FaultPause, FaultKill:
		s := o.holder(ctx, 3*o.cfg.TTL)
		if s == nil {
			return f, errNoFault
		}
		o.mu.Lock()
		proc, pid := s.proc, s.pid
		f.Holder, f.Token = s.holding, s.token
		if s.holding {
			f.Resource = s.resource
		}
		o.mu.Unlock()
		if proc == nil {
			return f, errNoFault
		}
		f.Target = fmt.Sprintf("worker %d (pid %d)", s.idx, pid)
		if kind == FaultKill {
			f.Start = MonoNow()
			proc.Kill()
			f.End = f.Start
			return f, nil
		}
		d := o.between(1.5, 3)
		f.Start = MonoNow()
		proc.Signal(syscall.SIGSTOP)
		sleep(ctx, d)
		proc.Signal(syscall.SIGCONT)
		f.End = MonoNow()
		f.Detail = fmt.Sprintf("stopped for %v", d.Round(time.Millisecond))
		return f, nil
	case FaultStuckWriter:
		d := o.between(1.5, 2.5)
		db, err := openSQLite(o.env.sqlitePth) // anew: store-reset may have replaced the file
		if err != nil {
			return f, err
		}
		defer db.Close()
		conn, err := db.Conn(ctx)
		if err != nil {
			return f, err
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return f, err
		}
		f.Start = MonoNow()
		sleep(ctx, d)
		_, err = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		f.End = MonoNow()
		f.Target = "store"
		f.Detail = fmt.Sprintf("BEGIN IMMEDIATE held for %v", d.Round(time.Millisecond))
		return f, err
	case FaultProxyDelay, FaultProxyDrop, FaultProxyBlackhole, FaultProxyPartition:
		f.Target = "store network"
		hold := o.between(1, 2.5)
		f.Start = MonoNow()
		switch kind {
		case FaultProxyDelay:
			delay := o.between(0.05, 0.5)
			for _, p := range o.env.proxies {
				p.SetDelay(delay)
			}
			f.Detail = fmt.Sprintf("every chunk delayed %v", delay.Round(time.Millisecond))
		case FaultProxyDrop:
			for _, p := range o.env.proxies {
				p.SetMode(netfault.DropReplies)
			}
		case FaultProxyPartition:
			// Open connections go silent and new ones hang: the drivers'
			// calls time out, their connections are dropped, and the dials
			// that replace them never complete until the partition is over.
			// Each proxy takes a moment to fill its listen queue: the fault
			// starts once all of them are partitioned.
			for _, p := range o.env.proxies {
				p.SetMode(netfault.Partition)
			}
			f.Start = MonoNow()
		default:
			for _, p := range o.env.proxies {
				p.SetMode(netfault.Blackhole)
			}
		}
		sleep(ctx, hold)
		for _, p := range o.env.proxies {
			p.SetDelay(0)
			p.SetMode(netfault.Pass)
			if kind != FaultProxyDelay {
				// Streams that lost bytes are out of step: cut them, as a
				// real network's broken connections would be.
				p.Reset()
			}
		}
		f.End = MonoNow()
		return f, nil
	case FaultLateDelivery:
		return o.lateDelivery(ctx, f)
	case FaultNotifyHalfOpen:
		return o.notifyHalfOpen(ctx, f)
	case FaultNodeKill, FaultNodePause, FaultCASTimeout, FaultLeaderChange, FaultLeaderPause:
		return o.nodeFault(ctx, f)
	case FaultServerRestart:
		return o.serverRestart(ctx, f)
	case FaultMasterFailover:
		return o.masterFailover(ctx, f)
	case FaultStoreReset, FaultKeyDelete:
		return o.operatorFault(ctx, f)
	case FaultStaleRenewal:
		return o.staleRenewal(ctx, f)
	}
	return f, fmt.Errorf("unknown fault kind %q", kind)
}

func (o *orch) script(ctx context.Context, args ...string) error {
	_, err := runScript(ctx, o.env.nodeScript, args...)
	return err
}

// lateDelivery holds back every request for 0.5 to 2 TTLs, for 1 to 2.5
// TTLs: calls give up (each is bounded by the time left on its lease, at
// most a TTL), and the requests reach the server afterwards.
func (o *orch) lateDelivery(ctx context.Context, f Fault) (Fault, error) {
	f.Target = "store network"
	hold := o.between(1, 2.5)
	late := o.between(0.5, 2)
	var held0, deliv0, after0 int64
	for _, p := range o.env.proxies {
		h, d, a := p.LateStats()
		held0, deliv0, after0 = held0+h, deliv0+d, after0+a
	}
	f.Start = MonoNow()
	for _, p := range o.env.proxies {
		p.SetLate(late)
	}
	sleep(ctx, hold)
	for _, p := range o.env.proxies {
		p.SetLate(0)
	}
	// Healed once every held request was delivered.
	for _, p := range o.env.proxies {
		p.Drain(late + 10*time.Second)
	}
	f.End = MonoNow()
	var held, deliv, after int64
	for _, p := range o.env.proxies {
		h, d, a := p.LateStats()
		held, deliv, after = held+h, deliv+d, after+a
	}
	f.Detail = fmt.Sprintf("requests sent during %v delivered %v late: %d chunks held, %d delivered, %d of them after their client closed the connection",
		hold.Round(time.Millisecond), late.Round(time.Millisecond), held-held0, deliv-deliv0, after-after0)
	return f, nil
}

// notifyHalfOpen silences the workers' notification connections (a
// LISTEN, a pub/sub subscription; on etcd every open connection, which
// carries the watches and everything else): their bytes are dropped both
// ways and neither side learns it, as when a NAT or a firewall forgets a
// connection. The stores must notice (a bound on silence), replace the
// connection and wake their waiters; connections opened afterwards pass.
// The fault lasts the store's bound on silence, during which its waiters
// may be woken late; it waits up to 3 TTLs for a connection to silence (a
// worker's store listens from its first wait on).
func (o *orch) notifyHalfOpen(ctx context.Context, f Fault) (Fault, error) {
	f.Target = "notification connections"
	deadline := time.Now().Add(3 * o.cfg.TTL)
	n := 0
	for {
		f.Start = MonoNow()
		for _, p := range o.env.proxies {
			n += p.Silence(o.env.notifyPattern)
		}
		if n > 0 || !time.Now().Before(deadline) {
			break
		}
		if !sleep(ctx, o.cfg.TTL/4) {
			return f, ctx.Err()
		}
	}
	if n == 0 {
		return f, errNoFault
	}
	d := o.env.profile.SilenceBound
	sleep(ctx, d)
	f.End = MonoNow()
	f.Detail = fmt.Sprintf("%d connections silenced; the stores' bound on silence is %v", n, d)
	return f, nil
}

// heldResource waits up to 3 TTLs for a worker that holds a lease, and
// returns its resource, with the holder and token recorded in f; "" when
// nobody held one.
func (o *orch) heldResource(ctx context.Context, f *Fault) string {
	s := o.holder(ctx, 3*o.cfg.TTL)
	o.mu.Lock()
	defer o.mu.Unlock()
	if s == nil || !s.holding {
		return ""
	}
	f.Holder, f.Token, f.Resource = true, s.token, s.resource
	return s.resource
}

// staleRenewal replays, for 1 to 2 TTLs, late renewals of a holder's lease
// (faultinject.CassandraLateRenewal): each is built from the row as read,
// as the store on a host whose clock is up to a TTL ahead would build it,
// and delivered up to TTL/2 later with the time it was built, so that the
// holder has often renewed in between. That is what a Cassandra
// coordinator does with a renewal that its client gave up (an unknown
// outcome, after which the Locker renews again) while it kept retrying the
// Paxos round under contention: it applies it later, with the time it
// started. A store that let it apply over the newer renewal would expire the
// lease before its holder's deadline, and a waiter would be granted while
// the holder still trusts it. When the holder struck holds a semaphore
// slot, the late writes go to the semaphore's marker lease, whose owner
// string every holder shares, from a host whose clock is 1 to 2 TTLs ahead
// (its write ids, made from its clock, are then larger than the holders');
// a lease's own late writes come from its holder's host (no skew).
func (o *orch) staleRenewal(ctx context.Context, f Fault) (Fault, error) {
	if faultinject.CassandraLateRenewal == nil {
		return f, errNoFault
	}
	res := o.heldResource(ctx, &f)
	if res == "" {
		return f, errNoFault
	}
	skew := func() time.Duration { return 0 }
	if _, _, ok := naming.ParseSlotName(res); ok {
		res = naming.MarkerName(o.semResource())
		skew = func() time.Duration { return o.between(1, 2) }
	}
	bg := context.WithoutCancel(ctx)
	su, err := store.Parse(o.env.raw)
	if err != nil {
		return f, err
	}
	octx, cancel := context.WithTimeout(bg, 30*time.Second)
	ds, err := su.Open(octx)
	cancel()
	if err != nil {
		return f, err
	}
	defer ds.Close() //nolint:errcheck // clean-up
	f.Target = "lease of " + res
	f.Start = MonoNow()
	var sent, applied, failed int
	var last string
	for end := time.Now().Add(o.between(1, 2)); time.Now().Before(end); {
		cctx, cancel := context.WithTimeout(bg, o.cfg.TTL)
		send, err := faultinject.CassandraLateRenewal(cctx, ds, res, skew())
		cancel()
		if err != nil {
			failed++
		}
		if !sleep(ctx, o.between(0, 0.5)) {
			break
		}
		if send != nil {
			cctx, cancel := context.WithTimeout(bg, o.cfg.TTL)
			ok, detail, err := send(cctx)
			cancel()
			switch {
			case err != nil:
				failed++
			default:
				sent++
				last = detail
				if ok {
					applied++
				}
			}
		}
	}
	f.End = MonoNow()
	f.Detail = fmt.Sprintf("%d late renewals sent (last: %s), %d applied, %d failed to build or send", sent, last, applied, failed)
	return f, nil
}

// serverRestart crashes the PostgreSQL server (scripts/postgres kill:
// SIGKILL of the postmaster and its backends), leaves it down for up to
// 1.5 TTLs, and starts it again on its data (crash recovery).
func (o *orch) serverRestart(ctx context.Context, f Fault) (Fault, error) {
	bg := context.WithoutCancel(ctx)
	down := o.between(0, 1.5)
	f.Target = "server"
	f.Start = MonoNow()
	if _, err := runScript(bg, o.env.serverCmd, "kill"); err != nil {
		return f, err
	}
	sleep(ctx, down)
	_, err := runScript(bg, o.env.serverCmd, "start")
	f.End = MonoNow()
	f.Detail = fmt.Sprintf("killed, down %v, started again (ready after %v)", down.Round(time.Millisecond),
		time.Duration(f.End-f.Start).Round(time.Millisecond))
	return f, err
}

// operatorFault deletes lease records as an operator would (key-delete),
// or the SQLite file (store-reset), under the running workers; the
// deletion goes into the operator's history as a store operation.
func (o *orch) operatorFault(ctx context.Context, f Fault) (Fault, error) {
	bg := context.WithoutCancel(ctx)
	// Strike while someone holds a lease, as an operator "unlocking" it
	// would.
	res := o.heldResource(ctx, &f)
	all := o.rng.IntN(2) == 0
	if res == "" {
		all = true
	}
	// One operation per lease deleted (a reset deletes them all at once);
	// a deletion that failed stays without an answer: it may have taken
	// effect.
	var ids []int64
	call := func(op, resource string) {
		id := o.operator.newID()
		ids = append(ids, id)
		o.operator.Record(Event{Ev: EvCall, T: f.Start, ID: id, Op: op, Resource: resource})
	}
	var err error
	if f.Kind == FaultStoreReset {
		replace := o.rng.IntN(2) == 0
		f.Target = "store file"
		f.Start = MonoNow()
		call(OpReset, "")
		f.Detail, err = resetSQLite(bg, o.env.sqlitePth, replace)
	} else {
		targets, prefix := []string{res}, ""
		f.Target = "lease of " + res
		if all {
			targets, prefix = o.resources(), o.resource
			f.Target = "every lease of the run"
			if o.cfg.RWWorkers > 0 {
				// The shared holders' leases have names of their own:
				// delete those live now, by name, so that every deletion
				// is in the operator's history.
				shared, err := o.rwShared(bg)
				if err != nil {
					return f, err
				}
				targets, prefix = append(targets, shared...), ""
			}
		}
		f.Start = MonoNow()
		for _, r := range targets {
			call(OpDelete, r)
		}
		cctx, cancel := context.WithTimeout(bg, 30*time.Second)
		f.Detail, err = deleteKeys(cctx, o.env.raw, targets, prefix)
		cancel()
	}
	f.End = MonoNow()
	if err != nil {
		return f, err
	}
	for _, id := range ids {
		o.operator.Record(Event{Ev: EvReturn, T: f.End, ID: id, Res: ResReleased})
	}
	return f, nil
}

func (o *orch) nodeFault(ctx context.Context, f Fault) (Fault, error) {
	nodes := o.env.nodes
	n := nodes[o.rng.IntN(len(nodes))]
	bg := context.WithoutCancel(ctx)
	if o.env.scheme == "etcd" && (f.Kind == FaultNodePause || f.Kind == FaultLeaderPause) {
		// An etcd leader stopped for longer than the TTL revokes, when it
		// runs again, leases that were kept alive (leader-pause, outside
		// the contract): node-pause stops a follower, leader-pause the
		// leader.
		out, err := runScript(bg, o.env.nodeScript, "leader")
		leader, perr := strconv.Atoi(strings.TrimSpace(out))
		if err != nil || perr != nil {
			return f, fmt.Errorf("harness: which etcd member leads: %q: %w", out, errors.Join(err, perr))
		}
		if f.Kind == FaultLeaderPause {
			n = leader
		} else if n == leader {
			n = nodes[(slices.Index(nodes, n)+1+o.rng.IntN(len(nodes)-1))%len(nodes)]
		}
	}
	f.Target = fmt.Sprintf("node %d", n)
	if f.Kind == FaultLeaderPause {
		f.Target = fmt.Sprintf("node %d (the raft leader)", n)
	}
	switch f.Kind {
	case FaultLeaderChange:
		// Move the raft leader to member n, or to another one when n leads.
		f.Start = MonoNow()
		out, err := runScript(bg, o.env.nodeScript, "move-leader", fmt.Sprint(n))
		f.End = MonoNow()
		f.Target = "raft leader"
		lines := strings.Split(strings.TrimSpace(out), "\n")
		f.Detail = lines[len(lines)-1] // "leader M -> N"
		return f, err
	case FaultNodeKill:
		d := o.between(1.5, 3)
		f.Start = MonoNow()
		if err := o.script(bg, "kill", strconv.Itoa(n)); err != nil {
			return f, err
		}
		sleep(ctx, d)
		err := o.script(bg, "restart", strconv.Itoa(n))
		f.End = MonoNow()
		f.Detail = fmt.Sprintf("down %v before restart", d.Round(time.Millisecond))
		return f, err
	case FaultNodePause, FaultLeaderPause:
		d := o.between(1.5, 3)
		f.Start = MonoNow()
		if err := o.script(bg, "pause", strconv.Itoa(n)); err != nil {
			return f, err
		}
		sleep(ctx, d)
		err := o.script(bg, "resume", strconv.Itoa(n))
		f.End = MonoNow()
		f.Detail = fmt.Sprintf("stopped for %v", d.Round(time.Millisecond))
		return f, err
	default: // cas-timeout: two replicas stop while holders renew
		m := nodes[(slices.Index(nodes, n)+1+o.rng.IntN(len(nodes)-1))%len(nodes)]
		f.Target = fmt.Sprintf("nodes %d and %d", n, m)
		// Wait for a holder, so that renewals are in flight.
		o.holder(ctx, 3*o.cfg.TTL)
		d := time.Duration((1 + 2*o.rng.Float64()) * float64(time.Second))
		f.Start = MonoNow()
		err1 := o.script(bg, "pause", strconv.Itoa(n))
		err2 := o.script(bg, "pause", strconv.Itoa(m))
		sleep(ctx, d)
		err3 := o.script(bg, "resume", strconv.Itoa(n))
		err4 := o.script(bg, "resume", strconv.Itoa(m))
		f.End = MonoNow()
		f.Detail = fmt.Sprintf("both stopped for %v", d.Round(time.Millisecond))
		return f, errors.Join(err1, err2, err3, err4)
	}
}

// masterFailover kills a master of a Redis Sentinel set or Redis Cluster
// (SIGKILL), waits until a replica was promoted in its place, starts the
// killed node again (it rejoins as a replica, empty until it has
// synchronised) and waits until the topology is whole again.
func (o *orch) masterFailover(ctx context.Context, f Fault) (Fault, error) {
	bg := context.WithoutCancel(ctx)
	var n string
	f.Start = MonoNow()
	if o.env.scheme == "redis+sentinel" || o.env.scheme == "rediss+sentinel" {
		out, err := runScript(bg, o.env.nodeScript, "kill-master")
		if err != nil {
			return f, err
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		n = strings.TrimSpace(lines[len(lines)-1])
	} else {
		out, err := runScript(bg, o.env.nodeScript, "masters")
		if err != nil {
			return f, err
		}
		masters := strings.Fields(out)
		if len(masters) == 0 {
			return f, fmt.Errorf("harness: %s masters: none", o.env.nodeScript)
		}
		n = masters[o.rng.IntN(len(masters))]
		if err := o.script(bg, "kill", n); err != nil {
			return f, err
		}
	}
	f.Target = "master (node " + n + ")"
	if err := o.script(bg, "wait-failover", n); err != nil {
		return f, err
	}
	promoted := MonoNow()
	if err := o.script(bg, "restart", n); err != nil {
		return f, err
	}
	err := o.script(bg, "start") // waits until the replicas are in sync
	f.End = MonoNow()
	f.Detail = fmt.Sprintf("a replica took over %v after the kill", time.Duration(promoted-f.Start).Round(time.Millisecond))
	if err == nil {
		// A node that is a master again was started before a replica
		// took its place: it came back without its keys (no persistence)
		// and its replicas copied it. That loses every lease it had (on
		// a cluster, of its slots), and is not the failover this fault
		// stands for.
		var out string
		if out, err = runScript(bg, o.env.nodeScript, "masters"); err == nil && slices.Contains(strings.Fields(out), n) {
			err = fmt.Errorf("harness: node %s is a master again after its restart: %s wait-failover %s returned before a replica took its place", n, o.env.nodeScript, n)
		}
	}
	return f, err
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
