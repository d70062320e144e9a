package main

import (
	"os"
	"slices"
	"strings"
	"sync"
)

var (
	failpointsMu   sync.Mutex
	failpointsDone = map[string]bool{}
)

// failpointEnv names the environment variable through which the tests of
// this package inject faults into the tenure process at points they cannot
// reach from outside (as etcd's gofail does). It is not a user setting: it
// is not in any help text, and it is removed from the command's
// environment. Its value is a comma-separated list of failpoint names.
const failpointEnv = "TENURE_FAILPOINTS"

// failpoint performs the fault that $TENURE_FAILPOINTS asks for at the
// point name, if any, the first time the point is reached in the process:
//
//	stop-before-start  tenure stops itself with SIGSTOP after it has the
//	                   lease and before it checks it and starts the command,
//	                   as a process paused there by the scheduler, a
//	                   debugger or a suspended VM would be; the test sends
//	                   SIGCONT.
//	stop-after-start   tenure stops itself right after it started the
//	                   command's process, before the reaper has its
//	                   deadline.
//	reaper-start-fails the reaper cannot be started (as a fork refused for
//	                   a limit on processes or open files); see
//	                   failpointSet.
func failpoint(name string) {
	v := os.Getenv(failpointEnv)
	if v == "" {
		return
	}
	failpointsMu.Lock()
	done := failpointsDone[name]
	failpointsDone[name] = true
	failpointsMu.Unlock()
	if done {
		return
	}
	for _, f := range strings.Split(v, ",") {
		if f != name {
			continue
		}
		switch name {
		case "stop-before-start", "stop-after-start":
			stopSelf()
		}
	}
}

// failpointSet reports whether $TENURE_FAILPOINTS names the failpoint name,
// for points that change a result rather than stop the process.
func failpointSet(name string) bool {
	v := os.Getenv(failpointEnv)
	return v != "" && slices.Contains(strings.Split(v, ","), name)
}
