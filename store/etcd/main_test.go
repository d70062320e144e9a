package etcd_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/etcd"
)

// TestMain lets the test binary act as the holder of
// testserver.Fairness.
func TestMain(m *testing.M) {
	testserver.FairHolderMain(func(ctx context.Context, url string) (driver.Store, error) {
		return etcd.OpenURL(ctx, url)
	})
	os.Exit(m.Run())
}

// TestFairnessAcrossProcesses: a process that takes the resource again as
// soon as it released it (Do in a loop, 50 ms of work) does not starve a
// waiter in another process, which a release notification wakes.
func TestFairnessAcrossProcesses(t *testing.T) {
	testserver.Fairness(t, open(t), url(t), 10, 20*time.Second)
}
