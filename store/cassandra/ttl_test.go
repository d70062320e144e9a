package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/internal/faultinject"
	"github.com/tenure-go/tenure/store/cassandra"
)

func TestStoreTTL(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want int
	}{
		{time.Second, 2},
		{1001 * time.Millisecond, 3},
		{1500 * time.Millisecond, 3},
		{2 * time.Second, 3},
		{30 * time.Second, 31},
		{cassandra.MaxTTL, 630720000},
	} {
		got, err := cassandra.StoreTTL(tc.ttl)
		if err != nil || got != tc.want {
			t.Errorf("StoreTTL(%v) = %d, %v; want %d", tc.ttl, got, err, tc.want)
		}
		// The rule: the smallest whole T with T − 1 s ≥ ttl.
		if time.Duration(got-1)*time.Second < tc.ttl || time.Duration(got-2)*time.Second >= tc.ttl {
			t.Errorf("StoreTTL(%v) = %d is not the smallest T with T-1 >= ttl", tc.ttl, got)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second, time.Nanosecond, 999 * time.Millisecond, cassandra.MaxTTL + 1, 630720000 * time.Second} {
		if got, err := cassandra.StoreTTL(ttl); !errors.Is(err, tenure.ErrInvalidTTL) || got != 0 {
			t.Errorf("StoreTTL(%v) = %d, %v; want ErrInvalidTTL", ttl, got, err)
		}
	}
}

// probeVerdict judges one probe of TestTTLNeverExpiresEarly from the
// client's clock. sent and acked are when the grant (or renewal) was sent and
// when its answer came back; lastLive is when the last read that saw the
// lease live was sent; expired is when the answer of the first read that saw
// it expired came back. The server evaluates a read somewhere between its
// send and its answer, and applies a write somewhere between its send and its
// answer, so:
//
//   - only a read answered before sent + ttl proves that the lease expired
//     early (a read sent before that but answered after may have been
//     evaluated after it: on a busy server, reads queue for tens of
//     milliseconds to seconds);
//   - only a read sent after acked + the store TTL (plus slack for the wall
//     clock Cassandra uses) that still saw the lease live proves that it
//     lived too long.
func probeVerdict(ttl time.Duration, storeTTL int, sent, acked, lastLive, expired time.Time) (early, late bool) {
	const wallClockSlack = 10 * time.Millisecond
	early = expired.Sub(sent) < ttl
	late = !lastLive.IsZero() && lastLive.Sub(acked) > time.Duration(storeTTL)*time.Second+wallClockSlack
	return early, late
}

// TestProbeVerdict: the verdict counts a read's time in the server's queue
// for the lease, not against it. The CI sighting of 2026-12-02 (TTL 1 s, a
// read sent 959 ms after the grant saw it expired) proves nothing when that
// read was answered after 1 s; the same read answered at 990 ms does.
func TestProbeVerdict(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 975_000_000, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name                     string
		acked, lastLive, expired time.Time
		early, late              bool
	}{
		{"slow read answered after the TTL", ms(20), ms(900), ms(1100), false, false},
		{"read answered before the TTL", ms(20), ms(900), ms(990), true, false},
		{"expired read answered exactly at the TTL", ms(20), ms(950), ms(1000), false, false},
		{"slow grant: live until its answer plus the store TTL", ms(1500), ms(3400), ms(3600), false, false},
		{"live after the answer plus the store TTL", ms(20), ms(2100), ms(2200), false, true},
		{"expired on the first read", ms(20), time.Time{}, ms(1200), false, false},
	} {
		early, late := probeVerdict(time.Second, 2, t0, tc.acked, tc.lastLive, tc.expired)
		if early != tc.early || late != tc.late {
			t.Errorf("%s: early %v, late %v; want %v, %v", tc.name, early, late, tc.early, tc.late)
		}
	}
}

// TestTTLNeverExpiresEarly checks the store's TTL rule on the real server:
// leases acquired (or renewed) with the smallest TTL at many sub-second
// offsets are never seen expired by a SERIAL read before TTL after the
// request was sent, and never seen live after the store TTL from the
// request's answer (probeVerdict says what a read proves). With a store TTL
// equal to the requested one, Cassandra would expire a lease written at
// x.9 s with TTL 1 s after 0.1 s.
func TestTTLNeverExpiresEarly(t *testing.T) {
	ctx := testCtx(t)
	for _, mode := range []cassandra.Mode{cassandra.ModeNative, cassandra.ModeJaeger} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			s := openStore(t, mode, nil)
			type probe struct {
				ttl    time.Duration
				offset time.Duration
				renew  bool
			}
			var probes []probe
			for off := 25 * time.Millisecond; off < time.Second; off += 50 * time.Millisecond {
				probes = append(probes, probe{time.Second, off, false})
			}
			for off := 75 * time.Millisecond; off < time.Second; off += 200 * time.Millisecond {
				probes = append(probes, probe{1500 * time.Millisecond, off, false}, probe{time.Second, off, true})
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failures []string
			fail := func(format string, args ...any) {
				mu.Lock()
				failures = append(failures, fmt.Sprintf(format, args...))
				mu.Unlock()
			}
			var minLife, maxLife time.Duration = time.Hour, 0
			bySend := 0 // probes the read's send time alone would call early
			for i, p := range probes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := resource(t, fmt.Sprintf("p%d", i))
					o := owner(t, "probe")
					storeTTL, err := cassandra.StoreTTL(p.ttl)
					if err != nil {
						fail("StoreTTL(%v): %v", p.ttl, err)
						return
					}
					// Wait for the probe's sub-second offset in the next second.
					now := time.Now()
					time.Sleep(time.Until(now.Truncate(time.Second).Add(time.Second + p.offset)))
					sent := time.Now()
					rec, err := s.Acquire(ctx, r, o, p.ttl)
					if err != nil {
						fail("acquire: %v", err)
						return
					}
					acked := time.Now()
					if p.renew {
						time.Sleep(time.Until(sent.Truncate(time.Second).Add(time.Second + p.offset)))
						acquireSent := sent
						sent = time.Now()
						if err := s.Renew(ctx, r, o, rec.Token, p.ttl); err != nil {
							// The acquire's write lives storeTTL seconds from
							// when it was applied, after acquireSent: a renewal
							// answered later than that may rightly find it gone
							// (a loaded machine delays either call), which says
							// nothing of the TTL rule.
							if errors.Is(err, tenure.ErrLeaseLost) && time.Now().After(acquireSent.Add(time.Duration(storeTTL)*time.Second)) {
								t.Logf("probe %d: renewal answered after the acquire's store TTL: %v", i, err)
								return
							}
							fail("renew: %v", err)
							return
						}
						acked = time.Now()
					}
					var lastLive time.Time
					for {
						before := time.Now()
						_, err := s.Get(ctx, r)
						after := time.Now()
						if errors.Is(err, tenure.ErrNotHeld) {
							early, late := probeVerdict(p.ttl, storeTTL, sent, acked, lastLive, after)
							if early {
								fail("TTL %v sent at +%v (renew %v): a read answered %v after the send (sent at %v) saw it expired",
									p.ttl, p.offset, p.renew, after.Sub(sent), before.Sub(sent))
							}
							if late {
								fail("TTL %v sent at +%v (renew %v, store TTL %d s): a read sent %v after the answer saw it live",
									p.ttl, p.offset, p.renew, storeTTL, lastLive.Sub(acked))
							}
							mu.Lock()
							minLife, maxLife = min(minLife, after.Sub(sent)), max(maxLife, after.Sub(sent))
							if before.Sub(sent) < p.ttl {
								bySend++
							}
							mu.Unlock()
							return
						}
						if err != nil {
							fail("get: %v", err)
							return
						}
						lastLive = before
						time.Sleep(10 * time.Millisecond)
					}
				}()
			}
			wg.Wait()
			for _, f := range failures {
				t.Error(f)
			}
			t.Logf("%d probes; first read that saw the lease expired answered between %v and %v after the send; %d sent before the TTL was up",
				len(probes), minLife.Round(time.Millisecond), maxLife.Round(time.Millisecond), bySend)
		})
	}
}

// TestTokenSurvivesExpiryAndRelease: the fencing token is written without
// TTL, so the row keeps it after the lease expired or was released, and the
// next grant continues from it, also from a store with no cached view.
func TestTokenSurvivesExpiryAndRelease(t *testing.T) {
	ctx := testCtx(t)
	s, _ := stores(t)
	r := resource(t, "r")
	a := owner(t, "a")
	rec, err := s.Acquire(ctx, r, a, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, func() bool { _, err := s.Get(ctx, r); return errors.Is(err, tenure.ErrNotHeld) })
	if row := serialRow(t, s.Session(), cassandra.DefaultNativeTable, r); !row.found || uint64(row.token) != rec.Token || row.owner != "" {
		t.Fatalf("after expiry: %+v; want the row with token %d and no owner", row, rec.Token)
	}
	fresh := openStore(t, cassandra.ModeNative, nil)
	next, err := fresh.Acquire(ctx, r, a, time.Minute)
	if err != nil || next.Token <= rec.Token {
		t.Fatalf("grant after expiry from a store without a cached view: %+v, %v; want a token above %d", next, err, rec.Token)
	}
	if err := fresh.Release(ctx, r, a, next.Token); err != nil {
		t.Fatal(err)
	}
	if row := serialRow(t, s.Session(), cassandra.DefaultNativeTable, r); uint64(row.token) != next.Token || row.owner != "" {
		t.Fatalf("after release: %+v", row)
	}
}

// TestRemainingAndHolder: Get reports the holder, token, TTL and a lower
// bound of the remaining time; an acquire of a held resource names the
// holder and its token.
func TestRemainingAndHolder(t *testing.T) {
	ctx := testCtx(t)
	s, _ := stores(t)
	r := resource(t, "r")
	a, b := owner(t, "a"), owner(t, "b")
	rec, err := s.Acquire(ctx, r, a, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Remaining != 30*time.Second || rec.TTL != 30*time.Second {
		t.Fatalf("grant record %+v", rec)
	}
	got, err := s.Get(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != a || got.Token != rec.Token || got.TTL != 30*time.Second || got.Remaining < 29*time.Second || got.Remaining > 30*time.Second {
		t.Fatalf("Get = %+v", got)
	}
	_, err = s.Acquire(ctx, r, b, time.Minute)
	var held *tenure.HeldError
	if !errors.As(err, &held) || held.Holder.Owner != a || held.Holder.Token != rec.Token {
		t.Fatalf("Acquire of a held resource: %v", err)
	}
}

// TestTTLPast2038 documents the server's own limit: Cassandra 5.0 in its
// default storage compatibility mode refuses expiries past 2038-01-19. The
// store returns that error as a definite failure, not an unknown outcome.
func TestTTLPast2038(t *testing.T) {
	ctx := testCtx(t)
	s, _ := stores(t)
	r := resource(t, "r")
	_, err := s.Acquire(ctx, r, owner(t, "a"), 400_000_000*time.Second)
	if err == nil {
		t.Skip("this server accepts expiries past 2038 (storage_compatibility_mode NONE)")
	}
	if errors.Is(err, tenure.ErrUnknownOutcome) || errors.Is(err, tenure.ErrHeld) {
		t.Fatalf("Acquire with an expiry past 2038: %v; want the server's definite error", err)
	}
	t.Logf("%v", err)
	if _, err := s.Get(ctx, r); !errors.Is(err, tenure.ErrNotHeld) {
		t.Fatalf("Get after the refused acquire: %v", err)
	}
}

// lateRenewal builds, for r's live lease, the renewal the store on a host
// whose clock is skew ahead would send now (faultinject.CassandraLateRenewal).
func lateRenewal(t *testing.T, s *cassandra.Store, r string, skew time.Duration) func(context.Context) (bool, string, error) {
	t.Helper()
	send, err := faultinject.CassandraLateRenewal(testCtx(t), s, r, skew)
	if err != nil || send == nil {
		t.Fatalf("building a late renewal of %q: %v (no lease: %v)", r, err, send == nil)
	}
	return send
}

// sendRefused sends the late renewal send and fails the test unless it was
// refused and left r's row as it was.
func sendRefused(t *testing.T, s *cassandra.Store, r, what string, send func(context.Context) (bool, string, error)) {
	t.Helper()
	before := serialRow(t, s.Session(), cassandra.DefaultNativeTable, r)
	applied, detail, err := send(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	after := serialRow(t, s.Session(), cassandra.DefaultNativeTable, r)
	if applied || after.writeID != before.writeID {
		t.Fatalf("%s (%s) applied %v over the newer renewal (write id %d, now %d)", what, detail, applied, before.writeID, after.writeID)
	}
}

// TestStaleRenewalNeverShortensTheLease: a renewal that its client gave up
// (unknown outcome) may still be applied by its coordinator after the
// client's next renewal, with the time the coordinator started it, and so
// with an earlier expiry than the one the holder trusts (Cassandra keeps a
// statement's time through its Paxos retries). The renew statement applies
// only over the row it was built from: the stale write is refused, and the
// row keeps the newer renewal. A late renewal built from the row as it still
// is applies (the hook is live): it started after that row was written.
func TestStaleRenewalNeverShortensTheLease(t *testing.T) {
	ctx := testCtx(t)
	s, _ := stores(t)
	r := resource(t, "r")
	a := owner(t, "a")
	const ttl = 10 * time.Second
	rec, err := s.Acquire(ctx, r, a, ttl)
	if err != nil {
		t.Fatal(err)
	}
	stale := lateRenewal(t, s, r, 0)
	if err := s.Renew(ctx, r, a, rec.Token, ttl); err != nil {
		t.Fatal(err)
	}
	sendRefused(t, s, r, "stale renewal", stale)
	current := lateRenewal(t, s, r, 0)
	if applied, detail, err := current(ctx); err != nil || !applied {
		t.Fatalf("a late renewal built from the current row (%s): applied %v, %v; want applied", detail, applied, err)
	}
	// And the holder's own renewals still apply after it.
	if err := s.Renew(ctx, r, a, rec.Token, ttl); err != nil {
		t.Fatalf("renewal after the late write: %v", err)
	}
}

// TestLateRenewalFromAHostAheadNeverShortensTheLease: an owner string
// shared by hosts (a semaphore's marker lease, renewed by every holder with
// an acquire) is renewed by host B, whose clock is 5 s ahead, and then by
// host A; B's answer was lost and its coordinator applies it last, with the
// time it started. Write ids come from each host's clock, so B's is the
// larger: a guard on id order let B's write apply and move the expiry back
// to B's start + TTL, under the deadline A computed from its renewal (on
// a real node, a holder of another number of slots was granted the marker
// 1.8 s before A's slot deadline). The renew statement applies only over
// the row it was built from, whatever the clocks say.
func TestLateRenewalFromAHostAheadNeverShortensTheLease(t *testing.T) {
	ctx := testCtx(t)
	s, _ := stores(t)
	r := resource(t, "r")
	shared := owner(t, "shared")
	const ttl = 30 * time.Second
	if _, err := s.Acquire(ctx, r, shared, ttl); err != nil {
		t.Fatal(err)
	}
	fromB := lateRenewal(t, s, r, 5*time.Second)
	if _, err := s.Acquire(ctx, r, shared, ttl); err != nil { // A's renewal
		t.Fatal(err)
	}
	sendRefused(t, s, r, "B's late renewal", fromB)
	// A renews again over whatever B wrote: its write is built from the row.
	if _, err := s.Acquire(ctx, r, shared, ttl); err != nil {
		t.Fatalf("A's renewal after B's late write: %v", err)
	}
}

// TestConcurrentRenewalsOfOneGrant: renewals of one grant sent at once (a
// manual Lease.Renew beside the background one) pass each other's write
// ids; none reports the lease lost, and the lease is still held after.
func TestConcurrentRenewalsOfOneGrant(t *testing.T) {
	ctx := testCtx(t)
	s, _ := stores(t)
	r := resource(t, "r")
	a := owner(t, "a")
	rec, err := s.Acquire(ctx, r, a, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var lost, other, ok atomic.Int64
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				switch err := s.Renew(ctx, r, a, rec.Token, 30*time.Second); {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, tenure.ErrLeaseLost):
					lost.Add(1)
					t.Errorf("concurrent renewal: %v", err)
				default:
					// Passed by the others' writes each try, or a contention
					// timeout: an unknown outcome, never a holder named.
					var held *tenure.HeldError
					if !errors.Is(err, tenure.ErrUnknownOutcome) || errors.As(err, &held) {
						t.Errorf("concurrent renewal: %v; want an unknown outcome", err)
					}
					other.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() == 0 {
		t.Fatalf("no renewal applied (%d unknown)", other.Load())
	}
	if got, err := s.Get(ctx, r); err != nil || got.Owner != a || got.Token != rec.Token {
		t.Fatalf("after the renewals: %+v, %v", got, err)
	}
	t.Logf("15 concurrent renewals: %d applied, %d lost, %d other errors", ok.Load(), lost.Load(), other.Load())
}

// TestRenewalOverAnotherHostsWrite: the row's last write was made by
// another host sharing the owner string (a semaphore's marker), whose write
// ids come from its own clock, an hour ahead or an hour behind this one's.
// A renewal, an acquire by the holder and a Keep each apply over it (a guard
// on id order refused every renewal from the host behind, as an unknown
// outcome, until its clock caught up), and each leaves its own write id.
func TestRenewalOverAnotherHostsWrite(t *testing.T) {
	ctx := testCtx(t)
	s, _ := stores(t)
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		r := resource(t, "r")
		a := owner(t, "a")
		rec, err := s.Acquire(ctx, r, a, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		other := func() int64 {
			t.Helper()
			id := time.Now().Add(skew).UnixMicro()
			if err := s.Session().Query(`UPDATE `+runKeyspace+`.`+cassandra.DefaultNativeTable+` USING TTL 31 SET write_id = ? WHERE resource = ?`, id, r).
				WithContext(ctx).Exec(); err != nil {
				t.Fatal(err)
			}
			return id
		}
		check := func(op, want string, id int64, err error) {
			t.Helper()
			row := serialRow(t, s.Session(), cassandra.DefaultNativeTable, r)
			if err != nil || row.owner != want || uint64(row.token) != rec.Token || row.writeID == id {
				t.Errorf("clock %v: %s over another host's write: %v; row %+v", skew, op, err, row)
			}
		}
		id := other()
		check("renew", a, id, s.Renew(ctx, r, a, rec.Token, 30*time.Second))
		id = other()
		_, err = s.Acquire(ctx, r, a, 30*time.Second)
		check("acquire by the holder", a, id, err)
		id = other()
		check("keep", a+"-keeper", id, s.Keep(ctx, r, a, rec.Token, a+"-keeper", 30*time.Second))
	}
}

// TestRenewalOverANullWriteID: a lease row whose write_id cell is null (a
// hand edit, another tool) is renewed over the null cell, by a store that
// has never seen the row and by one whose last write seen was its own.
func TestRenewalOverANullWriteID(t *testing.T) {
	ctx := testCtx(t)
	s, _ := stores(t)
	r := resource(t, "r")
	a := owner(t, "a")
	rec, err := s.Acquire(ctx, r, a, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fresh := openStore(t, cassandra.ModeNative, nil)
	for _, st := range []struct {
		name string
		s    *cassandra.Store
	}{{"a store that never saw the row", fresh}, {"the granting store", s}} {
		if err := s.Session().Query(`DELETE write_id FROM `+runKeyspace+`.`+cassandra.DefaultNativeTable+` WHERE resource = ?`, r).
			WithContext(ctx).Exec(); err != nil {
			t.Fatal(err)
		}
		if err := st.s.Renew(ctx, r, a, rec.Token, 30*time.Second); err != nil {
			t.Errorf("%s: renewal over a null write_id: %v", st.name, err)
		}
		if row := serialRow(t, s.Session(), cassandra.DefaultNativeTable, r); row.writeID == 0 || row.owner != a {
			t.Errorf("%s: after the renewal: %+v; want this owner and a write id", st.name, row)
		}
	}
}
