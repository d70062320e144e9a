package harness

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const workerEnv = "TENURE_HARNESS_TEST_WORKER"

// TestMain lets the test binary act as a worker process: the orchestrator
// runs it again as "BINARY worker FLAGS".
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(WorkerMain(os.Args[2:]))
	}
	os.Setenv(workerEnv, "1")
	os.Exit(m.Run())
}

func shortRun(t *testing.T, unsafe bool, faults []string, d time.Duration) *Report {
	t.Helper()
	if testing.Short() {
		t.Skip("real processes and a real store: skipped with -short")
	}
	out := t.TempDir()
	var log strings.Builder
	rep, err := Run(context.Background(), Config{
		Store:                  "sqlite:" + filepath.Join(out, "leases.db"),
		Workers:                4,
		SemWorkers:             3,
		Slots:                  2,
		Duration:               d,
		TTL:                    400 * time.Millisecond,
		Retry:                  100 * time.Millisecond,
		Seed:                   uint64(time.Now().UnixNano()),
		Faults:                 faults,
		Unsafe:                 unsafe,
		Out:                    out,
		ExitProb:               0.1,
		Exe:                    os.Args[0],
		LinearizabilityTimeout: time.Minute,
		Log:                    &log,
	})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	t.Log(rep.Summary())
	return rep
}

// TestSQLiteRun runs real worker processes (four on a lease, three on a
// semaphore of two slots) on a real SQLite file for a few seconds with every
// SQLite fault, and expects no violation (an overlap that store-reset
// causes is outside the contract, not a violation).
func TestSQLiteRun(t *testing.T) {
	rep := shortRun(t, false, nil, 8*time.Second)
	if rep.Violations != 0 {
		t.Errorf("%d violations: %+v", rep.Violations, rep.Examples)
	}
	if len(rep.Missing) != 0 {
		t.Errorf("faults never injected: %v", rep.Missing)
	}
	if rep.Handoffs == 0 || rep.WorkSteps == 0 || rep.SlotHandoffs == 0 {
		t.Errorf("no handoff, no slot hand-off or no work: %s", rep.Summary())
	}
	if rep.Linearizability.Result != "Ok" {
		t.Errorf("linearizability: %+v", rep.Linearizability)
	}
	for _, k := range []string{FaultPause, FaultKill, FaultStuckWriter, FaultStoreReset} {
		if rep.Faults[k] == 0 {
			t.Errorf("no %s fault", k)
		}
	}
}

// TestUnsafeClientIsCaught proves that the checker is not vacuous: a client
// that keeps working while it believes it holds the lease, through pauses
// longer than the TTL, is reported.
func TestUnsafeClientIsCaught(t *testing.T) {
	rep := shortRun(t, true, []string{FaultPause}, 5*time.Second)
	if rep.Violations == 0 {
		t.Fatalf("the unsafe client went unnoticed: %s", rep.Summary())
	}
	if rep.ViolationsByKind["work-after-deadline"] == 0 {
		t.Errorf("no work-after-deadline violation: %v", rep.ViolationsByKind)
	}
	if rep.ViolationsByKind["semaphore-trust"] == 0 {
		t.Errorf("more than N trusted holders of the semaphore went unnoticed: %v", rep.ViolationsByKind)
	}
	// The store itself stayed correct: only the client was unsafe.
	if rep.Linearizability.Result != "Ok" {
		t.Errorf("linearizability: %+v", rep.Linearizability)
	}
}

func TestRunMainRefusesFaultsThatDoNotApply(t *testing.T) {
	var stdout, stderr strings.Builder
	code := RunMain([]string{"-faults", "proxy-drop,pause", "-out", t.TempDir(), "-duration", "1s"}, &stdout, &stderr, os.Args[0])
	if code != ExitError || !strings.Contains(stderr.String(), `fault "proxy-drop" does not apply to sqlite`) {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
	if code := RunMain([]string{"-no-such-flag"}, &stdout, &stderr, os.Args[0]); code != ExitUsage {
		t.Errorf("bad flag: exit %d, want %d", code, ExitUsage)
	}
}
