// Command tenure-harness is tenure's fault-injection safety harness: it runs
// real worker processes that contend for one lease in a real store, injects
// faults on a seeded schedule, and checks the recorded histories against the
// lease contract (docs/safety.md).
//
//	tenure-harness run -store sqlite:/tmp/h/leases.db -duration 1m -seed 42
//	tenure-harness run -store 'cassandra://127.0.0.1,127.0.0.2,127.0.0.3/harness?replication=3' -duration 30m
//	tenure-harness run -unsafe -faults pause     # must report violations
//
// "run" prints one summary line per store and exits 1 on any violation, on a
// requested fault kind that was never injected, or when no lease changed
// hands. "check" checks the histories of a run again. "worker" is the contender the orchestrator starts; it is not meant
// to be run by hand.
package main

import (
	"os"

	"github.com/tenure-go/tenure/internal/harness"
)

const usage = `usage: tenure-harness run [flags]     (tenure-harness run -h for the flags)
       tenure-harness check -out DIR [-store sqlite|cassandra|postgres|mysql|etcd|redis]   (check a run's histories again)
       tenure-harness worker [flags]  (started by run)`

func main() {
	os.Exit(harness.Main(os.Args[1:], os.Stdout, os.Stderr, usage))
}
