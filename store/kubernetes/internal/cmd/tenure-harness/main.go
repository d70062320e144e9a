// Command tenure-harness is tenure's fault-injection safety harness
// (cmd/tenure-harness of the library's module) with the Kubernetes store:
// it registers the kubernetes: scheme and the store's kind with the
// harness, and runs the same subcommands.
//
//	go run ./internal/cmd/tenure-harness run -store "$TENURE_KUBERNETES&namespace=tenure-harness" -ttl 2s
package main

import (
	"fmt"
	"os"

	"github.com/tenure-go/tenure/internal/harness"
	"github.com/tenure-go/tenure/store/kubernetes/internal/harnesskind"
)

func main() {
	harnesskind.Register()
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
	default:
		usage()
		os.Exit(harness.ExitUsage)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: tenure-harness run -store kubernetes:?kubeconfig=FILE[&namespace=NS] -ttl 2s [flags]
       tenure-harness check -out DIR -store kubernetes
       tenure-harness worker [flags]  (started by run)`)
}
