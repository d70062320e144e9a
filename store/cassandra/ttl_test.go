package cassandra_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
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

// TestTTLNeverExpiresEarly checks the store's TTL rule on the real server:
// leases acquired (or renewed) with the smallest TTL at many sub-second
// offsets are never seen expired by a SERIAL read before TTL after the
// request was sent. With a store TTL equal to the requested one, Cassandra
// would expire a lease written at x.9 s with TTL 1 s after 0.1 s.
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
			var minLife, maxLife time.Duration = time.Hour, 0
			for i, p := range probes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := resource(t, fmt.Sprintf("p%d", i))
					o := owner(t, "probe")
					// Wait for the probe's sub-second offset in the next second.
					now := time.Now()
					time.Sleep(time.Until(now.Truncate(time.Second).Add(time.Second + p.offset)))
					tSend := time.Now()
					rec, err := s.Acquire(ctx, r, o, p.ttl)
					if err != nil {
						mu.Lock()
						failures = append(failures, fmt.Sprintf("acquire: %v", err))
						mu.Unlock()
						return
					}
					if p.renew {
						time.Sleep(time.Until(tSend.Truncate(time.Second).Add(time.Second + p.offset)))
						tSend = time.Now()
						if err := s.Renew(ctx, r, o, rec.Token, p.ttl); err != nil {
							mu.Lock()
							failures = append(failures, fmt.Sprintf("renew: %v", err))
							mu.Unlock()
							return
						}
					}
					var lastLive time.Time
					for {
						before := time.Now()
						_, err := s.Get(ctx, r)
						if errors.Is(err, tenure.ErrNotHeld) {
							life := before.Sub(tSend) // seen expired no earlier than this
							mu.Lock()
							if life < p.ttl {
								failures = append(failures, fmt.Sprintf("TTL %v sent at +%v (renew %v): seen expired %v after the send", p.ttl, p.offset, p.renew, life))
							}
							if life > p.ttl+cassandra.MaxExpirySlack+500*time.Millisecond {
								failures = append(failures, fmt.Sprintf("TTL %v sent at +%v: still live %v after the send", p.ttl, p.offset, lastLive.Sub(tSend)))
							}
							minLife, maxLife = min(minLife, life), max(maxLife, life)
							mu.Unlock()
							return
						}
						if err != nil {
							mu.Lock()
							failures = append(failures, fmt.Sprintf("get: %v", err))
							mu.Unlock()
							return
						}
						lastLive = time.Now()
						time.Sleep(10 * time.Millisecond)
					}
				}()
			}
			wg.Wait()
			for _, f := range failures {
				t.Error(f)
			}
			t.Logf("%d probes; first seen expired between %v and %v after the send", len(probes), minLife.Round(time.Millisecond), maxLife.Round(time.Millisecond))
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
