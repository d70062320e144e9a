// Command etcd is the etcd server, release v3.6.16, built from the Go
// module proxy (go.etcd.io/etcd/server/v3) for tenure's test scripts:
// scripts/etcd builds it once into a cache outside the repository and runs
// it. Debian ships etcd 3.4.23, which has known lease-safety bugs that
// tenure's etcd store refuses (see store/etcd, ErrUnsafeServer).
//
// This is its own module so that the etcd server's dependencies never enter
// the library's go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
