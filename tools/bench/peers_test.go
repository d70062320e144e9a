package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestPeersOnServers runs every peer of each store whose server the
// environment names (TENURE_REDIS, TENURE_ETCD, TENURE_POSTGRES,
// TENURE_MYSQL, TENURE_CASSANDRA; skipped otherwise): its requests per operation, a
// short run on distinct names and one on a contended name, with no error
// and no overlapping grant.
func TestPeersOnServers(t *testing.T) {
	stores := map[string]func(string) string{
		"TENURE_REDIS":    func(v string) string { return v },
		"TENURE_POSTGRES": func(v string) string { return v },
		"TENURE_MYSQL":    func(v string) string { return v },
		"TENURE_ETCD": func(v string) string {
			if !strings.Contains(v, "://") {
				v = "etcd://" + v
			}
			return v
		},
		"TENURE_CASSANDRA": func(v string) string {
			if !strings.Contains(v, "://") {
				v = "cassandra://" + v + "/tenure_bench"
			}
			return v
		},
	}
	for env, url := range stores {
		t.Run(env, func(t *testing.T) {
			v := os.Getenv(env)
			if v == "" {
				t.Skipf("%s is not set", env)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			tg, err := Open(ctx, url(v))
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Close()
			if len(tg.Peers) == 0 {
				t.Fatal("no peers")
			}
			prefix := "bench-test/" + time.Now().Format("150405.000000")
			for _, sys := range tg.Peers {
				costs, err := RunCost(ctx, tg, sys, prefix, 10*time.Second, 3)
				if err != nil {
					t.Fatalf("%s: %v", sys.Name(), err)
				}
				for _, c := range costs {
					if c.Min < 1 {
						t.Errorf("%s, %s: %d requests counted", sys.Name(), c.Op, c.Min)
					}
				}
			}
			for _, mode := range []string{ModeDistinct, ModeContended} {
				res, err := RunOps(ctx, tg, tg.Peers, OpsConfig{
					Mode: mode, Clients: 3, Duration: time.Minute, Rounds: 1, MaxCycles: 10, TTL: 10 * time.Second,
					Prefix: prefix, Hold: time.Millisecond, Phase: PhasePeers,
				})
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range res {
					if o.Errors != 0 || o.Overlaps != 0 || grantsOf(o) == 0 {
						t.Errorf("%s %s: %d errors (%s), %d overlaps, %d grants", o.System, mode, o.Errors, o.FirstError, o.Overlaps, grantsOf(o))
					}
				}
			}
		})
	}
}
