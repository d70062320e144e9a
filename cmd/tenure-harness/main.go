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
	"fmt"
	"os"

	"github.com/tenure-go/tenure/internal/harness"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(harness.ExitUsage)
	}
	switch os.Args[1] {
	case "run":
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, "tenure-harness:", err)
			os.Exit(harness.ExitError)
		}
		os.Exit(harness.RunMain(os.Args[2:], os.Stdout, os.Stderr, exe))
	case "worker":
		os.Exit(harness.WorkerMain(os.Args[2:]))
	case "check":
		os.Exit(harness.CheckMain(os.Args[2:], os.Stdout, os.Stderr))
	case "-h", "-help", "--help", "help":
		usage()
	default:
		usage()
		os.Exit(harness.ExitUsage)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: tenure-harness run [flags]     (tenure-harness run -h for the flags)
       tenure-harness check -out DIR [-store sqlite|cassandra|postgres|mysql|etcd|redis]   (check a run's histories again)
       tenure-harness worker [flags]  (started by run)`)
}
