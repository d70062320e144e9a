package sqlite

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// A gate lets one Store of this process at a time write to a database file
// (the process-wide writer gate): Stores of one process on one file queue
// here, woken at once when the writer before them commits, instead of
// sleeping in SQLite's busy handler (1, 2, 5, ... up to 100 ms between
// attempts, so a writer that just missed the lock may sleep long after it
// was freed). Only other processes meet the busy handler.
type gate struct {
	key  any
	ch   chan struct{} // holds a value while a Store writes
	refs int
}

var gates struct {
	sync.Mutex
	m map[any]*gate
}

// openGate returns the gate of the file fi, shared by the Stores of this
// process that opened it.
func openGate(fi os.FileInfo, path string) *gate {
	key := fileKey(fi, path)
	gates.Lock()
	defer gates.Unlock()
	if gates.m == nil {
		gates.m = make(map[any]*gate)
	}
	g := gates.m[key]
	if g == nil {
		g = &gate{key: key, ch: make(chan struct{}, 1)}
		gates.m[key] = g
	}
	g.refs++
	return g
}

// close drops a Store's reference.
func (g *gate) close() {
	gates.Lock()
	defer gates.Unlock()
	if g.refs--; g.refs == 0 {
		delete(gates.m, g.key)
	}
}

// lock waits until no other Store of this process writes to the file, for
// at most timeout.
func (g *gate) lock(timeout time.Duration) error {
	select {
	case g.ch <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case g.ch <- struct{}{}:
		return nil
	case <-t.C:
		return fmt.Errorf("database is locked: another store of this process kept writing to the file for the busy timeout (%v)", timeout)
	}
}

func (g *gate) unlock() { <-g.ch }
