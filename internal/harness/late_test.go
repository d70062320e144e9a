package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/store"
)

// TestLateDeliveryAppliesAfterGiveUp shows, on each network store's real
// server, what late-delivery does: a release sent through a proxy that holds
// requests back gives up (its context ends), the lease is still there, and
// the store applies the release afterwards, long before the lease would
// expire. Without this, late-delivery would test nothing. (A release,
// because it is one request on every store; a first cycle on another
// resource prepares the statements and opens the connections, so that the
// held bytes are the release itself.)
func TestLateDeliveryAppliesAfterGiveUp(t *testing.T) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	stores := map[string]string{
		"postgres":  os.Getenv("TENURE_POSTGRES"),
		"mysql":     os.Getenv("TENURE_MYSQL"),
		"redis":     os.Getenv("TENURE_REDIS"),
		"etcd":      "",
		"cassandra": "",
	}
	if e := os.Getenv("TENURE_ETCD"); e != "" {
		stores["etcd"] = "etcd://" + e
	}
	if c := os.Getenv("TENURE_CASSANDRA"); c != "" {
		stores["cassandra"] = "cassandra://" + c + "/tenure_harness_late"
	}
	for name, raw := range stores {
		t.Run(name, func(t *testing.T) {
			if raw == "" {
				t.Skipf("no %s server (TENURE_* unset)", name)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			env, err := setupStore(ctx, Config{Store: raw})
			if err != nil {
				t.Fatal(err)
			}
			defer env.close()
			late, err := openWorkerStore(ctx, env.workerURL, env.translate)
			if err != nil {
				t.Fatal(err)
			}
			defer late.Close()
			su, err := store.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			direct, err := su.Open(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()

			resource := "harness-late-" + suffix
			owner, err := naming.NewOwner("late")
			if err != nil {
				t.Fatal(err)
			}
			const ttl = 30 * time.Second
			for i, r := range []string{resource + "-warm", resource} {
				rec, err := late.Acquire(ctx, r, owner+"."+string(rune('1'+i)), ttl)
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					if err := late.Release(ctx, r, rec.Owner, rec.Token); err != nil {
						t.Fatal(err)
					}
				}
			}
			rec, err := direct.Get(ctx, resource)
			if err != nil {
				t.Fatal(err)
			}
			const hold = 3 * time.Second
			for _, p := range env.proxies {
				p.SetLate(hold)
			}
			cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
			sent := time.Now()
			err = late.Release(cctx, resource, rec.Owner, rec.Token)
			ccancel()
			gaveUp := time.Now()
			// What the client sends when it gives up (gRPC's RST_STREAM, a
			// cancel request) is held back as well, as during the harness's
			// fault, which lasts longer than the calls it holds.
			time.Sleep(300 * time.Millisecond)
			for _, p := range env.proxies {
				p.SetLate(0)
			}
			if err == nil {
				t.Fatalf("the release succeeded although its request was held for %v", hold)
			}
			t.Logf("the call gave up after %v: %v", gaveUp.Sub(sent).Round(time.Millisecond), err)
			if _, err := direct.Get(ctx, resource); err != nil {
				t.Fatalf("right after the call gave up: %v; want the lease still held", err)
			}
			for {
				_, err := direct.Get(ctx, resource)
				if errors.Is(err, tenure.ErrNotHeld) {
					t.Logf("applied by %v after it was sent, %v after the call gave up (the lease had %v left)",
						time.Since(sent).Round(time.Millisecond), time.Since(gaveUp).Round(time.Millisecond), ttl-time.Since(sent).Round(time.Second))
					if time.Since(sent) < hold {
						t.Errorf("applied before the hold of %v ended", hold)
					}
					return
				}
				if time.Since(sent) > hold+10*time.Second {
					t.Fatalf("the held release was never applied (last Get: %v)", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
