// Command tenure-harness is tenure's fault-injection safety harness
// (cmd/tenure-harness of the library's module) with the Kubernetes store:
// it registers the kubernetes: scheme and the store's kind with the
// harness, and runs the same subcommands.
//
//	go run ./internal/cmd/tenure-harness run -store "$TENURE_KUBERNETES&namespace=tenure-harness" -ttl 2s
package main

import (
	"os"

	"github.com/tenure-go/tenure/internal/harness"
	"github.com/tenure-go/tenure/store/kubernetes/internal/harnesskind"
)

const usage = `usage: tenure-harness run -store kubernetes:?kubeconfig=FILE[&namespace=NS] -ttl 2s [flags]
       tenure-harness check -out DIR -store kubernetes
       tenure-harness worker [flags]  (started by run)`

func main() {
	harnesskind.Register()
	os.Exit(harness.Main(os.Args[1:], os.Stdout, os.Stderr, usage))
}
