// Package storeclient gives tenure's own tests, harness and benchmarks the
// client a store was opened with (an etcd or go-redis client, a database
// pool, a Cassandra session). The stores do not export it: a write through
// it bypasses the store, and with it the lease contract.
//
// A store registers a function for each client type when its package is
// initialised; Of finds it by the store's and the client's types, so this
// package depends on no store and no database driver.
package storeclient

import (
	"fmt"
	"reflect"
	"sync"
)

type key struct{ store, client reflect.Type }

var funcs sync.Map // key → func(S) C

// Register makes Of[C](s) return f(s) for a store s of type S.
func Register[S, C any](f func(S) C) {
	funcs.Store(key{reflect.TypeFor[S](), reflect.TypeFor[C]()}, f)
}

// Of returns the client of type C of the store s. It panics when s's
// package registered no such client: a mistake in the caller's code, never
// in its input.
func Of[C, S any](s S) C {
	f, ok := funcs.Load(key{reflect.TypeFor[S](), reflect.TypeFor[C]()})
	if !ok {
		panic(fmt.Sprintf("storeclient: %v has no client of type %v", reflect.TypeFor[S](), reflect.TypeFor[C]()))
	}
	return f.(func(S) C)(s)
}
