//go:build linux

package main

import (
	"strings"
	"testing"
	"time"
)

// release --owner names a holder by its readable id, its owner (one
// process: any of its grants) or its grant; nothing else, and no other
// holder.
func TestOwnerNames(t *testing.T) {
	const grant = "web-3:4711#9f86d081884c7d65.2"
	for _, c := range []struct {
		arg, holder string
		want        bool
	}{
		{"web-3:4711", grant, true},
		{"web-3:4711#9f86d081884c7d65", grant, true},
		{grant, grant, true},
		{grant, grant + "/kept", true}, // the grant, held on by --hold-at-least
		{"web-3:4711#9f86d081884c7d65", grant + "/kept", true},
		{"web-3:4711", grant + "/kept", true},
		{"web-3", grant, false},
		{"web-3:4711#9f86d081884c7d6", grant, false}, // a shorter nonce
		{"web-3:4711#0000000000000000", grant, false},
		{"web-3:4711#9f86d081884c7d65.1", grant, false}, // another grant
		{"web-3:4711#9f86d081884c7d65.", grant, false},
		{"alpha", "alpha|aHR0cA#0123456789abcdef.1", true}, // an elect candidate that publishes a value
		{"tenure semaphore of 3 slots", "tenure semaphore of 3 slots", true},
	} {
		if got := ownerNames(c.arg, c.holder); got != c.want {
			t.Errorf("ownerNames(%q, %q) = %v; want %v", c.arg, c.holder, got, c.want)
		}
	}
}

// "tenure release --owner ID#NONCE", the owner without the grant's number,
// frees the lease that process holds; the holder learns of it.
func TestReleaseByOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := e.start("alpha", startOpt{stdinPipe: true}, "run", "--ttl", "3s", "--owner", "alpha", "job", "--",
		helper("-ready", e.path("alpha.ready"), "-hold", "stdin"))
	info := waitReady(t, e.path("alpha.ready"), 10*time.Second)
	owner := info.owner[:strings.LastIndex(info.owner, ".")] // ID#NONCE
	if !strings.HasPrefix(owner, "alpha#") {
		t.Fatalf("TENURE_OWNER %q; want alpha#NONCE.N", info.owner)
	}
	code, stdout, stderr := e.run("release", "job", "--owner", owner)
	if code != 0 || !strings.Contains(stdout, "released") {
		t.Fatalf("release --owner %s: exit %d:\n%s%s", owner, code, stdout, stderr)
	}
	if code := h.wait(10 * time.Second); code != exitLost {
		t.Fatalf("the holder exited %d, want %d:\n%s", code, exitLost, h.stderr())
	}
}
