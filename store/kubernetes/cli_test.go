package kubernetes_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cliURL is the store URL of the CLI tests: $TENURE_KUBERNETES in
// testNamespace.
func cliURL(tb testing.TB) string {
	u := storeURL(tb)
	if strings.Contains(u, "?") {
		return u + "&namespace=" + testNamespace
	}
	return u + "?namespace=" + testNamespace
}

// buildCLI builds the tenure command with this store (build-tenure).
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tenure")
	cmd := exec.Command("./build-tenure", bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build-tenure: %v\n%s", err, out)
	}
	return bin
}

type cliResult struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, ctx context.Context, bin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("tenure %s: %v", strings.Join(args, " "), err)
	}
	return cliResult{code, out.String(), errb.String()}
}

// startCLI starts tenure in the background; the result arrives on the
// channel.
func startCLI(t *testing.T, ctx context.Context, bin string, args ...string) <-chan cliResult {
	ch := make(chan cliResult, 1)
	go func() { ch <- runCLI(t, ctx, bin, args...) }()
	return ch
}

// waitHeld polls tenure status until it reports RESOURCE held (exit 0).
func waitHeld(t *testing.T, ctx context.Context, bin, store, resource string) cliResult {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; {
		r := runCLI(t, ctx, bin, "status", "--store", store, resource)
		if r.code == 0 {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never held: %+v", resource, r)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestCLI: the tenure command, built with this store, runs a command under
// a lease, shows and lists it, refuses a second holder, runs a semaphore of
// two slots, and frees a lease by force, which the holder learns through
// its watch.
func TestCLI(t *testing.T) {
	store := cliURL(t)
	admin(t)
	if testing.Short() {
		t.Skip("builds the tenure command")
	}
	bin := buildCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := "cli-" + randSuffix()

	got := runCLI(t, ctx, bin, "run", "--store", store, "--ttl", "3s", r, "--", "sh", "-c", `echo "token=$TENURE_TOKEN"`)
	if got.code != 0 || !strings.HasPrefix(got.stdout, "token=") || strings.TrimSpace(got.stdout) == "token=" {
		t.Fatalf("tenure run: %+v", got)
	}

	holder := startCLI(t, ctx, bin, "run", "--store", store, "--ttl", "3s", "--owner", "cli-holder", r, "--", "sleep", "60")
	st := waitHeld(t, ctx, bin, store, r)
	if !strings.Contains(st.stdout, "cli-holder") {
		t.Errorf("tenure status: %q; want the holder cli-holder", st.stdout)
	}
	if l := runCLI(t, ctx, bin, "list", "--store", store); l.code != 0 || !strings.Contains(l.stdout, r) {
		t.Errorf("tenure list: %+v; want %s", l, r)
	}
	if o := runCLI(t, ctx, bin, "run", "--store", store, "--no-wait", r, "--", "true"); o.code != 75 {
		t.Errorf("second tenure run --no-wait: exit %d; want 75 (held)\n%s", o.code, o.stderr)
	}
	start := time.Now()
	if f := runCLI(t, ctx, bin, "release", "--store", store, "--force", r); f.code != 0 {
		t.Fatalf("tenure release --force: %+v", f)
	}
	select {
	case h := <-holder:
		if h.code != 79 {
			t.Errorf("the holder after release --force: exit %d; want 79 (lost)\n%s", h.code, h.stderr)
		}
		t.Logf("the holder stopped %v after the forced release", time.Since(start).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the holder ran on 30 s after its lease was freed by force")
	}

	// A semaphore of two slots.
	sem := "cli-sem-" + randSuffix()
	a := startCLI(t, ctx, bin, "run", "--store", store, "--ttl", "3s", "--slots", "2", sem, "--", "sleep", "15")
	b := startCLI(t, ctx, bin, "run", "--store", store, "--ttl", "3s", "--slots", "2", sem, "--", "sleep", "15")
	for deadline := time.Now().Add(60 * time.Second); ; {
		s := runCLI(t, ctx, bin, "status", "--store", store, sem)
		if strings.Contains(s.stdout, "2 of 2 slots held") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("semaphore never full: %+v", s)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if c := runCLI(t, ctx, bin, "run", "--store", store, "--ttl", "3s", "--slots", "2", "--no-wait", sem, "--", "true"); c.code != 75 {
		t.Errorf("third holder of two slots: exit %d; want 75\n%s", c.code, c.stderr)
	}
	for _, ch := range []<-chan cliResult{a, b} {
		if res := <-ch; res.code != 0 {
			t.Errorf("semaphore holder: %+v", res)
		}
	}
}
