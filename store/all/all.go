// Package all registers every store of this module with package store, for
// programs that open stores from URLs of any scheme:
//
//	import _ "github.com/tenure-go/tenure/store/all"
//
// A program that needs fewer stores imports only theirs (for example
// _ "github.com/tenure-go/tenure/store/postgres"), and links fewer client
// libraries.
package all

import (
	_ "github.com/tenure-go/tenure/store/cassandra" // cassandra://
	_ "github.com/tenure-go/tenure/store/etcd"      // etcd://
	_ "github.com/tenure-go/tenure/store/memory"    // memory:
	_ "github.com/tenure-go/tenure/store/mysql"     // mysql://, mariadb://
	_ "github.com/tenure-go/tenure/store/postgres"  // postgres://, postgresql://
	_ "github.com/tenure-go/tenure/store/redis"     // redis://, rediss://
	_ "github.com/tenure-go/tenure/store/sqlite"    // sqlite:
)
