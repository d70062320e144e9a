// Command etcd-leader-pause measures whether an etcd cluster revokes leases
// that were kept alive when its raft leader is stopped for longer than their
// TTL and then resumed (etcd-io/etcd#15247; docs/stores.md, "Open hole").
//
// Against the three members of `scripts/etcd start3`, each round grants
// five etcd leases of 3 s through a follower, keeps them alive through that
// follower (every 0.3 s, each keep-alive bounded by 0.3 s), stops the
// leader (or, with -control, the other follower) for 3.3 s with
// `scripts/etcd pause N`, resumes it, waits 2.5 s, and counts the leases
// that are gone. It prints one line per round and a summary.
//
//	go run ./cmd/etcd-leader-pause -rounds 8            # from tools/
//	go run ./cmd/etcd-leader-pause -rounds 6 -control
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	port := flag.Int("port", 52479, "client port of the members on 127.0.0.1-3 (TENURE_ETCD_CLUSTER_PORT)")
	rounds := flag.Int("rounds", 8, "rounds")
	control := flag.Bool("control", false, "stop a follower instead of the leader")
	script := flag.String("script", "../scripts/etcd", "scripts/etcd")
	flag.Parse()
	if err := run(*port, *rounds, *control, *script); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-leader-pause:", err)
		os.Exit(1)
	}
}

func run(port, rounds int, control bool, script string) error {
	var eps []string
	for i := 1; i <= 3; i++ {
		eps = append(eps, fmt.Sprintf("127.0.0.%d:%d", i, port))
	}
	ctx := context.Background()
	all, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer all.Close()
	member := func(args ...string) error {
		c := exec.Command(script, args...)
		c.Env = append(os.Environ(), "TENURE_ETCD_CLUSTER_PORT="+strconv.Itoa(port), "TENURE_ETCD_CLUSTER_PEER_PORT="+strconv.Itoa(port+1))
		if out, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %v: %v: %s", script, args, err, out)
		}
		return nil
	}
	hits := 0
	for r := 0; r < rounds; r++ {
		leader := -1
		for i, ep := range eps {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := all.Status(sctx, ep)
			cancel()
			if err == nil && st.Leader == st.Header.MemberId {
				leader = i
			}
		}
		if leader < 0 {
			return fmt.Errorf("round %d: no leader", r)
		}
		follower := (leader + 1) % 3
		victim := leader
		if control {
			victim = (leader + 2) % 3
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{eps[follower]}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		var ids []clientv3.LeaseID
		for k := 0; k < 5; k++ {
			g, err := cli.Grant(ctx, 3)
			if err != nil {
				cli.Close()
				return err
			}
			ids = append(ids, g.ID)
		}
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(300 * time.Millisecond):
				}
				for _, id := range ids {
					kctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
					_, _ = cli.KeepAliveOnce(kctx, id)
					cancel()
				}
			}
		}()
		time.Sleep(time.Second)
		err = member("pause", strconv.Itoa(victim+1))
		time.Sleep(3300 * time.Millisecond)
		if rerr := member("resume", strconv.Itoa(victim+1)); err == nil {
			err = rerr
		}
		time.Sleep(2500 * time.Millisecond)
		close(stop)
		<-done
		gone := 0
		for _, id := range ids {
			tl, terr := cli.TimeToLive(ctx, id)
			if terr == nil && tl.TTL < 0 {
				gone++
			}
			_, _ = cli.Revoke(ctx, id)
		}
		cli.Close()
		if err != nil {
			return err
		}
		if gone > 0 {
			hits++
		}
		what := "leader"
		if control {
			what = "follower"
		}
		fmt.Printf("round %d: %s (member %d) stopped 3.3 s: %d of %d kept-alive leases revoked\n", r+1, what, victim+1, gone, len(ids))
		time.Sleep(time.Second)
	}
	fmt.Printf("rounds with revoked leases: %d of %d\n", hits, rounds)
	return nil
}
