package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

type runFlags struct {
	ttl    time.Duration
	wait   time.Duration
	noWait bool
	grace  time.Duration
	owner  string
}

const runLong = `Run acquires the lease on RESOURCE, runs COMMAND while holding it, and
releases it when COMMAND exits. At most one "tenure run" per resource runs
its command at a time, across every process that uses the same store.

By default run waits for the lease as long as it takes, like flock(1);
--wait bounds the wait and --no-wait makes a single attempt. While it waits
on a terminal, a status line shows who holds the lease. SIGINT, SIGTERM or
SIGHUP while waiting stop the wait.

COMMAND is executed directly, not through a shell, in its own process group,
with stdin, stdout and stderr passed through, and with these variables added
to its environment:

  TENURE_RESOURCE  the resource name
  TENURE_OWNER     the lease's owner: the --owner id, "#", and a random nonce
  TENURE_TOKEN     the fencing token, a number that grows with every grant

Pass TENURE_TOKEN to what the command writes to when it can, so that a late
write from a holder that lost its lease can be rejected.

On a terminal, the command's process group gets the terminal's foreground,
so an interactive command can read from it and Ctrl-C reaches it directly.
Ctrl-Z stops the command and tenure together, as one job; the lease is not
renewed while tenure is stopped, so a stop longer than the TTL loses it.

The lease is renewed in the background every TTL/3. SIGINT, SIGTERM and
SIGHUP sent to tenure are passed on to the command's process group. When the
command exits, tenure releases the lease and exits with the command's exit
status. If the release cannot be confirmed, tenure warns that the lease will
expire by its TTL, and still exits with the command's status.

If the lease is lost while the command runs (it could not be renewed within
its TTL, or an operator freed it with "tenure release --force"), tenure says
why, sends SIGTERM to the command's process group, then SIGKILL after
--grace, and exits with 79 whatever the command returned: the command can no
longer rely on holding the lease.

Exit codes:
  0-125  the command's own exit status (it may itself exit with a code below)
  64     bad arguments or input; nothing was written to the store
  69     the store cannot be opened or reached
  70     internal error
  75     the lease is held by another owner (--no-wait, or --wait ran out);
         the holder is printed
  79     the lease was lost while the command ran
  126    the command was found but cannot be executed
  127    the command was not found
  128+N  the command was killed by signal N, or tenure was stopped by signal
         N while it waited for the lease (130 for SIGINT, 143 for SIGTERM)`

const runExample = `  # Run the nightly backup; wait while another backup holds the lease.
  tenure run nightly-backup -- /usr/local/bin/backup --full

  # Give up at once if someone else holds it (exit code 75).
  tenure run --no-wait reindex -- ./reindex.sh --all

  # Wait at most five minutes; a 2-minute TTL survives short store outages.
  tenure run --wait 5m --ttl 2m db-migrate -- ./migrate up

  # Use a shell for pipes and redirections; the token fences the writes.
  tenure run report -- sh -c 'make-report --token "$TENURE_TOKEN" > /srv/report.html'

  # Keep the leases in another file (see tenure --help for store URLs).
  TENURE_STORE=sqlite:/var/lib/myapp/leases.db tenure run cron-cleanup -- ./cleanup`

func (a *app) newRunCmd() *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:     "run [flags] RESOURCE -- COMMAND [ARGS...]",
		Short:   "Run a command while holding the lease on RESOURCE",
		Long:    runLong,
		Example: runExample,
		Args:    cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return a.run(c, &f, args)
		},
	}
	fl := c.Flags()
	fl.DurationVar(&f.ttl, "ttl", 30*time.Second, "lease TTL: how long the lease outlives a holder that stops renewing it")
	fl.DurationVar(&f.wait, "wait", 0, "wait at most this long for the lease, then exit 75; 0 makes one attempt (default: wait as long as it takes)")
	fl.BoolVar(&f.noWait, "no-wait", false, "make one attempt; exit 75 at once if the lease is held")
	fl.DurationVar(&f.grace, "grace", 10*time.Second, "after the lease is lost, time between SIGTERM and SIGKILL to the command")
	fl.StringVar(&f.owner, "owner", "", `readable owner id, such as "backup@web-3" (default HOST:PID)`)
	return c
}

// errWaitTimeout is the cause of the wait context when --wait runs out.
var errWaitTimeout = errors.New("--wait ran out")

// splitCommandArgs splits "RESOURCE -- COMMAND [ARGS...]", the arguments of
// tenure run and tenure elect (name).
func splitCommandArgs(name string, args []string, dash int) (string, []string, error) {
	form := "usage: tenure " + name + " [flags] RESOURCE -- COMMAND [ARGS...]"
	switch {
	case len(args) == 0:
		return "", nil, usage("%s: missing RESOURCE and COMMAND; %s", name, form)
	case dash < 0 && len(args) == 1:
		return "", nil, usage("%s: missing COMMAND after RESOURCE %q; %s", name, args[0], form)
	case dash < 0:
		return "", nil, usage("%s: put -- between RESOURCE and COMMAND, as in: tenure %s %s -- %s", name, name, args[0], strings.Join(args[1:], " "))
	case dash == 0:
		return "", nil, usage("%s: missing RESOURCE before --; %s", name, form)
	case dash > 1:
		return "", nil, usage("%s: one RESOURCE before --, got %d (%s); %s", name, dash, strings.Join(args[:dash], " "), form)
	case len(args) == 1:
		return "", nil, usage("%s: missing COMMAND after --; %s", name, form)
	}
	return args[0], args[1:], nil
}

// validateCommand checks the arguments and flags that tenure run and tenure
// elect (name) share, before any I/O: RESOURCE -- COMMAND, --ttl, --grace
// and --owner. It returns the readable owner id to use.
func validateCommand(name string, c *cobra.Command, args []string, ttl, grace time.Duration, owner string) (resource string, argv []string, ownerID string, err error) {
	resource, argv, err = splitCommandArgs(name, args, c.ArgsLenAtDash())
	if err != nil {
		return "", nil, "", err
	}
	if err := driver.ValidateResource(resource); err != nil {
		return "", nil, "", usage("%s: resource %q: %s", name, resource, errText(err))
	}
	if argv[0] == "" {
		return "", nil, "", usage("%s: the command name is empty", name)
	}
	if err := driver.ValidateTTL(ttl); err != nil {
		return "", nil, "", usage("%s: --ttl %v: the TTL must be positive, such as 30s", name, ttl)
	}
	if ttl < time.Millisecond {
		return "", nil, "", usage("%s: --ttl %v: the TTL must be at least 1ms", name, ttl)
	}
	if grace < 0 {
		return "", nil, "", usage("%s: --grace %v: the grace period cannot be negative", name, grace)
	}
	ownerID = owner
	if !c.Flags().Changed("owner") {
		ownerID = tenure.DefaultOwnerID()
	}
	if _, err := tenure.NewOwner(ownerID); err != nil {
		return "", nil, "", usage("%s: --owner %q: %s", name, ownerID, errText(err))
	}
	return resource, argv, ownerID, nil
}

// validateRun checks every argument before any I/O.
func validateRun(c *cobra.Command, f *runFlags, args []string) (resource string, argv []string, ownerID string, err error) {
	resource, argv, ownerID, err = validateCommand("run", c, args, f.ttl, f.grace, f.owner)
	if err != nil {
		return "", nil, "", err
	}
	waitSet := c.Flags().Changed("wait")
	switch {
	case waitSet && f.noWait:
		return "", nil, "", usage("run: --wait and --no-wait cannot be used together")
	case f.wait < 0:
		return "", nil, "", usage("run: --wait %v: the wait cannot be negative", f.wait)
	}
	return resource, argv, ownerID, nil
}

func (a *app) run(c *cobra.Command, f *runFlags, args []string) error {
	resource, argv, ownerID, err := validateRun(c, f, args)
	if err != nil {
		return err
	}
	u, err := a.parseStoreForTTL("run", f.ttl)
	if err != nil {
		return err
	}

	// From here on SIGINT, SIGTERM and SIGHUP are tenure's to handle: they
	// stop the wait, and are passed on to the command once it runs.
	sigCh := make(chan os.Signal, 16)
	signal.Notify(sigCh, forwardedSignals...)
	defer signal.Stop(sigCh)

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var got os.Signal
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case s := <-sigCh:
			got = s
			cancel(fmt.Errorf("received %s", signalName(s)))
		case <-stopWatch:
		}
	}()
	endWatch := func() os.Signal {
		close(stopWatch)
		<-watchDone
		return got
	}
	interrupted := func(s os.Signal) error {
		return fail(exitSignalBase+signalNumber(s), "stopped waiting for %s: received %s", quoteName(resource), signalName(s))
	}

	store, err := a.openStore(ctx, u, false)
	if err != nil {
		if s := endWatch(); s != nil {
			return interrupted(s)
		}
		return err
	}
	defer store.Close()

	lk, err := tenure.New(store, tenure.WithOwnerID(ownerID), tenure.WithLogger(a.log))
	if err != nil {
		endWatch()
		return fail(exitSoftware, "run: %s", errText(err))
	}
	lease, timedOut, err := a.acquire(ctx, lk, resource, f, c.Flags().Changed("wait"))
	if s := endWatch(); s != nil {
		if lease != nil {
			a.release(lease)
		}
		return interrupted(s)
	}
	if err != nil {
		return a.notAcquired(store, resource, f, timedOut, err)
	}
	a.log.Info("lease acquired", "resource", resource, "owner", lease.Owner(), "token", lease.Token(), "ttl", f.ttl)
	return a.runCommand(lease, argv, f, sigCh)
}

// acquire gets the lease: one attempt with --no-wait (or --wait 0), else a
// blocking acquire bounded by --wait. timedOut reports that --wait ran out.
func (a *app) acquire(ctx context.Context, lk *tenure.Locker, resource string, f *runFlags, waitSet bool) (lease *tenure.Lease, timedOut bool, err error) {
	if f.noWait || (waitSet && f.wait == 0) {
		lease, err = lk.TryAcquire(ctx, resource, f.ttl)
		return lease, false, err
	}
	wctx := ctx
	if waitSet {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeoutCause(ctx, f.wait, errWaitTimeout)
		defer cancel()
	}
	st := &waitStatus{a: a, resource: resource}
	if isTerminal(a.errFile) {
		st.tty = a.errFile
	}
	defer st.clear()
	lease, err = lk.Acquire(wctx, resource, f.ttl, tenure.OnWait(st.update))
	return lease, err != nil && errors.Is(context.Cause(wctx), errWaitTimeout), err
}

// notAcquired turns a failed acquire into an exit code and a message.
func (a *app) notAcquired(store driver.Store, resource string, f *runFlags, timedOut bool, err error) error {
	var held *tenure.HeldError
	if errors.As(err, &held) {
		msg := describeHolder(held.Holder)
		if timedOut {
			msg += "; gave up after waiting " + fmtDur(f.wait)
		}
		return fail(exitNotAcquired, "%s", msg)
	}
	if timedOut {
		// The wait ran out during a store call: say who holds it if the store
		// answers quickly.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if rec, gerr := store.Get(ctx, resource); gerr == nil {
			return fail(exitNotAcquired, "%s; gave up after waiting %s", describeHolder(rec), fmtDur(f.wait))
		}
		return fail(exitNotAcquired, "%s was not acquired within %s", quoteName(resource), fmtDur(f.wait))
	}
	return storeErr(err, "run: acquire %s", quoteName(resource))
}

// waitStatus shows who holds the lease while run waits: a status line
// updated in place when stderr is a terminal, and an info log line for each
// new holder.
type waitStatus struct {
	a        *app
	resource string
	tty      *os.File
	shown    bool
	last     tenure.Record
}

func (w *waitStatus) update(h *tenure.HeldError, waited time.Duration) {
	rec := h.Holder
	if rec.Owner != w.last.Owner || rec.Token != w.last.Token {
		w.clear()
		w.a.log.Info("resource is held; waiting", "resource", w.resource, "holder", rec.Owner, "token", rec.Token, "left", rec.Remaining)
		w.last = rec
	}
	if w.tty == nil {
		return
	}
	line := fmt.Sprintf("tenure: waiting %s: %s", waited.Truncate(time.Second), describeHolder(rec))
	if width := terminalWidth(w.tty); width > 1 && utf8.RuneCountInString(line) > width-1 {
		r := []rune(line)
		line = string(r[:width-2]) + "…"
	}
	fmt.Fprintf(w.tty, "\r\x1b[K%s", line)
	w.shown = true
}

func (w *waitStatus) clear() {
	if w.shown {
		fmt.Fprint(w.tty, "\r\x1b[K")
		w.shown = false
	}
}

// release frees the lease, bounded by tenure.DefaultReleaseTimeout and not
// by any cancelled context. A release that the store did not confirm prints
// a warning; it never changes the exit status.
func (a *app) release(lease *tenure.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), tenure.DefaultReleaseTimeout)
	defer cancel()
	err := lease.Release(ctx)
	switch {
	case err == nil:
		a.log.Info("lease released", "resource", lease.Resource(), "token", lease.Token())
	case errors.Is(err, tenure.ErrLeaseLost):
		a.log.Info("lease already gone at release", "resource", lease.Resource(), "token", lease.Token(), "err", err)
	default:
		msg := errText(err)
		if !strings.Contains(msg, "will expire by its TTL") {
			msg += fmt.Sprintf("; it will expire by its TTL (%s)", fmtDur(lease.TTL()))
		}
		fmt.Fprintf(a.stderr, "tenure: warning: could not release %s: %s\n", quoteName(lease.Resource()), msg)
	}
}

// commandEnv returns env with the lease's variables set.
func commandEnv(env []string, lease *tenure.Lease) []string {
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		if strings.HasPrefix(kv, "TENURE_RESOURCE=") || strings.HasPrefix(kv, "TENURE_OWNER=") || strings.HasPrefix(kv, "TENURE_TOKEN=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out,
		"TENURE_RESOURCE="+lease.Resource(),
		"TENURE_OWNER="+lease.Owner(),
		"TENURE_TOKEN="+strconv.FormatUint(lease.Token(), 10),
	)
}

// runCommand runs argv while the lease is held and returns the exit code to
// use (see runLong).
func (a *app) runCommand(lease *tenure.Lease, argv []string, f *runFlags, sigCh <-chan os.Signal) error {
	out, err := a.supervise("run", lease, argv, f.grace, sigCh)
	if err != nil {
		a.release(lease)
		return err
	}
	if out.lost != nil {
		return exitWith(exitLost)
	}
	a.release(lease)
	return exitWith(out.code)
}

func (a *app) signal(pgid int, sig syscall.Signal) {
	if err := signalGroup(pgid, sig); err != nil {
		fmt.Fprintf(a.stderr, "tenure: warning: cannot send %s to the command's process group %d: %v\n", signalName(sig), pgid, err)
	}
}

// exitCode returns the command's exit status, or 128+N when signal N killed
// it.
func exitCode(cmd *exec.Cmd, waitErr error) int {
	ps := cmd.ProcessState
	if ps == nil {
		return exitSoftware
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	if c := ps.ExitCode(); c >= 0 {
		return c
	}
	return exitSoftware
}

func describeExit(cmd *exec.Cmd, waitErr error) string {
	if cmd.ProcessState != nil {
		return cmd.ProcessState.String()
	}
	if waitErr != nil {
		return waitErr.Error()
	}
	return "unknown"
}
