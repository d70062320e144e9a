package harness

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// op is a store call for hand-made histories: times in milliseconds; ret 0
// means the call never returned (its process was reaped at gone).
type op struct {
	owner   string
	kind    string
	token   uint64 // renew, release
	call    int64
	ret     int64
	res     string
	granted uint64 // granted token
	holder  string // held, got
	htoken  uint64
	lease   string // the lease's name ("" for all the same)
	keeper  string // keep
	ttl     time.Duration
}

// histories builds one history per owner from ops.
func histories(ttl time.Duration, gone map[string]int64, ops ...op) []*History {
	by := map[string]*History{}
	var order []string
	var id int64
	for _, o := range ops {
		owner := o.owner
		if owner == "" {
			owner = "get"
		}
		h, ok := by[owner]
		if !ok {
			h = &History{File: owner, Owner: owner, TTL: ttl}
			h.Events = append(h.Events, Event{Ev: EvStart, T: 0, Owner: owner, TTL: int64(ttl)})
			by[owner] = h
			order = append(order, owner)
		}
		id++
		cttl := ttl
		if o.ttl != 0 {
			cttl = o.ttl
		}
		h.Events = append(h.Events, Event{Ev: EvCall, T: o.call * ms, ID: id, Op: o.kind, Resource: o.lease, Owner: o.owner, Token: o.token, TTL: int64(cttl), Keeper: o.keeper})
		if o.ret != 0 {
			h.Events = append(h.Events, Event{Ev: EvReturn, T: o.ret * ms, ID: id, Res: o.res, Token: o.granted, Holder: o.holder, HolderToken: o.htoken})
		}
	}
	var hs []*History
	for _, owner := range order {
		h := by[owner]
		if g, ok := gone[owner]; ok {
			h.Gone = &Event{Ev: EvGone, T: g * ms}
		}
		hs = append(hs, h)
	}
	return hs
}

func acq(owner string, call, ret int64, res string) op {
	return op{owner: owner, kind: OpAcquire, call: call, ret: ret, res: res}
}

func granted(owner string, call, ret int64, token uint64) op {
	o := acq(owner, call, ret, ResGranted)
	o.granted, o.holder = token, owner
	return o
}

func held(owner string, call, ret int64, holder string, token uint64) op {
	o := acq(owner, call, ret, ResHeld)
	o.holder, o.htoken = holder, token
	return o
}

func renew(owner string, token uint64, call, ret int64, res string) op {
	return op{owner: owner, kind: OpRenew, token: token, call: call, ret: ret, res: res}
}

func keep(owner string, token uint64, keeper string, hold time.Duration, call, ret int64, res string) op {
	return op{owner: owner, kind: OpKeep, token: token, keeper: keeper, ttl: hold, call: call, ret: ret, res: res}
}

func release(owner string, token uint64, call, ret int64, res string) op {
	return op{owner: owner, kind: OpRelease, token: token, call: call, ret: ret, res: res}
}

func get(call, ret int64, res, holder string, token uint64) op {
	return op{kind: OpGet, call: call, ret: ret, res: res, holder: holder, htoken: token}
}

// operator's operations: a deletion of the lease's record, an election.
func del(call, ret int64) op {
	return op{owner: operatorOwner, kind: OpDelete, call: call, ret: ret, res: ResReleased}
}

func term(call, ret int64) op {
	return op{owner: operatorOwner, kind: OpTerm, call: call, ret: ret, res: ResRenewed}
}

func on(resource string, o op) op { o.lease = resource; return o }

func TestModel(t *testing.T) {
	sec := time.Second
	cases := []struct {
		name    string
		profile Profile
		gone    map[string]int64
		ops     []op
		want    string
	}{
		{"handoff after release", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			held("B", 20, 30, "A", 1),
			renew("A", 1, 300, 310, ResRenewed),
			get(400, 401, ResGot, "A", 1),
			release("A", 1, 500, 510, ResReleased),
			get(511, 512, ResNotHeld, "", 0),
			granted("B", 520, 530, 2),
			renew("B", 2, 800, 805, ResRenewed),
		}, "Ok"},
		{"handoff after expiry", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			held("B", 500, 510, "A", 1),
			granted("B", 1010, 1020, 2), // A's lease expired after 1s
			renew("A", 1, 1030, 1040, ResLost),
		}, "Ok"},
		// SQLite reads the clock for a grant's expiry inside the writing
		// transaction, but readers see the grant only at its COMMIT (the
		// rest of the batch and an fsync later): here a Get sees no lease
		// after A's clock reading, and A's lease ends a TTL after that
		// reading, less than a TTL after the Get.
		{"a grant's TTL counts from a clock reading before readers see it", SQLiteProfile, nil, []op{
			granted("A", 0, 100, 1),
			get(60, 70, ResNotHeld, "", 0),
			granted("B", 1030, 1040, 2),
		}, "Ok"},
		{"concurrent calls linearize in a different order than they were sent", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			release("A", 1, 100, 200, ResReleased),
			granted("B", 90, 210, 2), // sent before A's release, applied after it
		}, "Ok"},
		{"grant before the previous lease can have expired", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			granted("B", 500, 510, 2),
		}, "Illegal"},
		{"grant just before expiry", SQLiteProfile, nil, []op{
			granted("A", 100, 110, 1),
			granted("B", 1000, 1098, 2), // A's lease lives until at least 100+999ms
		}, "Illegal"},
		{"token reused", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 5),
			release("A", 5, 20, 30, ResReleased),
			granted("B", 40, 50, 5),
		}, "Illegal"},
		{"token goes back", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 5),
			release("A", 5, 20, 30, ResReleased),
			granted("B", 40, 50, 4),
		}, "Illegal"},
		{"renewal succeeds after expiry", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			renew("A", 1, 1200, 1210, ResRenewed),
		}, "Illegal"},
		{"renewal succeeds after another grant", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			granted("B", 1100, 1110, 2),
			renew("A", 1, 1120, 1130, ResRenewed),
		}, "Illegal"},
		{"a kept lease blocks others for the hold", RedisProfile, nil, []op{
			granted("A", 0, 10, 1),
			keep("A", 1, "A/kept", 3*sec, 100, 110, ResKept),
			renew("A", 1, 200, 210, ResLost), // the grant's late renewal: another holder now
			held("B", 1500, 1510, "A/kept", 1),
			get(2000, 2001, ResGot, "A/kept", 1),
			granted("B", 3200, 3210, 2), // the hold of 3 s from 100-110 has passed
		}, "Ok"},
		{"a grant inside a hold", RedisProfile, nil, []op{
			granted("A", 0, 10, 1),
			keep("A", 1, "A/kept", 3*sec, 100, 110, ResKept),
			granted("B", 1500, 1510, 2), // after the lease's TTL, inside the hold
		}, "Illegal"},
		{"a late renewal that cut a hold short", RedisProfile, nil, []op{
			granted("A", 0, 10, 1),
			renew("A", 1, 50, 0, ""), // its answer lost, applied late
			keep("A", 1, "A/kept", 3*sec, 100, 110, ResKept),
			granted("B", 1500, 1510, 2),
		}, "Illegal"},
		{"keep of a lease that is gone", RedisProfile, nil, []op{
			granted("A", 0, 10, 1),
			keep("A", 1, "A/kept", 3*sec, 1100, 1110, ResLost),
			granted("B", 1120, 1130, 2),
		}, "Ok"},
		{"lease lost while live", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			renew("A", 1, 300, 310, ResLost),
		}, "Illegal"},
		{"held by an owner that does not hold it", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			held("B", 20, 30, "C", 1),
		}, "Illegal"},
		{"held with the wrong token", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			held("B", 20, 30, "A", 2),
		}, "Illegal"},
		{"get sees nothing while the lease is live", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			get(100, 110, ResNotHeld, "", 0),
		}, "Illegal"},
		{"released twice", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			release("A", 1, 20, 30, ResReleased),
			release("A", 1, 40, 50, ResReleased),
		}, "Illegal"},
		{"same owner, same lease: a retried acquire renews", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			granted("A", 900, 910, 1),
			held("B", 1500, 1510, "A", 1), // live thanks to the second acquire
		}, "Ok"},
		{"unknown acquire that took effect", SQLiteProfile, nil, []op{
			acq("A", 0, 10, ResUnknown),
			held("B", 20, 30, "A", 1),
			granted("A", 40, 50, 1),
		}, "Ok"},
		{"unknown acquire that did not take effect", SQLiteProfile, nil, []op{
			acq("A", 0, 10, ResUnknown),
			granted("B", 20, 30, 1),
		}, "Ok"},
		{"unknown acquire cannot take effect after its process died", SQLiteProfile, map[string]int64{"A": 15}, []op{
			acq("A", 0, 0, ""), // killed mid-call, reaped at 15
			get(20, 21, ResNotHeld, "", 0),
			held("B", 30, 40, "A", 1),
		}, "Illegal"},
		{"late Paxos completion of a lost proposal", CassandraProfile, map[string]int64{"A": 15}, []op{
			acq("A", 0, 0, ""), // killed mid-call; the proposal is completed later
			get(20, 21, ResNotHeld, "", 0),
			held("B", 30, 40, "A", 1),
		}, "Ok"},
		{"unknown renewal keeps the lease possibly live", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			renew("A", 1, 600, 610, ResUnknown),
			held("B", 1500, 1510, "A", 1),
		}, "Ok"},
		{"cassandra: lost the race, the row was free", CassandraProfile, nil, []op{
			granted("A", 0, 10, 1),
			release("A", 1, 100, 200, ResReleased),
			held("B", 50, 210, "", 1),
			granted("C", 220, 230, 2),
		}, "Ok"},
		{"cassandra: lost the race to a free row while the lease was live", CassandraProfile, nil, []op{
			granted("A", 0, 10, 1),
			held("B", 50, 210, "", 1),
		}, "Illegal"},
		{"cassandra: lost the race to a token never granted", CassandraProfile, nil, []op{
			granted("A", 0, 10, 1),
			release("A", 1, 100, 200, ResReleased),
			held("B", 50, 210, "", 7),
		}, "Illegal"},
		{"cassandra: a release resolved after its answer was lost reads the next holder", CassandraProfile, nil, []op{
			granted("A", 0, 10, 1),
			release("A", 1, 100, 300, ResLost), // applied at ~110, read at ~290
			granted("B", 120, 200, 2),
		}, "Ok"},
		{"sqlite: a release reported lost did nothing", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			release("A", 1, 100, 300, ResLost),
			granted("B", 120, 200, 2),
		}, "Illegal"},
		{"etcd: a 1s lease may live 4.5s (a TTL of keep-alives, the shared etcd lease's 1+1 s, revoke loop and the revocation's commit)", EtcdProfile, nil, []op{
			granted("A", 0, 10, 1),
			held("B", 4400, 4410, "A", 1),
		}, "Ok"},
		{"etcd: held after 4.5s", EtcdProfile, nil, []op{
			granted("A", 0, 10, 1),
			held("B", 4600, 4610, "A", 1),
		}, "Illegal"},
		{"etcd: an acquire whose outcome is unknown may leave a key that ends before its TTL (its shared etcd lease's keep-alive was not confirmed)", EtcdProfile, nil, []op{
			acq("A", 0, 2000, ResUnknown),
			held("B", 10, 20, "A", 3),
			granted("B", 900, 910, 4),
		}, "Ok"},
		{"redis: an acquire whose outcome is unknown keeps its TTL if applied", RedisProfile, nil, []op{
			acq("A", 0, 2000, ResUnknown),
			held("B", 10, 20, "A", 3),
			granted("B", 900, 910, 4),
		}, "Illegal"},
		{"etcd: a confirmed grant keeps its TTL", EtcdProfile, nil, []op{
			granted("A", 0, 10, 3),
			granted("B", 900, 910, 4),
		}, "Illegal"},
		{"postgres: granted before the TTL", PostgresProfile, nil, []op{
			granted("A", 0, 10, 1),
			granted("B", 900, 950, 2),
		}, "Illegal"},
		{"postgres: the TTL counts from the statement's clock, which may be read well before its commit", PostgresProfile, nil, []op{
			granted("A", 0, 500, 1),          // a commit that waited 400 ms for its WAL flush or a lock
			get(300, 310, ResNotHeld, "", 0), // not visible yet at 310
			granted("B", 1100, 1110, 2),      // expired: expires_at was clock_timestamp() (< 310) + 1 s
		}, "Ok"},
		{"postgres: but not from before the request was sent", PostgresProfile, nil, []op{
			granted("A", 0, 500, 1),
			get(300, 310, ResNotHeld, "", 0),
			granted("B", 980, 990, 2),
		}, "Illegal"},
		{"redis: granted after the TTL", RedisProfile, nil, []op{
			granted("A", 0, 10, 1),
			granted("B", 1100, 1150, 2),
		}, "Ok"},
		{"cassandra: whole-second TTL keeps the lease up to ceil(ttl)+1s", CassandraProfile, nil, []op{
			granted("A", 0, 10, 1),
			held("B", 1900, 1910, "A", 1),
		}, "Ok"},
		{"cassandra: held after ceil(ttl)+1s", CassandraProfile, nil, []op{
			granted("A", 0, 10, 1),
			held("B", 2100, 2110, "A", 1),
		}, "Illegal"},
		{"cassandra: granted before ceil(ttl)", CassandraProfile, nil, []op{
			granted("A", 0, 10, 1),
			granted("B", 900, 950, 2),
		}, "Illegal"},
		{"an operator's deletion frees the lease at once", PostgresProfile, nil, []op{
			granted("A", 0, 10, 5),
			del(100, 110),
			granted("B", 200, 210, 6),
		}, "Ok"},
		{"tokens do not go back after a deletion", PostgresProfile, nil, []op{
			granted("A", 0, 10, 5),
			del(100, 110),
			granted("B", 200, 210, 1),
		}, "Illegal"},
		{"a deleted lease is not renewed", RedisProfile, nil, []op{
			granted("A", 0, 10, 5),
			del(100, 110),
			renew("A", 5, 200, 210, ResRenewed),
		}, "Illegal"},
		{"a deleted lease is lost", RedisProfile, nil, []op{
			granted("A", 0, 10, 5),
			del(100, 110),
			renew("A", 5, 200, 210, ResLost),
		}, "Ok"},
		{"etcd: an election renews live leases", EtcdProfile, nil, []op{
			granted("A", 0, 10, 1),
			term(1000, 1100),
			held("B", 7000, 7010, "A", 1), // 1.1 s + 4.5 s + 1.5 s
		}, "Ok"},
		{"etcd: an election does not revive an expired lease", EtcdProfile, nil, []op{
			granted("A", 0, 10, 1),
			term(4600, 4700),
			held("B", 7000, 7010, "A", 1),
		}, "Illegal"},
		{"shared owner: a holder named by its Locker's owner string is that Locker's grant", SQLiteProfile, nil, []op{
			granted("w1-1#aa.1", 0, 10, 1),
			held("w2-2#bb.1", 100, 110, "w1-1#aa", 1),
		}, "Ok"},
		{"shared owner: a later grant of the Locker that adopts the live earlier one", SQLiteProfile, nil, []op{
			granted("w1-1#aa.1", 0, 10, 1),
			granted("w1-1#aa.2", 500, 510, 1),
			held("w2-2#bb.1", 600, 610, "w1-1#aa", 1),
		}, "Illegal"},
		{"tokens per lease", SQLiteProfile, nil, []op{
			on("R1", granted("A", 0, 10, 1)),
			on("R2", granted("B", 20, 30, 1)),
			on("R2", held("A", 40, 50, "B", 1)),
		}, "Ok"},
		{"a later grant of the same Locker does not adopt its earlier one", SQLiteProfile, nil, []op{
			granted("A#n.1", 0, 10, 4),
			granted("A#n.2", 900, 910, 4), // the store renewed grant .1 for grant .2
		}, "Illegal"},
		{"a refusal by a view of a grant that is over, on a store that allows it", staleRefusals, nil, []op{
			granted("A", 0, 10, 1),
			release("A", 1, 500, 510, ResReleased),
			get(511, 512, ResNotHeld, "", 0),
			granted("B", 520, 530, 2),
			held("C", 540, 550, "A", 1), // C's Store saw A's last write late
		}, "Ok"},
		{"a refusal by a view of a grant that is over", SQLiteProfile, nil, []op{
			granted("A", 0, 10, 1),
			release("A", 1, 500, 510, ResReleased),
			get(511, 512, ResNotHeld, "", 0),
			granted("B", 520, 530, 2),
			held("C", 540, 550, "A", 1),
		}, "Illegal"},
		{"a refusal naming no holder and the token of a lost grant (Cassandra)", CassandraProfile, nil, []op{
			granted("A", 0, 10, 100),
			release("A", 100, 100, 110, ResReleased),
			acq("B", 200, 210, ResUnknown),  // took token 5000, unseen
			held("C", 4000, 4010, "", 5000), // the row free, last granted 5000
			granted("D", 4100, 4110, 6000),
		}, "Ok"},
		{"a refusal naming no holder and a token never granted", CassandraProfile, nil, []op{
			granted("A", 0, 10, 100),
			release("A", 100, 100, 110, ResReleased),
			held("C", 4000, 4010, "", 5000),
		}, "Illegal"},
		// Kubernetes: a renewal held back in a paused API server applies
		// after every reader judged the lease expired, since nobody wrote
		// the Lease in between (its resourceVersion still matched).
		{"a late renewal revives a lease judged expired (conditional writes)", conditional, nil, []op{
			granted("A", 0, 10, 1),
			renew("A", 1, 500, 600, ResUnknown),
			get(3000, 3010, ResNotHeld, "", 0),
			get(3100, 3110, ResGot, "A", 1),
		}, "Ok"},
		{"a late renewal revives a lease judged expired (late effects only)", lateOnly, nil, []op{
			granted("A", 0, 10, 1),
			renew("A", 1, 500, 600, ResUnknown),
			get(3000, 3010, ResNotHeld, "", 0),
			get(3100, 3110, ResGot, "A", 1),
		}, "Illegal"},
		{"a late renewal after another grant (conditional writes)", conditional, nil, []op{
			granted("A", 0, 10, 1),
			renew("A", 1, 500, 600, ResUnknown),
			granted("B", 3000, 3010, 2),
			release("B", 2, 3100, 3110, ResReleased),
			get(3200, 3210, ResGot, "A", 1),
		}, "Illegal"},
		// A write whose answer was lost applies before any write applied
		// after its sender gave up: B's acquire, lost at 200, cannot take
		// the lease after A's renewal at 300 changed its version.
		{"a lost acquire applies before the next confirmed write", conditional, nil, []op{
			granted("A", 0, 10, 1),
			acq("B", 100, 200, ResUnknown),
			renew("A", 1, 300, 310, ResRenewed),
			get(5000, 5010, ResGot, "B", 2),
		}, "Illegal"},
		{"a lost acquire applies later (late effects only)", lateOnly, nil, []op{
			granted("A", 0, 10, 1),
			acq("B", 100, 200, ResUnknown),
			renew("A", 1, 300, 310, ResRenewed),
			get(5000, 5010, ResGot, "B", 2),
		}, "Ok"},
		{"a lost acquire after an operator's deletion (conditional writes)", conditional, nil, []op{
			granted("A", 0, 10, 1),
			acq("B", 100, 200, ResUnknown),
			renew("A", 1, 300, 310, ResRenewed),
			del(400, 410),
			get(5000, 5010, ResGot, "B", 2),
		}, "Ok"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hs := histories(sec, c.gone, c.ops...)
			res := c.profile.CheckLinearizable(hs, 10*time.Second, 0, "")
			if res.Result != c.want {
				t.Errorf("porcupine says %s, want %s (%d operations)", res.Result, c.want, res.Operations)
			}
		})
	}
}

// staleRefusals is SQLite's timing with refusals by views of grants that
// are over (the Kubernetes store's).
var staleRefusals = func() Profile { p := SQLiteProfile; p.StaleRefusals = true; return p }()

// lateOnly is SQLite's timing with late effects and no upper bound on a
// lease's life; conditional adds the Kubernetes store's conditional writes.
var (
	lateOnly = func() Profile {
		p := SQLiteProfile
		p.LateEffects, p.StaleRefusals, p.ExpiryFromEffect = true, true, true
		p.MaxTTL = func(time.Duration) time.Duration { return time.Duration(Never) }
		return p
	}()
	conditional = func() Profile { p := lateOnly; p.ConditionalWrites = true; return p }()
)

// Pending renewals, releases and hand-overs of a grant whose token was
// superseded before they were called, and pending repeats of a renewal or
// release of one grant, are not given to porcupine: the first may act
// wherever the others could.
func TestPendingNoOpsLeftOut(t *testing.T) {
	hs := histories(time.Second, nil,
		granted("A", 0, 10, 1),
		granted("B", 2000, 2010, 2),  // A's lease expired
		release("A", 1, 2100, 0, ""), // superseded: left out
		renew("A", 1, 2200, 0, ""),   // superseded: left out
		release("B", 2, 2300, 0, ""),
		release("B", 2, 2400, 0, ""), // a repeat: left out
		renew("B", 2, 2500, 0, ""),
		renew("B", 2, 2600, 0, "")) // a repeat: left out
	var pending []string
	for _, o := range CassandraProfile.Operations(hs) {
		if o.Return == Never {
			in := o.Input.(Input)
			pending = append(pending, fmt.Sprintf("%s %s t%d", in.Op, in.Owner, in.Token))
		}
	}
	if want := []string{"release B t2", "renew B t2"}; !slices.Equal(pending, want) {
		t.Fatalf("pending operations given to porcupine: %q; want %q", pending, want)
	}
	if res := CassandraProfile.CheckLinearizable(hs, 10*time.Second, 0, ""); res.Result != "Ok" {
		t.Fatalf("result %s", res.Result)
	}
}

func TestSQLiteProfileBounds(t *testing.T) {
	if got := SQLiteProfile.MinTTL(time.Second); got != 999*time.Millisecond {
		t.Errorf("MinTTL(1s) = %v", got)
	}
	if got := SQLiteProfile.MaxTTL(1500 * time.Microsecond); got != 2*time.Millisecond {
		t.Errorf("MaxTTL(1.5ms) = %v", got)
	}
	if got := CassandraProfile.MaxTTL(1500 * time.Millisecond); got != 3*time.Second+clockSlack {
		t.Errorf("Cassandra MaxTTL(1.5s) = %v", got)
	}
}

func TestFirstTrouble(t *testing.T) {
	// Five correct hand-offs, then a grant before the lease can have
	// expired, at 5.5 s.
	var ops []op
	for i := int64(0); i < 5; i++ {
		owner := string(rune('A' + i))
		ops = append(ops, granted(owner, i*1000, i*1000+10, uint64(i+1)), release(owner, uint64(i+1), i*1000+500, i*1000+510, ResReleased))
	}
	ops = append(ops, granted("X", 5000, 5010, 6), granted("Y", 5500, 5510, 7))
	res := SQLiteProfile.CheckLinearizable(histories(time.Second, nil, ops...), 10*time.Second, 0, "")
	if res.Result != "Illegal" {
		t.Fatalf("result %s", res.Result)
	}
	if res.FirstTrouble < 5500*ms || res.FirstTrouble > 5610*ms {
		t.Errorf("first trouble at %v, want 5.5s to 5.61s", time.Duration(res.FirstTrouble))
	}
	if len(res.Around) == 0 {
		t.Error("no operations around the trouble")
	}
}

// Reads without an answer (an error, an unknown outcome, no return at all)
// are left out of the operations porcupine places: they change nothing and
// tell nothing. Answered reads stay.
func TestUnansweredReadsLeftOut(t *testing.T) {
	hs := histories(time.Second, nil,
		granted("A", 0, 10, 1),
		get(100, 110, ResError, "", 0),
		get(200, 210, ResUnknown, "", 0),
		get(300, 0, "", "", 0),
		get(400, 410, ResGot, "A", 1),
		get(2000, 2010, ResNotHeld, "", 0))
	var reads []string
	for _, o := range SQLiteProfile.Operations(hs) {
		if in := o.Input.(Input); in.Op == OpGet {
			reads = append(reads, o.Output.(Output).Res)
		}
	}
	if len(reads) != 2 || reads[0] != ResGot || reads[1] != ResNotHeld {
		t.Fatalf("reads given to porcupine: %v; want [got notheld]", reads)
	}
	if res := SQLiteProfile.CheckLinearizable(hs, 10*time.Second, 0, ""); res.Result != "Ok" {
		t.Fatalf("result %s", res.Result)
	}
}

// A check that reaches its heap bound answers Unknown and says so; with the
// abort set, the model allows no step.
func TestLinearizabilityHeapBound(t *testing.T) {
	hs := histories(time.Second, nil, granted("A", 0, 10, 1), release("A", 1, 500, 510, ResReleased))
	res := SQLiteProfile.CheckLinearizable(hs, 10*time.Second, 1, "")
	if res.Result != "Unknown" || res.MemoryBound != 1 {
		t.Fatalf("check bounded at 1 byte of heap: %s (bound %d); want Unknown with the bound", res.Result, res.MemoryBound)
	}
	if res := SQLiteProfile.CheckLinearizable(hs, 10*time.Second, -1, ""); res.Result != "Ok" || res.MemoryBound != 0 {
		t.Fatalf("check without a heap bound: %s (bound %d); want Ok", res.Result, res.MemoryBound)
	}
}
