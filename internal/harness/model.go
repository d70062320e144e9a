package harness

import (
	"fmt"
	"hash/fnv"
	"runtime/metrics"
	"sort"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/tenure-go/tenure/store/etcd"
	"github.com/tenure-go/tenure/store/postgres"
	"github.com/tenure-go/tenure/store/redis"
)

// Profile is what the checker may assume about a store's timing.
type Profile struct {
	// Name is the store's URL scheme, such as "sqlite" or "cassandra".
	Name string
	// MinTTL is a lower bound of how long the store keeps a lease written
	// with ttl, counted from the moment it applied the write (the
	// linearization point of the operation).
	MinTTL func(ttl time.Duration) time.Duration
	// MaxTTL is an upper bound of the same.
	MaxTTL func(ttl time.Duration) time.Duration
	// LateEffects says that an operation whose answer was lost (a timeout, a
	// dropped reply, a killed client) may still take effect at any later
	// time, as a Cassandra Paxos proposal may be completed by the next
	// proposer. When false (SQLite: the client process applies its own
	// transaction), it takes effect before the call returned, or before the
	// process was reaped.
	LateEffects bool
	// ResolvedAnswers says that the store resolves an operation whose
	// answer was lost by reading the record afterwards (Cassandra's SERIAL
	// read), and reports what it read: a release or renewal whose lease
	// changed hands before the read is reported lost, and an acquire held,
	// although the write may have been applied in between. Such answers
	// therefore do not show that the operation had no effect: the checker
	// treats a lost release or renewal, and a held answer to an acquire that
	// lasted longer than MinTTL (time for an applied grant to expire before
	// the read), as unknown outcomes that took effect, if at all, before the
	// answer (the write's condition can no longer hold afterwards).
	ResolvedAnswers bool
	// ExpiryFromEffect says that the store counts a lease's TTL from the
	// operation's linearization point (a Redis script reads the server's
	// clock and its write is visible at once). Otherwise the TTL is only
	// known to count from some time after the request was sent (a Paxos
	// round completed later keeps the time of its proposal; SQLite reads
	// its clock before the COMMIT that makes the write visible).
	ExpiryFromEffect bool
	// LeaderExtension is how much longer than its TTL a lease may live
	// after a leader election (OpTerm): etcd's new leader renews every
	// lease for its TTL plus an extension of up to the election timeout.
	LeaderExtension time.Duration
	// UnknownMayEndEarly says that an acquire or renewal whose outcome is
	// unknown may leave the lease with less than its TTL, down to none: the
	// etcd store puts the key on a shared etcd lease and confirms the
	// operation only when a keep-alive of that etcd lease is confirmed too;
	// when the keep-alive is not (a paused member held it), the put stands
	// on an etcd lease that may expire at once (safety-ci seed
	// 3670411738911098: a key put 2 ms after its acquire was sent was
	// deleted 1.98 s later, with a TTL of 2 s). No holder trusts such a
	// grant, so this takes nothing from the exclusion checks.
	UnknownMayEndEarly bool
	// StaleRefusals says that an acquire may be refused by a view of a lease
	// that is over: the Kubernetes store judges a lease expired by how long
	// this Store has seen it unchanged, so a Store that first sees a write
	// late (a renewal delivered late) still counts it live after others
	// found it over, released or taken over. Such a refusal names a grant
	// made before (its token below the next one); it grants nothing and
	// takes nothing from the exclusion checks.
	StaleRefusals bool
	// ConditionalWrites says that every write the store makes is
	// conditioned on the version of the record that it read before it sent
	// the request, or on the record's absence for a create, and that every
	// write applied changes that version (the Kubernetes store's updates
	// carry the resourceVersion read; the API server refuses them with 409
	// once the Lease has changed). A write whose answer was lost therefore
	// takes effect, if at all, before any write applied after its sender
	// gave up: before the answer of the first write called after that and
	// confirmed, unless an operator's deletion may come after that write
	// (a create may then still apply). The checker bounds such a late
	// effect there rather than leaving it open to the end of the history.
	ConditionalWrites bool
	// Takeover, when set, bounds the liveness check instead of MaxTTL: how
	// long after a killed holder's last write a worker that waits for the
	// lease may take to be granted it, less the retry interval. For the
	// Kubernetes store, whose MaxTTL has no bound (a worker that has just
	// started counts a lease's duration from its own first look), it is
	// the duration a waiting worker, which watches the Lease, counts.
	Takeover func(ttl time.Duration) time.Duration
	// Notifies says that the store wakes waiters on a release
	// (driver.Notifier); otherwise they poll, at most a retry interval
	// apart, and (driver.Reserver) the store keeps the freed resource for
	// the waiter that reserved it.
	Notifies bool
	// SilenceBound is how long the store may take to replace a
	// notification connection that went half-open (from its last message):
	// postgres.ListenCheck and redis.ListenCheck twice (a single server, a
	// Sentinel set or a cluster alike); for etcd, gRPC's keep-alive (10 s +
	// 5 s) and the Store's watch check twice; for Kubernetes, the time its
	// Store gives one watch (70 s). Zero for a store without such a
	// connection.
	SilenceBound time.Duration
}

// PollBound is how long after a release a waiter may take to ask the
// store again, if nothing went wrong: none for a store that notifies a
// release (a round trip is allowed apart), the retry interval for one whose
// waiters poll.
func (p Profile) PollBound(retry time.Duration) time.Duration {
	if p.Notifies {
		return 0
	}
	return retry
}

func ceilMillis(ttl time.Duration) time.Duration {
	return (ttl + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// SQLiteProfile is the SQLite store's timing: it rounds a TTL up to whole
// milliseconds and writes expires_ms = floor(now_ms) + ttl_ms, with now read
// on CLOCK_BOOTTIME (which runs at CLOCK_MONOTONIC's rate) inside the
// writing transaction. The lease is therefore live for more than
// ceil(ttl)−1ms and at most ceil(ttl) after the write's clock reading.
//
// That reading is not the write's linearization point: other processes
// read the row as it was until the transaction's COMMIT, which comes after
// the rest of the batch's operations and an fsync of the write-ahead log,
// so a reader can see no lease after the clock reading that the lease's
// TTL counts from. The reading lies between the call and the
// linearization point, hence ExpiryFromEffect is false.
var SQLiteProfile = Profile{
	Name:   "sqlite",
	MinTTL: func(ttl time.Duration) time.Duration { return ceilMillis(ttl) - time.Millisecond },
	MaxTTL: ceilMillis,
}

// ProfileFor returns the profile of a store URL scheme.
func ProfileFor(scheme string) (Profile, error) {
	switch scheme {
	case "sqlite":
		return SQLiteProfile, nil
	case "cassandra":
		return CassandraProfile, nil
	case "postgres", "postgresql":
		return PostgresProfile, nil
	case "mysql", "mariadb":
		return MySQLProfile, nil
	case "etcd":
		return EtcdProfile, nil
	case "redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster":
		return RedisProfile, nil
	}
	if k := lookupKind(scheme); k != nil {
		return k.Profile, nil
	}
	return Profile{}, fmt.Errorf("harness: no timing profile for store %q", scheme)
}

// Input is a store operation as the linearizability model sees it.
type Input struct {
	Op       string // acquire, renew, release, get; delete and reset (an operator's)
	Resource string // the lease's name; "" for reset (every lease)
	Owner    string // the grant's owner string
	Token    uint64 // renew, release, keep
	Keeper   string // keep: the owner string that keeps the lease
	TTL      time.Duration
	Call     int64 // when the request was sent
	Ret      int64 // when the answer arrived; Never when the effect may come later
	// Late says that the answer was lost and the effect may come after
	// the call ended, up to Ret.
	Late bool
	// GaveUp is when a call whose answer was lost ended: its error, or
	// the reaping of its process; 0 when not known.
	GaveUp int64
}

// Output is a store operation's result as the model sees it.
type Output struct {
	Res         string // granted, held, renewed, released, lost, got, notheld, unknown, error
	Token       uint64 // granted
	Holder      string // granted, held, got
	HolderToken uint64 // held, got
}

// State is the model's state: the lease on the one resource, with time
// bounds on its expiry. Time is CLOCK_MONOTONIC nanoseconds.
type State struct {
	// Holder is the owner of the lease, "" when the resource is free.
	Holder string
	// Token is the holder's fencing token; 0 when it was granted by an
	// operation whose answer was lost and no later answer has shown it yet.
	Token uint64
	// ExpMin and ExpMax bound the store's expiry of the lease: it is live
	// before ExpMin and expired from ExpMax on.
	ExpMin, ExpMax int64
	// TTL is the TTL the lease was last written with (for OpTerm).
	TTL time.Duration
	// Lo is a lower bound of the time at which the last operation took
	// effect: linearization points never go back in time.
	Lo int64
	// NextToken is the smallest token a new grant may carry.
	NextToken uint64
	// Unshown says that a grant whose answer was lost may have taken a
	// token that no answer has shown since: it is at least NextToken−1,
	// and may be any larger one (Cassandra's tokens follow the clock), so
	// an answer that names it as a token granted before is possible even
	// after that grant is over.
	Unshown bool
	// Expired and ExpiredToken name the grant whose lease was last judged
	// expired, while the resource is free and nothing was written since
	// (ConditionalWrites): the record still names it, and a renewal or
	// hand-over of that grant still applies to it, making it live again.
	Expired      string
	ExpiredToken uint64
}

func satAdd(t int64, d time.Duration) int64 {
	if t > Never-int64(d) {
		return Never
	}
	return t + int64(d)
}

// Step returns every state the store may be in after the operation (in,
// out) is applied in state s, at a linearization point between in.Call and
// in.Ret and no earlier than s.Lo. None means that the operation cannot be
// explained from s.
func (p Profile) Step(s State, in Input, out Output) []State {
	tLo := max(s.Lo, in.Call)
	if tLo > in.Ret {
		return nil
	}
	st := step{p: p, s: s, in: in, out: out, tLo: tLo}
	st.noop = s
	st.noop.Lo = tLo
	// The lease in s may be live at some t in [tLo, in.Ret].
	st.live = s.Holder != "" && tLo < s.ExpMax
	// The resource may be free at some t >= tFree, t <= in.Ret.
	st.tFree = tLo
	if s.Holder != "" {
		st.tFree = max(tLo, s.ExpMin)
	}
	st.free = st.tFree <= in.Ret
	switch in.Op {
	case OpAcquire:
		st.acquire()
	case OpRenew:
		st.renew()
	case OpRelease:
		st.release()
	case OpKeep:
		st.keep()
	case OpTerm:
		st.term()
	case OpDelete, OpReset:
		st.deleted()
	case OpGet:
		st.get()
	default:
		return nil
	}
	return st.next
}

// step is one application of Step: the operation, the state it applies
// to, what that state allows between the operation's call and return, and
// the states found so far.
type step struct {
	p    Profile
	s    State
	in   Input
	out  Output
	tLo  int64 // the earliest linearization point
	noop State // s, unchanged by the operation, at tLo
	// live: the lease in s may be live at some t in [tLo, in.Ret].
	live bool
	// free: the resource may be free at some t >= tFree, t <= in.Ret.
	tFree int64
	free  bool
	next  []State
}

// add adds n to the states found, once; a lease certainly expired by n.Lo
// is a free resource.
func (st *step) add(n State) {
	if n.Holder != "" && n.Lo >= n.ExpMax {
		n = st.p.expired(n, n.Lo) // certainly expired: free
	}
	for _, o := range st.next {
		if o == n {
			return
		}
	}
	st.next = append(st.next, n)
}

// tok reports whether the holder's token may be t, and returns the state
// with the token pinned.
func (st *step) tok(t uint64) (State, bool) {
	s, n := st.s, st.s
	switch {
	case s.Token == t && t != 0:
	case s.Token == 0 && t != 0 && t+1 >= s.NextToken:
		n.Token = t
		n.NextToken = max(n.NextToken, t+1)
		n.Unshown = false
	default:
		return n, false
	}
	return n, true
}

// mine is tok for a lease that the operation's owner holds.
func (st *step) mine(t uint64) (State, bool) {
	if st.s.Holder != st.in.Owner {
		return st.s, false
	}
	return st.tok(t)
}

// confirmed returns n written at t0 with ttl by a request whose answer
// arrived at ret (Never: the answer was lost, the effect may come later).
func (st *step) confirmed(n State, t0 int64, ttl time.Duration, ret int64) State {
	from := st.in.Call
	if st.p.ExpiryFromEffect {
		from = t0
	}
	n.ExpMin = satAdd(from, st.p.MinTTL(ttl))
	if ret == Never && st.p.UnknownMayEndEarly {
		n.ExpMin = t0
	}
	n.ExpMax = satAdd(ret, st.p.MaxTTL(ttl))
	n.Lo = t0
	n.TTL = ttl
	return n
}

// freed is the resource free from t on: released or deleted.
func (st *step) freed(t int64) State {
	return State{Lo: t, NextToken: st.s.NextToken, Unshown: st.s.Unshown}
}

// expired is the resource free from t on because the lease in s expired
// (or s is free already). With ConditionalWrites the record still names
// the expired grant.
func (p Profile) expired(s State, t int64) State {
	n := State{Lo: t, NextToken: s.NextToken, Unshown: s.Unshown}
	if p.ConditionalWrites {
		n.Expired, n.ExpiredToken = s.Expired, s.ExpiredToken
		if s.Holder != "" {
			n.Expired, n.ExpiredToken = s.Holder, s.Token
		}
	}
	return n
}

// revived reports whether a write of owner's grant of token t may apply to
// the record of a lease judged expired (ConditionalWrites), and returns
// the state with that lease back: a write conditioned on the record's
// version still applies when nothing else wrote it, however late.
func (st *step) revived(owner string, t uint64) (State, bool) {
	s := st.s
	if !st.p.ConditionalWrites || s.Holder != "" || s.Expired != owner || s.Expired == "" {
		return s, false
	}
	switch {
	case s.ExpiredToken == t && t != 0:
	case s.ExpiredToken == 0 && t != 0 && t+1 >= s.NextToken:
	case s.ExpiredToken != 0 && t == 0: // an acquire renewing its own grant
		t = s.ExpiredToken
	default:
		return s, false
	}
	n := State{Holder: owner, Token: t, NextToken: max(s.NextToken, t+1), Lo: st.tLo}
	if t == 0 {
		n.Unshown = s.Unshown
	}
	return n, true
}

// lostAnswer: the store said that owner and token do not hold a live
// lease.
func (st *step) lostAnswer() {
	_, ok := st.mine(st.in.Token)
	if !ok || st.s.Token == 0 {
		st.add(st.noop) // someone else's lease, or another token
	}
	if ok && st.free {
		st.add(st.p.expired(st.s, st.tFree)) // this lease, expired
	}
}

func (st *step) acquire() {
	s, in, out := st.s, st.in, st.out
	switch out.Res {
	case ResGranted:
		if out.Holder != in.Owner || out.Token == 0 {
			return
		}
		if n, ok := st.mine(out.Token); ok && st.live {
			st.add(st.confirmed(n, st.tLo, in.TTL, in.Ret)) // the same lease, renewed
		}
		if n, ok := st.revived(in.Owner, out.Token); ok {
			st.add(st.confirmed(n, st.tLo, in.TTL, in.Ret))
		}
		if st.free && out.Token >= s.NextToken {
			n := State{Holder: in.Owner, Token: out.Token, NextToken: out.Token + 1}
			st.add(st.confirmed(n, st.tFree, in.TTL, in.Ret))
		}
	case ResHeld:
		if out.Holder == "" {
			// The Cassandra store's answer when its conditional writes
			// lost a race twice: the row it saw last was free, with
			// token HolderToken, so it granted nothing. The resource was
			// free then, and that token had been granted before.
			switch {
			case st.free && out.HolderToken < s.NextToken:
				st.add(st.freed(st.tFree))
			case st.free && s.Unshown && out.HolderToken+1 >= s.NextToken:
				// The token of a grant whose answer was lost, now over.
				n := st.freed(st.tFree)
				n.NextToken, n.Unshown = out.HolderToken+1, false
				st.add(n)
			}
			return
		}
		if out.Holder != in.Owner && s.Holder == out.Holder && st.live {
			if n, ok := st.tok(out.HolderToken); ok {
				n.Lo = st.tLo
				st.add(n)
			}
		}
		if st.p.StaleRefusals && out.HolderToken > 0 && out.HolderToken < s.NextToken && out.HolderToken != s.Token {
			st.add(st.noop) // a view of a grant that is over
		}
	case ResUnknown:
		st.add(st.noop)
		if s.Holder == in.Owner && st.live {
			st.add(st.confirmed(s, st.tLo, in.TTL, Never))
		}
		if n, ok := st.revived(in.Owner, 0); ok {
			st.add(st.confirmed(n, st.tLo, in.TTL, Never))
		}
		if st.free {
			n := State{Holder: in.Owner, NextToken: s.NextToken + 1, Unshown: true}
			st.add(st.confirmed(n, st.tFree, in.TTL, Never))
		}
	default:
		st.add(st.noop)
	}
}

func (st *step) renew() {
	switch st.out.Res {
	case ResRenewed:
		if n, ok := st.mine(st.in.Token); ok && st.live {
			st.add(st.confirmed(n, st.tLo, st.in.TTL, st.in.Ret))
		}
		if n, ok := st.revived(st.in.Owner, st.in.Token); ok {
			st.add(st.confirmed(n, st.tLo, st.in.TTL, st.in.Ret))
		}
	case ResLost:
		st.lostAnswer()
	case ResUnknown:
		st.add(st.noop)
		if n, ok := st.mine(st.in.Token); ok && st.live {
			st.add(st.confirmed(n, st.tLo, st.in.TTL, Never))
		}
		if n, ok := st.revived(st.in.Owner, st.in.Token); ok {
			st.add(st.confirmed(n, st.tLo, st.in.TTL, Never))
		}
	default:
		st.add(st.noop)
	}
}

func (st *step) release() {
	switch st.out.Res {
	case ResReleased:
		if _, ok := st.mine(st.in.Token); ok && st.live {
			st.add(st.freed(st.tLo))
		}
	case ResLost:
		st.lostAnswer()
	case ResUnknown:
		st.add(st.noop)
		if _, ok := st.mine(st.in.Token); ok && st.live {
			st.add(st.freed(st.tLo))
		}
	default:
		st.add(st.noop)
	}
}

// keep is Lease.ReleaseAfter: the lease of this grant goes to the keeper,
// with the same token, for the hold's TTL; nothing renews it.
func (st *step) keep() {
	kept := func(ret int64) {
		if n, ok := st.mine(st.in.Token); ok && st.live {
			n.Holder = st.in.Keeper
			st.add(st.confirmed(n, st.tLo, st.in.TTL, ret))
		}
		if n, ok := st.revived(st.in.Owner, st.in.Token); ok {
			n.Holder = st.in.Keeper
			st.add(st.confirmed(n, st.tLo, st.in.TTL, ret))
		}
	}
	switch st.out.Res {
	case ResKept:
		kept(st.in.Ret)
	case ResLost:
		st.lostAnswer()
	case ResUnknown:
		st.add(st.noop)
		kept(Never)
	default:
		st.add(st.noop)
	}
}

// term: the etcd cluster elected a leader between in.Call and in.Ret: the
// new leader gives every lease its full TTL again, plus up to an election
// timeout.
func (st *step) term() {
	n := st.s
	if st.s.Holder != "" && st.live {
		n.ExpMax = max(st.s.ExpMax, satAdd(st.in.Ret, st.p.MaxTTL(st.s.TTL)+st.p.LeaderExtension))
	}
	st.add(n)
}

// deleted: an operator deleted the lease's record (or the whole store):
// the resource is free, and the store must still never grant a token below
// those it granted before.
func (st *step) deleted() {
	if st.out.Res == ResUnknown {
		st.add(st.noop)
	}
	st.add(st.freed(st.tLo))
}

func (st *step) get() {
	switch st.out.Res {
	case ResGot:
		if st.s.Holder == st.out.Holder && st.live {
			if n, ok := st.tok(st.out.HolderToken); ok {
				n.Lo = st.tLo
				st.add(n)
			}
		}
	case ResNotHeld:
		if st.free {
			st.add(st.p.expired(st.s, st.tFree))
		}
	default:
		st.add(st.noop)
	}
}

// Model returns the porcupine model of a lease on one resource in a store
// with this profile.
func (p Profile) Model() porcupine.Model { return p.model(nil) }

// model is Model, whose steps all fail once abort is set: porcupine, which
// cannot be stopped from outside but for its timeout, then backtracks to
// the end of its search at once and lets its memory go (its answer is then
// meaningless, and thrown away).
func (p Profile) model(abort *atomic.Bool) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{State{NextToken: 1}} },
		Step: func(state, input, output any) []any {
			if abort != nil && abort.Load() {
				return nil
			}
			var out []any
			for _, n := range p.Step(state.(State), input.(Input), output.(Output)) {
				out = append(out, n)
			}
			return out
		},
		Partition: partitionByResource,
		Equal:     func(a, b any) bool { return a.(State) == b.(State) },
		Hash: func(state any) uint64 {
			s := state.(State)
			h := fnv.New64a()
			fmt.Fprintf(h, "%s|%d|%d|%d|%d|%d|%d|%t|%s|%d", s.Holder, s.Token, s.ExpMin, s.ExpMax, s.Lo, s.NextToken, s.TTL, s.Unshown, s.Expired, s.ExpiredToken)
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(Input), output.(Output)
			switch in.Op {
			case OpDelete, OpReset:
				return fmt.Sprintf("%s(%s) by the operator", in.Op, in.Resource)
			case OpTerm:
				return "leader elected"
			}
			s := fmt.Sprintf("%s(%s", in.Op, short(in.Owner))
			if in.Token != 0 {
				s += fmt.Sprintf(", t%d", in.Token)
			}
			s += ") -> " + out.Res
			switch out.Res {
			case ResGranted:
				s += fmt.Sprintf(" t%d", out.Token)
			case ResHeld, ResGot:
				s += fmt.Sprintf(" by %s t%d", short(out.Holder), out.HolderToken)
			}
			return s
		},
		DescribeState: func(state any) string {
			s := state.(State)
			if s.Holder == "" {
				return fmt.Sprintf("free (next token >= %d)", s.NextToken)
			}
			return fmt.Sprintf("%s t%d live until [%d, %d]", short(s.Holder), s.Token, s.ExpMin, s.ExpMax)
		},
	}
	return nm.ToModel()
}

// partitionByResource splits a history by lease: each lease's operations
// are linearizable on their own (a reset, which deletes every lease, goes
// into every partition).
func partitionByResource(ops []porcupine.Operation) [][]porcupine.Operation {
	by := map[string][]porcupine.Operation{}
	var names []string
	var resets []porcupine.Operation
	for _, op := range ops {
		in := op.Input.(Input)
		if in.Op == OpReset || in.Op == OpTerm {
			resets = append(resets, op)
			continue
		}
		if _, ok := by[in.Resource]; !ok {
			names = append(names, in.Resource)
		}
		by[in.Resource] = append(by[in.Resource], op)
	}
	sort.Strings(names)
	var out [][]porcupine.Operation
	for _, n := range names {
		p := append(by[n], resets...)
		sort.SliceStable(p, func(i, j int) bool { return p[i].Call < p[j].Call })
		out = append(out, p)
	}
	if len(out) == 0 && len(resets) > 0 {
		out = append(out, resets)
	}
	return out
}

func short(owner string) string {
	if len(owner) > 24 {
		return owner[:24]
	}
	return owner
}

// mayHideEffect reports whether the answer out may come from a read that
// followed a lost answer (see ResolvedAnswers).
func (p Profile) mayHideEffect(in Input, out Output) bool {
	switch {
	case (in.Op == OpRelease || in.Op == OpRenew || in.Op == OpKeep) && out.Res == ResLost:
		return true
	case in.Op == OpAcquire && out.Res == ResHeld:
		return time.Duration(in.Ret-in.Call) >= p.MinTTL(in.TTL)
	}
	return false
}

// Operations turns the store calls recorded in the histories into porcupine
// operations. A call without an answer (its process was killed) and a call
// whose outcome is unknown return at Never when the profile allows late
// effects; otherwise at the answer, or when the process was reaped.
//
// A holder named by a Locker's owner string rather than a grant's (the
// store saw one owner string per Locker: -shared-owner) is the grant of
// that Locker that was granted that token on that resource first.
func (p Profile) Operations(hs []*History) []porcupine.Operation {
	type grantKey struct {
		resource, locker string
		token            uint64
	}
	grantOf := map[grantKey]string{}
	firstAt := map[grantKey]int64{}
	for _, h := range hs {
		calls := map[int64]Event{}
		for _, e := range h.Events {
			switch {
			case e.Ev == EvCall:
				calls[e.ID] = e
			case e.Ev == EvReturn && e.Res == ResGranted:
				if c, ok := calls[e.ID]; ok {
					k := grantKey{c.Resource, lockerOwner(c.Owner), e.Token}
					if t, seen := firstAt[k]; !seen || e.T < t {
						grantOf[k], firstAt[k] = c.Owner, e.T
					}
				}
			}
		}
	}
	holder := func(resource, owner string, token uint64) string {
		if g, ok := grantOf[grantKey{resource, owner, token}]; ok && lockerOwner(owner) == owner && g != owner {
			return g
		}
		return owner
	}
	var ops []porcupine.Operation
	for ci, h := range hs {
		calls := map[int64]Event{}
		var order []int64
		done := map[int64]bool{}
		for _, e := range h.Events {
			switch e.Ev {
			case EvCall:
				calls[e.ID] = e
				order = append(order, e.ID)
			case EvReturn:
				c, ok := calls[e.ID]
				if !ok {
					continue
				}
				done[e.ID] = true
				in := Input{Op: c.Op, Resource: c.Resource, Owner: c.Owner, Token: c.Token, TTL: time.Duration(c.TTL), Call: c.T, Ret: e.T, Keeper: c.Keeper}
				out := Output{Res: e.Res, Token: e.Token, Holder: e.Holder, HolderToken: e.HolderToken}
				if out.Holder != "" && out.Holder != c.Owner {
					out.Holder = holder(c.Resource, out.Holder, out.HolderToken)
				}
				if e.Res == ResUnknown && p.LateEffects {
					in.Ret, in.Late, in.GaveUp = Never, true, e.T
				}
				if p.ResolvedAnswers && p.mayHideEffect(in, out) {
					out = Output{Res: ResUnknown}
				}
				if c.Op == OpGet && out.Res != ResGot && out.Res != ResNotHeld {
					continue // see unanswered reads below
				}
				ops = append(ops, porcupine.Operation{ClientId: ci, Input: in, Call: in.Call, Output: out, Return: in.Ret})
			}
		}
		for _, id := range order {
			if done[id] {
				continue
			}
			c := calls[id]
			if c.Op == OpGet {
				// A read without an answer changes nothing and tells
				// nothing: any linearization of the rest takes it at any
				// point of its interval. Left in, each one is a pending
				// operation porcupine must place (111,287 operations of a
				// 45-minute Cassandra soak, undecided).
				continue
			}
			ret, late, gaveUp := Never, p.LateEffects, int64(0)
			if h.Gone != nil {
				gaveUp = h.Gone.T
				if !late {
					ret = h.Gone.T
				}
			}
			in := Input{Op: c.Op, Resource: c.Resource, Owner: c.Owner, Token: c.Token, TTL: time.Duration(c.TTL), Call: c.T, Ret: ret, Keeper: c.Keeper, Late: late, GaveUp: gaveUp}
			ops = append(ops, porcupine.Operation{ClientId: ci, Input: in, Call: in.Call, Output: Output{Res: ResUnknown}, Return: ret})
		}
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	if p.ConditionalWrites {
		boundLateEffects(ops)
	}
	return dropSuperseded(ops)
}

// boundLateEffects gives each operation whose effect may come late the
// bound that ConditionalWrites allows: the answer of the first write on
// its resource called after it gave up and confirmed (granted, renewed,
// released, kept). An operation stays open when it is not known when it
// gave up, when no such write follows, or when an operator's deletion of
// the resource may take effect after it gave up.
func boundLateEffects(ops []porcupine.Operation) {
	type write struct{ call, ret int64 }
	writes := map[string][]write{}     // by resource, ops sorted by call
	deletedAfter := map[string]int64{} // the latest time a deletion may take effect
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		switch {
		case in.Op == OpDelete || in.Op == OpReset:
			deletedAfter[in.Resource] = max(deletedAfter[in.Resource], op.Return)
		case in.Late:
		case out.Res == ResGranted || out.Res == ResRenewed || out.Res == ResReleased || out.Res == ResKept:
			writes[in.Resource] = append(writes[in.Resource], write{op.Call, op.Return})
		}
	}
	var resetAfter int64
	for _, op := range ops {
		if in := op.Input.(Input); in.Op == OpReset {
			resetAfter = max(resetAfter, op.Return)
		}
	}
	for i, op := range ops {
		in := op.Input.(Input)
		if !in.Late || in.GaveUp == 0 {
			continue
		}
		if max(deletedAfter[in.Resource], resetAfter) > in.GaveUp {
			continue
		}
		ws := writes[in.Resource]
		j := sort.Search(len(ws), func(j int) bool { return ws[j].call > in.GaveUp })
		if j == len(ws) {
			continue
		}
		bound := ws[j].ret
		for _, w := range ws[j+1:] {
			bound = min(bound, w.ret) // calls are sorted, answers are not
		}
		in.Ret = bound
		ops[i].Input, ops[i].Return = in, bound
	}
}

// dropSuperseded removes the renewals, releases and hand-overs whose
// effect may come after their answer (Input.Late) and whose token was
// superseded before they were called: an operation on the same resource
// answered before the call showed a larger token (granted, held or read).
// In the model the smallest token a new grant may carry never goes down,
// and such an operation is one only the lease of its token can act on, so
// it can only leave the state as it is; a history is linearizable with it
// exactly when it is without it.
//
// Of the renewals, releases and hand-overs of one grant whose effect may
// come late up to the same bound, only the first called is kept: it may
// act wherever any of them could. Once a release or hand-over has acted,
// the lease is no longer the grant's and the others can only leave the
// state as it is; a renewal acting after another only moves the lease's
// earliest expiry later, which explains fewer answers, never more.
//
// Left in, each one is a pending operation porcupine must place: a
// Kubernetes run of 1,232 operations with 28 unanswered releases of one
// lease (a worker retrying through a partition) was undecided after five
// minutes, and so was one of 384 with 21 unanswered renewals of one grant.
func dropSuperseded(ops []porcupine.Operation) []porcupine.Operation {
	type shown struct {
		ret   int64
		token uint64
	}
	by := map[string][]shown{}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Late {
			continue
		}
		if t := max(out.Token, out.HolderToken); t > 0 {
			by[in.Resource] = append(by[in.Resource], shown{op.Return, t})
		}
	}
	for r, ss := range by {
		sort.Slice(ss, func(i, j int) bool { return ss[i].ret < ss[j].ret })
		for i := 1; i < len(ss); i++ {
			ss[i].token = max(ss[i].token, ss[i-1].token) // the largest shown by then
		}
		by[r] = ss
	}
	// ops are sorted by call: the first of repeated late operations of one
	// grant is the one with the earliest call.
	type grantOp struct {
		op, resource, owner, keeper string
		token                       uint64
		ttl                         time.Duration
		bound                       int64
	}
	pending := map[grantOp]bool{}
	kept := ops[:0]
	for _, op := range ops {
		in := op.Input.(Input)
		if in.Late && in.Token > 0 && (in.Op == OpRenew || in.Op == OpRelease || in.Op == OpKeep) {
			ss := by[in.Resource]
			i := sort.Search(len(ss), func(i int) bool { return ss[i].ret >= op.Call })
			if i > 0 && ss[i-1].token > in.Token {
				continue
			}
			k := grantOp{in.Op, in.Resource, in.Owner, in.Keeper, in.Token, in.TTL, op.Return}
			if pending[k] {
				continue
			}
			pending[k] = true
		}
		kept = append(kept, op)
	}
	return kept
}

// LinearizabilityResult is the outcome of the porcupine check.
type LinearizabilityResult struct {
	Result     string  `json:"result"` // Ok, Illegal, or Unknown (timed out, or out of memory)
	Operations int     `json:"operations"`
	Pending    int     `json:"pending"` // operations whose outcome is unknown
	Seconds    float64 `json:"seconds"`
	// MemoryBound, when set, says that the check was stopped (Result
	// Unknown) when the heap reached this many bytes.
	MemoryBound int64  `json:"memory_bound,omitempty"`
	Visual      string `json:"visualization,omitempty"`
	// FirstTrouble, when the history is not shown linearizable, is the
	// earliest time (CLOCK_MONOTONIC ns) such that the history cut there
	// is not shown linearizable within a few seconds, to within 100 ms: the
	// place to look.
	FirstTrouble int64 `json:"first_trouble,omitempty"`
	// Around describes the store calls answered in the second before
	// FirstTrouble.
	Around []string `json:"around,omitempty"`
}

// DefaultLinearizabilityMemory bounds the heap of the linearizability check
// when Options.LinearizabilityMemory is 0: porcupine's search over a long
// history with many unknown outcomes grew by about 100 MB/s, and a 45-minute
// Cassandra soak's check was killed by the kernel at 23 GB.
const DefaultLinearizabilityMemory = 8 << 30

// CheckLinearizable checks the store operations of hs against the profile's
// lease model, within timeout (0: no limit) and while the process's heap
// stays under memory bytes (0: DefaultLinearizabilityMemory; below 0: no
// limit). A check stopped by either bound answers Unknown. When the history
// is not linearizable and visualPath is not empty, porcupine's visualization
// is written there.
func (p Profile) CheckLinearizable(hs []*History, timeout time.Duration, memory int64, visualPath string) LinearizabilityResult {
	ops := p.Operations(hs)
	res := LinearizabilityResult{Operations: len(ops)}
	for _, op := range ops {
		if op.Output.(Output).Res == ResUnknown {
			res.Pending++
		}
	}
	if memory == 0 {
		memory = DefaultLinearizabilityMemory
	}
	start := time.Now()
	var abort atomic.Bool
	if memory > 0 && heapLive() >= uint64(memory) {
		abort.Store(true)
	}
	model := p.model(&abort)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if memory < 0 || abort.Load() {
			return
		}
		watchHeap(memory, stop, &abort)
	}()
	r, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	close(stop)
	<-watched
	res.Seconds = time.Since(start).Seconds()
	res.Result = string(r)
	if abort.Load() {
		res.Result, res.MemoryBound = string(porcupine.Unknown), memory
		return res
	}
	if r == porcupine.Illegal && visualPath != "" {
		if err := porcupine.VisualizePath(model, info, visualPath); err == nil {
			res.Visual = visualPath
		}
	}
	if r != porcupine.Ok {
		res.FirstTrouble, res.Around = p.firstTrouble(hs)
	}
	return res
}

// watchHeap sets abort when the heap's live objects reach limit bytes,
// looking every 50 ms, until stop is closed.
func watchHeap(limit int64, stop <-chan struct{}, abort *atomic.Bool) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if heapLive() >= uint64(limit) {
				abort.Store(true)
				return
			}
		}
	}
}

// heapLive returns the bytes of the heap's objects (live, and dead not yet
// swept), from runtime/metrics: no stop of the world.
func heapLive() uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// Cut returns the histories as they stood at time t: later events dropped,
// calls answered later left without an answer.
func Cut(hs []*History, t int64) []*History {
	var out []*History
	for _, h := range hs {
		c := *h
		c.Events = nil
		for _, e := range h.Events {
			if e.T <= t {
				c.Events = append(c.Events, e)
			}
		}
		if c.Gone != nil && c.Gone.T > t {
			c.Gone = nil
		}
		out = append(out, &c)
	}
	return out
}

// firstTrouble bisects for the shortest prefix of the history that is not
// shown linearizable within a few seconds.
func (p Profile) firstTrouble(hs []*History) (int64, []string) {
	var lo, hi int64 = Never, 0
	for _, h := range hs {
		for _, e := range h.Events {
			lo, hi = min(lo, e.T), max(hi, e.T)
		}
	}
	if hi == 0 {
		return 0, nil
	}
	model := p.Model()
	for i := 0; i < 40 && hi-lo > int64(100*time.Millisecond); i++ {
		m := lo + (hi-lo)/2
		if porcupine.CheckOperationsTimeout(model, p.Operations(Cut(hs, m)), 5*time.Second) == porcupine.Ok {
			lo = m
		} else {
			hi = m
		}
	}
	var around []string
	for _, op := range p.Operations(Cut(hs, hi)) {
		if op.Return != Never && op.Return >= hi-int64(time.Second) || op.Return == Never && op.Call >= hi-int64(time.Second) {
			in, out := op.Input.(Input), op.Output.(Output)
			around = append(around, fmt.Sprintf("[%d, %d] %s", op.Call, op.Return, model.DescribeOperation(in, out)))
		}
	}
	return hi, around
}

func ceilSeconds(ttl time.Duration) time.Duration {
	return (ttl + time.Second - 1) / time.Second * time.Second
}

// etcdRevokeCommit bounds the time etcd takes to commit the revocation of an
// expired lease through raft (a proposal, written to a quorum's disks).
const etcdRevokeCommit = time.Second

// clockSlack covers the difference between Cassandra's clock (the wall
// clock, which NTP may slew by up to 500 ppm) and CLOCK_MONOTONIC over a
// lease's lifetime.
const clockSlack = 5 * time.Millisecond

// CassandraProfile is the Cassandra store's timing (store/cassandra,
// StoreTTL): the store writes ⌈ttl⌉+1 whole seconds, and Cassandra expires a
// cell written at second x.f with TTL T at second x+T, after T−f seconds. A
// lease therefore lives more than ⌈ttl⌉ and at most ⌈ttl⌉+1s after the
// write's time, which the coordinator takes after the request arrived. A
// Paxos proposal whose answer was lost may be completed later by the next
// proposer, with its original time: late effects, and expiry counted from
// the send time.
var CassandraProfile = Profile{
	Name:            "cassandra",
	MinTTL:          func(ttl time.Duration) time.Duration { return ceilSeconds(ttl) - clockSlack },
	MaxTTL:          func(ttl time.Duration) time.Duration { return ceilSeconds(ttl) + time.Second + clockSlack },
	LateEffects:     true,
	ResolvedAnswers: true,
}

// PostgresProfile is the PostgreSQL store's timing (docs/stores.md): the
// statement that grants or renews sets expires_at = clock_timestamp() + the
// TTL in whole milliseconds, rounded up, on the database's clock (the wall
// clock, hence clockSlack), and a lease is live while expires_at >
// clock_timestamp(). A request delivered late (the proxy's delay) may take
// effect after its client gave up: late effects. The TTL counts from the
// statement's clock reading, which comes after the request was sent but may
// come well before the commit makes the row visible (the commit waits for
// its WAL flush, the statement for a row lock): a grant's row was seen to
// expire 1.001 s after its clock reading but only 0.61 s after a read
// that did not see it yet (safety-ci seed 402, under load). So the expiry
// is counted from the send time, as the holder's deadline is.
var PostgresProfile = Profile{
	Name:         "postgres",
	MinTTL:       func(ttl time.Duration) time.Duration { return ceilMillis(ttl) - clockSlack },
	MaxTTL:       func(ttl time.Duration) time.Duration { return ceilMillis(ttl) + clockSlack },
	LateEffects:  true,
	Notifies:     true,
	SilenceBound: 2 * postgres.ListenCheck,
}

// MySQLProfile is the MySQL store's timing (store/mysql): the statement
// that grants or renews sets expires_at = UTC_TIMESTAMP(6) + the TTL in
// whole microseconds, rounded up, on the database's clock (the wall clock,
// hence clockSlack), read when the statement started, which is after the
// request was sent but may be well before the commit (a statement waits
// for a row lock, a commit for its log flush), and a lease is live while
// expires_at > UTC_TIMESTAMP(6). As on PostgreSQL, a request delivered
// late may take effect after its client gave up, and the expiry counts from
// the send time. The Store notifies its waiters (driver.Notifier) by
// polling the rows they wait for every mysql.DefaultPollInterval (50 ms)
// over its pool, which WakeUpSlack covers; it has no notification
// connection of its own to go half-open (no SilenceBound).
var MySQLProfile = Profile{
	Name:        "mysql",
	MinTTL:      func(ttl time.Duration) time.Duration { return ceilMicros(ttl) - clockSlack },
	MaxTTL:      func(ttl time.Duration) time.Duration { return ceilMicros(ttl) + clockSlack },
	LateEffects: true,
	Notifies:    true,
}

func ceilMicros(ttl time.Duration) time.Duration {
	return (ttl + time.Microsecond - 1) / time.Microsecond * time.Microsecond
}

// RedisProfile is the Redis store's timing (docs/stores.md): a script sets
// PEXPIRE with the TTL in whole milliseconds, rounded up, on the server's
// millisecond clock, and a key is gone once that clock passes its expiry.
var RedisProfile = Profile{
	Name:             "redis",
	MinTTL:           func(ttl time.Duration) time.Duration { return ceilMillis(ttl) - clockSlack },
	MaxTTL:           func(ttl time.Duration) time.Duration { return ceilMillis(ttl) + time.Millisecond + clockSlack },
	LateEffects:      true,
	ExpiryFromEffect: true,
	Notifies:         true,
	SilenceBound:     2 * redis.ListenCheck,
}

// EtcdProfile is the etcd store's timing (docs/stores.md, measured on etcd
// 3.4.23; scripts/etcd runs 3.6.16 since, whose lease timing is the same). The store puts its keys on an etcd lease it shares between grants,
// of ⌈ttl⌉ whole seconds plus a margin (a tenth, at least 1 s), which it
// keeps alive while the process runs, and its reaper deletes a grant's key
// once the grant went unconfirmed for its TTL. A lease lives at least the
// requested TTL from the send of its last confirmation. While the holder's
// process runs, its reaper deletes the key within about a TTL of that; when
// the process stops (SIGSTOP, SIGKILL) its reaper stops too, and the key
// lives until the shared etcd lease expires: ⌈ttl⌉ + the margin after the
// last keep-alive, which the process may have sent up to a TTL after the
// last confirmation (a semaphore worker's marker or another grant keeps the
// etcd lease alive), plus etcd's revoke loop (500 ms), plus the commit of
// the revocation through raft (a loaded three-member cluster took up to
// 0.3 s; the bound allows 1 s). Seen: a slot lease whose holder was paused
// 0.52 s after its last renewal was still held 3.54 s after that renewal
// (safety-ci seed 402). In a cluster, a newly elected leader renews every
// etcd lease for its full TTL plus up to an election timeout (etcd 3.4
// keeps no remaining TTLs; docs/stores.md): the orchestrator records each
// election it sees (OpTerm), and the model extends the live lease then.
var EtcdProfile = Profile{
	Name:   "etcd",
	MinTTL: func(ttl time.Duration) time.Duration { return ttl - clockSlack },
	MaxTTL: func(ttl time.Duration) time.Duration {
		return ttl + max(ceilSeconds(ttl)+etcdMargin(ttl), 2*time.Second) + 500*time.Millisecond + etcdRevokeCommit + clockSlack
	},
	LateEffects:        true,
	LeaderExtension:    1500 * time.Millisecond,
	UnknownMayEndEarly: true,
	Notifies:           true,
	SilenceBound:       max(15*time.Second, 2*etcd.ListenCheck),
}

// etcdMargin is how much longer than the TTL, in whole seconds, the etcd
// store's shared etcd lease lives: a tenth, rounded up, at least a second.
func etcdMargin(ttl time.Duration) time.Duration {
	secs := int64(ceilSeconds(ttl) / time.Second)
	return time.Duration(max(1, (secs+9)/10)) * time.Second
}
