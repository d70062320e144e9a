package main

// What tenure run and tenure elect share before and after the command runs:
// their flags and arguments, the smallest TTL they accept, the options of
// their Locker, finding the command, the signals that stop a wait, and
// closing the Locker.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

// minTTL is the smallest --ttl of run and elect. A lease is renewed every
// TTL/3, each renewal a round trip to the store, and the command may only
// start while the lease has its renew window left (tenure.Timing, about
// two thirds of the TTL; see usableLease): below a
// second, a store that answers in a few hundred milliseconds, a busy host
// or a garbage-collection pause loses the lease before or soon after the
// command starts, and the command would run on a lease nobody holds.
const minTTL = time.Second

// minTTLWhy says why, for the usage error.
const minTTLWhy = "the lease is renewed every TTL/3, each renewal a round trip to the store, and a shorter TTL is lost to a slow answer or a short pause, so the command could not be trusted to run under it"

// closeTimeout bounds closing the Locker when tenure exits: freeing the
// lease, and resolving and freeing an acquire whose outcome is unknown
// (tenure was stopped while the store was answering it), so that a tenure
// that is gone does not keep the lease for a whole TTL.
const closeTimeout = 5 * time.Second

// leaseFlags are the flags that tenure run and tenure elect share.
type leaseFlags struct {
	ttl   time.Duration
	grace time.Duration
	owner string
}

// addLeaseFlags adds the flags of f to c: --ttl with the command's default
// TTL, --grace, and --owner, whose help names what the owner id is of
// (ownerOf: "owner", "candidate").
func addLeaseFlags(c *cobra.Command, f *leaseFlags, defaultTTL time.Duration, ownerOf string) {
	fl := c.Flags()
	fl.DurationVar(&f.ttl, "ttl", defaultTTL, "lease TTL, at least 1s")
	fl.DurationVar(&f.grace, "grace", 10*time.Second, "time from SIGTERM to SIGKILL")
	fl.StringVar(&f.owner, "owner", "", "readable "+ownerOf+" id (default HOST:PID)")
}

// lockerOptions are the options of the Locker of tenure run and of the
// candidate of tenure elect, for the owner id that validateCommand
// returned. WithReleaseWatch: on stores that announce releases, a lease
// freed or taken by someone else ends within a round trip, and the command
// is stopped then, not at the next renewal.
func (a *app) lockerOptions(ownerID string) []tenure.Option {
	return []tenure.Option{tenure.WithOwnerID(ownerID), tenure.WithLogger(a.libraryLog()), tenure.WithReleaseWatch()}
}

// commandForm is the usage line of run and elect.
func commandForm(name string) string {
	return "usage: tenure " + name + " [flags] RESOURCE -- COMMAND [ARGS...] (or: tenure " + name + " [flags] -- RESOURCE -- COMMAND [ARGS...])"
}

// splitCommandArgs splits "RESOURCE -- COMMAND [ARGS...]", the arguments of
// tenure run and tenure elect (name); dash is the number of arguments before
// the first "--". A resource name that starts with "-" goes after a first
// "--", which ends the flags, and the command after a second one:
// "tenure run -- -name -- COMMAND".
func splitCommandArgs(name string, args []string, dash int) (string, []string, error) {
	form := commandForm(name)
	if dash == 0 && len(args) >= 2 && args[1] == "--" {
		// tenure run [flags] -- RESOURCE -- COMMAND
		if len(args) == 2 {
			return "", nil, usage("%s: missing COMMAND after the second --; %s", name, form)
		}
		return args[0], args[2:], nil
	}
	switch {
	case len(args) == 0:
		return "", nil, usage("%s: missing RESOURCE and COMMAND; %s", name, form)
	case dash < 0 && len(args) == 1:
		return "", nil, usage("%s: missing COMMAND after RESOURCE %s; %s", name, quoteName(args[0]), form)
	case dash < 0:
		return "", nil, usage("%s: put -- between RESOURCE and COMMAND, as in: tenure %s %s -- %s", name, name, display(args[0]), shorten(escapeText(strings.Join(args[1:], " ")), maxName))
	case dash == 0 && len(args) == 2:
		return "", nil, usage("%s: missing RESOURCE before -- (or, if %s is the resource, the COMMAND after it); %s", name, quoteName(args[1]), form)
	case dash == 0 && len(args) == 1:
		return "", nil, usage("%s: missing COMMAND after RESOURCE %s (or the RESOURCE before --); %s", name, quoteName(args[0]), form)
	case dash == 0:
		return "", nil, usage("%s: missing RESOURCE before --; %s", name, form)
	case dash > 1:
		return "", nil, usage("%s: one RESOURCE before --, got %d (%s); %s", name, dash, shorten(escapeText(strings.Join(args[:dash], " ")), maxName), form)
	case len(args) == 1:
		return "", nil, usage("%s: missing COMMAND after --; %s", name, form)
	}
	return args[0], args[1:], nil
}

// validateCommand checks the arguments and flags that tenure run and tenure
// elect (name) share, before any I/O: RESOURCE -- COMMAND, --ttl, --grace
// and --owner. It returns the readable owner id to use.
func validateCommand(name string, c *cobra.Command, args []string, f *leaseFlags) (resource string, argv []string, ownerID string, err error) {
	ttl, grace, owner := f.ttl, f.grace, f.owner
	resource, argv, err = splitCommandArgs(name, args, c.ArgsLenAtDash())
	if err != nil {
		return "", nil, "", err
	}
	if err := driver.ValidateResource(resource); err != nil {
		return "", nil, "", usage("%s: resource %s: %s", name, quoteName(resource), errText(err))
	}
	if argv[0] == "" {
		return "", nil, "", usage("%s: the command name is empty", name)
	}
	if ttl <= 0 {
		return "", nil, "", usage("%s: --ttl %v: the TTL must be positive, such as 30s", name, ttl)
	}
	if ttl < minTTL {
		return "", nil, "", usage("%s: --ttl %v: the TTL must be at least %v: %s", name, ttl, minTTL, minTTLWhy)
	}
	if grace < 0 {
		return "", nil, "", usage("%s: --grace %v: the grace period cannot be negative", name, grace)
	}
	ownerID = owner
	if !c.Flags().Changed("owner") {
		ownerID = tenure.DefaultOwnerID()
	}
	if _, err := naming.NewOwner(ownerID); err != nil {
		return "", nil, "", usage("%s: --owner %s: %s", name, quoteName(ownerID), errText(err))
	}
	if strings.Contains(ownerID, naming.ValueSeparator) {
		// Owner strings read as ID|VALUE (status, leader): a plain id with
		// the separator would be taken for an id and a published value.
		return "", nil, "", usage("%s: --owner %s: contains %q, which separates a candidate's id from the value it publishes (tenure elect --value)",
			name, quoteName(ownerID), naming.ValueSeparator)
	}
	return resource, argv, ownerID, nil
}

// lookCommand finds the command to run, as exec.Command would, before any
// I/O: a command that is not found is exit code 127, one that is found but
// cannot be executed (no execute permission, a directory) 126, without
// waiting for a lease and without spending a fencing token. It returns the
// path to execute.
func lookCommand(name, file string) (string, error) {
	path, err := exec.LookPath(file)
	if errors.Is(err, exec.ErrDot) {
		err = nil // found through a relative $PATH entry, as a shell would run it
	}
	if err != nil {
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		var ee *exec.Error
		if errors.As(err, &ee) {
			err = ee.Err // exec.Error repeats the name
		}
		return "", fail(code, "%s: cannot run %s: %s", name, quoteName(file), errText(err))
	}
	return path, nil
}

// isWaitStop reports whether signal s, received while tenure waits for a
// lease or follows a leader, ends the wait: SIGINT, SIGTERM, SIGHUP and
// SIGQUIT do; SIGUSR1 and SIGUSR2 (which tenure passes on to a running
// command) are ignored then.
func isWaitStop(s os.Signal) bool { return !isUserSignal(s) }

// watchSignals returns a context that the first signal from sigCh that ends
// a wait (isWaitStop) cancels, and a function that stops watching and
// returns that signal, or nil. Other signals are logged and dropped.
func (a *app) watchSignals(sigCh <-chan os.Signal) (context.Context, func() os.Signal) {
	ctx, cancel := context.WithCancelCause(context.Background())
	var got os.Signal
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case s := <-sigCh:
				if !isWaitStop(s) {
					a.log.Info("ignoring a signal: no command is running", "signal", signalName(s))
					continue
				}
				got = s
				cancel(fmt.Errorf("received %s", signalName(s)))
				return
			case <-stop:
				return
			}
		}
	}()
	return ctx, func() os.Signal {
		close(stop)
		<-done
		cancel(nil)
		return got
	}
}

// closeLocker closes lk (a *tenure.Locker, or an election candidate's)
// when tenure is about to exit, bounded by
// closeTimeout: it frees the leases lk still holds and waits for its
// acquires, releases and clean-ups in flight, among them an acquire that
// tenure stopped after it was sent, whose outcome is resolved and whose
// lease, if granted, is freed. What cannot be finished in time is reported;
// the lease then expires by its TTL.
func (a *app) closeLocker(lk interface{ Close(context.Context) error }, resource string, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	start := time.Now()
	if err := lk.Close(ctx); err != nil {
		a.errorf("warning: could not finish with the lease on %s within %s: %s; it expires by its TTL (%s) at the latest",
			quoteName(resource), fmtDur(closeTimeout), errText(err), fmtDur(ttl))
		return
	}
	a.log.Debug("locker closed", "took", time.Since(start))
}
