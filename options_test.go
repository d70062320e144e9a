package tenure_test

import (
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/memory"
)

// A nil option (a slice of options built with a gap) chooses nothing: no
// entry point panics on one.
func TestNilOptionsChooseNothing(t *testing.T) {
	ctx := ctxT(t)
	lk, err := tenure.New(memory.New(), nil, tenure.WithOwnerID("nil-options"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close(ctx)
	l, err := lk.Acquire(ctx, "r", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	sem, _ := lk.Semaphore("s", 2)
	sl, err := sem.Acquire(ctx, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	sl.Release(ctx)
	rw, _ := lk.RWLock("rw")
	for _, acquire := range []func() (*tenure.Lease, error){
		func() (*tenure.Lease, error) { return rw.AcquireShared(ctx, time.Minute, nil) },
		func() (*tenure.Lease, error) { return rw.AcquireExclusive(ctx, time.Minute, nil) },
	} {
		l, err := acquire()
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
	}
}
