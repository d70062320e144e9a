package testserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// The environment of a holder process that Fairness starts.
const (
	fairResourceEnv = "TENURE_FAIR_RESOURCE"
	fairArgEnv      = "TENURE_FAIR_STORE"
)

// FairWork is how long the holder of Fairness, and its waiter, hold the
// resource each time, with a lease of FairTTL (long enough that a loaded
// machine does not lose it).
const (
	FairWork = 50 * time.Millisecond
	FairTTL  = 10 * time.Second
)

// FairHolderMain makes a store's test binary, when Fairness started it, the
// holder that takes the resource again as soon as it released it: it opens
// the store with open(ctx, arg) (arg is what the test passed to Fairness:
// a URL, a file), prints "granted" after each grant, and runs Do with
// a TTL of FairTTL and FairWork of work in a loop until its standard input
// closes (or two minutes pass), then prints "rounds N" and exits. A Do that
// fails (a store call slowed past the lease's deadline on a loaded
// machine) is said on standard error, and the loop goes on. Call it
// first thing in TestMain; it returns when the process was not started so.
func FairHolderMain(open func(ctx context.Context, arg string) (driver.Store, error)) {
	r := os.Getenv(fairResourceEnv)
	if r == "" {
		return
	}
	if err := fairHolder(r, os.Getenv(fairArgEnv), open); err != nil {
		fmt.Fprintln(os.Stderr, "fair holder:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func fairHolder(r, arg string, open func(ctx context.Context, arg string) (driver.Store, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	s, err := open(ctx, arg)
	if err != nil {
		return err
	}
	defer s.Close()
	lk, err := tenure.New(s, tenure.WithOwnerID("holder"))
	if err != nil {
		return err
	}
	defer lk.Close(context.Background())
	n := 0
	for ctx.Err() == nil {
		err := lk.Do(ctx, r, FairTTL, func(context.Context) error {
			fmt.Println("granted")
			n++
			time.Sleep(FairWork)
			return nil
		})
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "fair holder: Do:", err)
		}
	}
	fmt.Println("rounds", n)
	return nil
}

// Fairness checks that a holder that takes a resource again as soon as it
// released it does not starve a waiter in another process: it starts the
// test binary as that holder (FairHolderMain, with arg), then, from this
// process, acquires the resource on s rounds times (each Acquire a
// blocking one with the Locker's defaults, holding the resource FairWork
// each time, and waiting FairWork before the next), and returns how long
// each Acquire waited. The test fails when one waits longer than limit.
func Fairness(t *testing.T, s driver.Store, arg string, rounds int, limit time.Duration) []time.Duration {
	t.Helper()
	return fairness(t, s, arg, rounds, limit, -1)
}

// FairnessInTurn is Fairness on a store that grants waiters in turn (a
// driver.Reserver): the test also fails when the holder process was
// granted the resource more than handovers times while one Acquire of
// this process waited (counted from the holder's reports, so a grant
// reported late may count once too often).
func FairnessInTurn(t *testing.T, s driver.Store, arg string, rounds int, limit time.Duration, handovers int) []time.Duration {
	t.Helper()
	return fairness(t, s, arg, rounds, limit, handovers)
}

func fairness(t *testing.T, s driver.Store, arg string, rounds int, limit time.Duration, handovers int) []time.Duration {
	t.Helper()
	r := Resource(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fairResourceEnv+"="+r, fairArgEnv+"="+arg)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The first "granted" and the last line go to lines; every grant
	// is counted in grants.
	lines := make(chan string, 4)
	var grants atomic.Int64
	go func() {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			l := sc.Text()
			if l == "granted" {
				grants.Add(1)
				if !first {
					continue
				}
				first = false
			}
			lines <- l
		}
		close(lines)
	}()
	stopped := false
	stop := func() string {
		if stopped {
			return ""
		}
		stopped = true
		stdin.Close()
		last := ""
		for l := range lines {
			last = l
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the holder process: %v", err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("the holder process did not end")
		}
		return last
	}
	defer stop()
	select {
	case l := <-lines:
		if l != "granted" {
			t.Fatalf("the holder process said %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the holder process was not granted the resource within 30 s")
	}
	lk := Locker(t, s)
	var waits []time.Duration
	most := int64(0)
	for i := 0; i < rounds; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		start, before := time.Now(), grants.Load()
		l, err := lk.Acquire(ctx, r, FairTTL)
		cancel()
		if err != nil {
			t.Fatalf("round %d: the waiter was not granted the resource within %v while another process took it again and again (after %d rounds): %v",
				i+1, limit, len(waits), err)
		}
		waits = append(waits, time.Since(start))
		n := grants.Load() - before
		most = max(most, n)
		if handovers >= 0 && n > int64(handovers) {
			t.Errorf("round %d: the holder process was granted the resource %d times while the waiter waited %v (at most %d allowed)",
				i+1, n, waits[len(waits)-1].Round(time.Millisecond), handovers)
		}
		time.Sleep(FairWork)
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(FairWork)
	}
	t.Logf("holder: %s; waiter's waits: %s; the holder's grants during one wait: at most %d", stop(), summary(waits), most)
	return waits
}

// summary returns the median and the largest of ds.
func summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("median %v, max %v (%d)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}
