package sqlite_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Processes opening a new file at the same moment all succeed: one of them
// creates the schema and switches the file to WAL while the others wait.
func TestConcurrentOpenOfNewFile(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for round := 0; round < 15; round++ {
		path := filepath.Join(t.TempDir(), "new.db")
		var wg sync.WaitGroup
		errs := make(chan string, 10)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), "TENURE_SQLITE_OPEN="+path)
				if out, err := cmd.CombinedOutput(); err != nil {
					errs <- err.Error() + ": " + string(out)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %s", round, err)
		}
	}
}
