package harness

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeClusterScript writes a stand-in for scripts/redis-cluster (and
// scripts/redis-sentinel): three masters (0, 1, 2) with replicas 3, 4, 5.
// "kill N" notes N ("kill-master" notes and prints 0); when
// takeover is true, the next "masters" after it names N's replica instead
// of N (its replica took over), otherwise N stays a master (the node was
// restarted before a replica was elected). It logs every call to the file
// it returns.
func fakeClusterScript(t *testing.T, takeover bool) (script, calls string) {
	t.Helper()
	dir := t.TempDir()
	script, calls = filepath.Join(dir, "redis-cluster"), filepath.Join(dir, "calls")
	takes := "no"
	if takeover {
		takes = "yes"
	}
	src := `#!/bin/sh
echo "$*" >>'` + calls + `'
state='` + filepath.Join(dir, "killed") + `'
case $1 in
masters)
	k=$(cat "$state" 2>/dev/null)
	for n in 0 1 2; do
		if [ "$n" = "$k" ] && [ ` + takes + ` = yes ]; then echo $((n + 3)); else echo "$n"; fi
	done ;;
kill) echo "$2" >"$state" ;;
kill-master) echo 0 >"$state"; echo 0 ;;
esac
exit 0
`
	if err := os.WriteFile(script, []byte(src), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, calls
}

// TestMasterFailoverNeedsTakeover: a master-failover fault is one only
// when a replica took the killed master's place before the node came
// back; a node that is a master again after its restart (its script's
// wait-failover returned while the cluster only suspected it) came back
// without its keys, and the harness must report the fault as failed
// instead of charging the store with the leases lost.
func TestMasterFailoverNeedsTakeover(t *testing.T) {
	for _, c := range []struct {
		scheme   string
		takeover bool
	}{{"redis+cluster", true}, {"redis+cluster", false}, {"redis+sentinel", true}, {"redis+sentinel", false}} {
		takeover := c.takeover
		script, calls := fakeClusterScript(t, takeover)
		o := &orch{
			env: &storeEnv{scheme: c.scheme, nodeScript: script},
			rng: rand.New(rand.NewPCG(1, 2)),
		}
		f, err := o.masterFailover(context.Background(), Fault{Kind: FaultMasterFailover})
		log, _ := os.ReadFile(calls)
		switch {
		case takeover && err != nil:
			t.Errorf("%s, a replica took over: %v", c.scheme, err)
		case !takeover && err == nil:
			t.Errorf("%s, the killed node is a master again after its restart: no error (fault %+v; calls:\n%s)", c.scheme, f, log)
		case !takeover && !strings.Contains(err.Error(), "master again"):
			t.Errorf("error %q does not say that the node is a master again", err)
		}
		if !strings.Contains(string(log), "wait-failover") || !strings.Contains(string(log), "restart") {
			t.Errorf("calls:\n%s", log)
		}
	}
}
