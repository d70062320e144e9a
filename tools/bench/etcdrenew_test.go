package bench_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/internal/storeclient"
	"github.com/tenure-go/tenure/store/etcd"
)

// TestEtcdRenewCost takes etcd's one-client renewal apart, one request at a
// time with the kinds interleaved request by request (so drift in the
// machine's load falls on all of them alike), and logs each kind's p50 and
// its ratio to KeepAliveOnce, the renewal of concurrency's shared-session
// Mutex:
//
//   - keepaliveonce: KeepAliveOnce of an etcd lease;
//   - get-serializable: a serializable Get of the lease's key;
//   - txn-check: the check tenure's renewal sends (a Txn comparing the key's
//     mod revision, serializable reads in its else branch, WithRequireLeader);
//   - store: the etcd store's Renew (the check, and the shared etcd lease's
//     keep-alive when it is due);
//   - store-deadline: the same on a context with a deadline (gRPC then
//     sends it to the server, which bounds the request by it);
//   - locker: Lease.Renew on a Locker (the store's Renew, bounded by the
//     lease's time, and the deadline moved).
//
// It runs only when TENURE_ETCD_RENEW_COST names an etcd endpoint
// (TENURE_ETCD_RENEW_COST_N requests of each kind, default 5000):
//
//	TENURE_ETCD_RENEW_COST=127.0.0.1:52379 go test -run TestEtcdRenewCost -v ./bench/
func TestEtcdRenewCost(t *testing.T) {
	ep := os.Getenv("TENURE_ETCD_RENEW_COST")
	if ep == "" {
		t.Skip("set TENURE_ETCD_RENEW_COST to an etcd endpoint that serves nothing else")
	}
	n := 5000
	if v, err := strconv.Atoi(os.Getenv("TENURE_ETCD_RENEW_COST_N")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	tg := etcdTarget(t, ep)
	st := tg.Store.(*etcd.Store)
	cli := storeclient.Of[*clientv3.Client](st)
	const ttl = 10 * time.Second
	name := fmt.Sprintf("renew-cost/%d", time.Now().UnixNano())
	lk, err := tenure.New(st, tenure.WithOwnerID("renew-cost"))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close(ctx)
	lease, err := lk.TryAcquire(ctx, name+"/locker", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	owner := lease.Owner() + "x" // another grant string of the same Locker's owner
	rec, err := st.Acquire(ctx, name+"/store", owner, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release(ctx, name+"/store", owner, rec.Token)
	g, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Revoke(ctx, g.ID)
	key := etcd.DefaultPrefix + name + "/store"
	get, err := cli.Get(ctx, key)
	if err != nil || len(get.Kvs) != 1 {
		t.Fatalf("get %s: %v", key, err)
	}
	mod := get.Kvs[0].ModRevision
	kinds := []struct {
		name string
		f    func() error
	}{
		{"keepaliveonce", func() error { _, err := cli.KeepAliveOnce(ctx, g.ID); return err }},
		{"get-serializable", func() error { _, err := cli.Get(ctx, key, clientv3.WithSerializable()); return err }},
		{"txn-check", func() error {
			r, err := cli.Txn(clientv3.WithRequireLeader(ctx)).If(clientv3.Compare(clientv3.ModRevision(key), "=", mod)).
				Else(clientv3.OpGet(key, clientv3.WithSerializable())).Commit()
			if err == nil && !r.Succeeded {
				err = fmt.Errorf("%s changed", key)
			}
			return err
		}},
		{"store", func() error { return st.Renew(ctx, name+"/store", owner, rec.Token, ttl) }},
		{"store-deadline", func() error {
			dctx, cancel := context.WithTimeout(ctx, ttl)
			defer cancel()
			return st.Renew(dctx, name+"/store", owner, rec.Token, ttl)
		}},
		{"locker", func() error { return lease.Renew(ctx) }},
	}
	lat := make([][]float64, len(kinds))
	for i := 0; i < n+n/10; i++ {
		for k, kind := range kinds {
			t0 := time.Now()
			if err := kind.f(); err != nil {
				t.Fatalf("%s: %v", kind.name, err)
			}
			if i >= n/10 { // the first tenth warms up
				lat[k] = append(lat[k], float64(time.Since(t0).Microseconds()))
			}
		}
	}
	p50 := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	base := p50(lat[0])
	for k, kind := range kinds {
		m := p50(lat[k])
		t.Logf("%-17s p50 %6.0f µs  ratio to keepaliveonce %.2f", kind.name, m, m/base)
	}
}
