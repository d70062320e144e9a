package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store"
)

type runFlags struct {
	ttl         time.Duration
	wait        time.Duration
	noWait      bool
	grace       time.Duration
	owner       string
	slots       int
	holdAtLeast time.Duration
}

const runLong = `Run acquires the lease on RESOURCE, runs COMMAND while holding it, and
releases it when COMMAND exits. At most one "tenure run" per resource runs
its command at a time, across every process that uses the same store; with
--slots N, at most N.

By default run waits for the lease as long as it takes, like flock(1);
--wait bounds the wait and --no-wait makes a single attempt. While it waits
on a terminal, a status line shows who holds the lease. SIGINT, SIGTERM,
SIGHUP or SIGQUIT while waiting stop the wait; if tenure had asked the store
for the lease at that moment, it finds out whether it got it and frees it
before it exits (within 5s), so a stopped tenure never keeps the lease.

COMMAND is looked up (in $PATH unless it contains a slash) before the lease
is acquired: a command that does not exist or cannot be executed is exit
code 127 or 126 at once. It is executed directly, not through a shell, in
its own process group, with stdin, stdout and stderr passed through, and
with these variables added to its environment:

  TENURE_RESOURCE  the resource name
  TENURE_OWNER     the grant's owner string: the --owner id, "#", a random nonce, ".", and the grant's number
  TENURE_TOKEN     the fencing token, a number that grows with every grant
  TENURE_SLOT      with --slots N: the slot held, 1 to N

Pass TENURE_TOKEN to what the command writes to when it can, so that a late
write from a holder that lost its lease can be rejected.

A resource name that starts with "-" goes after "--", with a second "--"
before the command: tenure run -- -name -- COMMAND.

The command starts only while the lease is live with at least half its TTL
left; tenure renews it first if needed. The TTL must be at least 1s: the
lease is renewed every TTL/3, each renewal a round trip to the store.

On a terminal, the command's process group gets the terminal's foreground,
so an interactive command can read from it and Ctrl-C reaches it directly.
Ctrl-Z stops the command and tenure together, as one job; the lease is not
renewed while tenure is stopped, so a stop longer than the TTL loses it.

While the command runs, SIGINT, SIGTERM and SIGHUP sent to tenure are passed
on to the command's process group, and if the command has not exited
--grace later, its group gets SIGKILL. SIGQUIT, SIGUSR1 and SIGUSR2 are
passed on too, and nothing else happens.

When the command exits, tenure makes sure nothing of its process group runs
on: processes the command left in its group (background jobs of a shell
script, which ignore SIGINT) get SIGTERM, then SIGKILL after --grace. Only
then does tenure release the lease, and it exits with the command's exit
status. If the release cannot be confirmed, tenure warns that the lease will
expire by its TTL, and still exits with the command's status. Processes
that left the group (setsid, daemons) are not found: run tenure under a
service manager that stops the whole cgroup (systemd) to cover those. If
tenure itself is killed (SIGKILL, a crash), a small reaper process kills the
command's group at once (Linux); if tenure is stopped (SIGSTOP), frozen or
starved of CPU, the reaper kills the group just before the lease's deadline
(a twentieth of the TTL before it), and the command starts only once the
reaper is armed: if the reaper cannot be started, the command does not
run (exit 71), and if it exits while the command runs, the command is
stopped with SIGKILL (exit 79).

Nothing of the command runs past the lease's deadline, after which another
host may be granted the lease. When renewals are not getting through and
the time left falls below --grace (or a third of the TTL, if that is less),
the command's process group gets SIGTERM; if the lease is then lost at its
deadline, the group gets SIGKILL at once. If the lease is lost otherwise
(an operator freed it with "tenure release --force", or another owner took
it), tenure says why, sends SIGTERM to the command's process group, then
SIGKILL after --grace or at the lease's deadline, whichever comes first.
Either way tenure exits with 79 whatever the command returned: the command
can no longer rely on holding the lease. A lease found
gone when tenure releases it after the command finished is lost as well
(79). With PostgreSQL, Redis and etcd, which tell tenure when a lease is
freed, the command is stopped within about a second of such a release; with
SQLite and Cassandra, at the next renewal (within TTL/3).

--slots N makes RESOURCE a semaphore of N slots: the command runs when one
of the N slots is free. Each slot is a lease of its own, named
RESOURCE/slot-I-of-N in "tenure list", with its own fencing tokens; every
holder of RESOURCE must use the same N.

--hold-at-least D keeps the lease for at least D after it was granted, even
when the command finishes sooner (however it ended): tenure then stops
renewing it and has the store keep it for the rest of D, and exits with the
command's status at once. A job started by cron on several hosts whose
clocks differ by a few seconds then runs once per tick (see the example):
a host that starts it a little later finds the lease held (exit 75). D must
be a TTL the store accepts.

Exit codes:
  0-125  the command's own exit status (it may itself exit with a code below)
  64     bad arguments or input (a TTL below 1s or beyond what the store can
         keep, holders of RESOURCE started with another --slots); nothing
         was written to the store
  69     the store cannot be opened or reached, or does not renew the lease
         fast enough for --ttl (then the command did not run)
  70     internal error
  71     the reaper that stops the command if tenure dies or stalls could
         not be started (a limit on processes or open files): the command
         did not run
  74     tenure could not write to its standard output (--help)
  75     the lease is held by another owner (--no-wait, or --wait ran out);
         the holder is printed (with --slots: every slot is held; the
         holders are printed)
  79     the lease was lost while the command ran (or was found gone when
         tenure released it), or before the command could start (then the
         command did not run), or the reaper guarding the command exited
         while it ran (the command was stopped)
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

  # At most 3 backups at once across the fleet; $TENURE_SLOT is 1, 2 or 3.
  tenure run --slots 3 backups -- /usr/local/bin/backup --part "$HOSTNAME"

  # In the crontab of every host: once per minute across all of them, even
  # if their clocks differ by a few seconds (75: another host ran it).
  * * * * *  tenure run --no-wait --hold-at-least 50s minutely-report -- /usr/local/bin/report

  # Use a shell for pipes and redirections; the token fences the writes.
  tenure run report -- sh -c 'make-report --token "$TENURE_TOKEN" > /srv/report.html'

  # A resource name that starts with "-".
  tenure run -- -odd-name -- ./job

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
	fl.DurationVar(&f.ttl, "ttl", 30*time.Second, "lease TTL, at least 1s: how long the lease outlives a holder that stops renewing it")
	fl.DurationVar(&f.wait, "wait", 0, "wait at most this long for the lease, then exit 75; 0 makes one attempt (default: wait as long as it takes)")
	fl.BoolVar(&f.noWait, "no-wait", false, "make one attempt; exit 75 at once if the lease is held")
	fl.DurationVar(&f.grace, "grace", 10*time.Second, "time between SIGTERM (or the signal passed on) and SIGKILL to the command's process group, after the lease is lost, after tenure is told to stop, and for processes the command left behind")
	fl.StringVar(&f.owner, "owner", "", `readable owner id, such as "backup@web-3" (default HOST:PID)`)
	fl.IntVar(&f.slots, "slots", 0, fmt.Sprintf("run when one of this many slots of RESOURCE is free (a semaphore, 1 to %d); every holder must use the same number", tenure.MaxSlots))
	fl.DurationVar(&f.holdAtLeast, "hold-at-least", 0, "keep the lease at least this long after it was granted, even if the command finishes sooner (cron jobs on several hosts)")
	return c
}

// errWaitTimeout is the cause of the wait context when --wait runs out.
var errWaitTimeout = errors.New("--wait ran out")

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
	case c.Flags().Changed("slots") && (f.slots < 1 || f.slots > tenure.MaxSlots):
		return "", nil, "", usage("run: --slots %d: the number of slots must be 1 to %d", f.slots, tenure.MaxSlots)
	case f.holdAtLeast < 0:
		return "", nil, "", usage("run: --hold-at-least %v: cannot be negative", f.holdAtLeast)
	}
	if f.slots > 0 {
		if err := driver.ValidateResource(tenure.SlotName(resource, f.slots, f.slots)); err != nil {
			return "", nil, "", usage("run: --slots %d: the slots of %s are leases named %s, which is not a valid name: %s",
				f.slots, quoteName(resource), quoteName(tenure.SlotName(resource, f.slots, f.slots)), errText(err))
		}
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
	if f.holdAtLeast > 0 {
		if err := u.CheckTTL(f.holdAtLeast); err != nil {
			return usage("run: --hold-at-least %v: the store keeps the lease for the rest of it as a TTL, and cannot keep this one: %s", f.holdAtLeast, errText(err))
		}
	}
	path, err := lookCommand("run", argv[0])
	if err != nil {
		return err
	}

	// From here on SIGINT, SIGTERM, SIGHUP and SIGQUIT are tenure's to
	// handle: they stop the wait, and are passed on to the command once it
	// runs, as are SIGUSR1 and SIGUSR2.
	sigCh := make(chan os.Signal, 16)
	signal.Notify(sigCh, forwardedSignals...)
	defer signal.Stop(sigCh)
	ctx, stopWatch := a.watchSignals(sigCh)
	interrupted := func(s os.Signal) error {
		return fail(exitSignalBase+signalNumber(s), "stopped waiting for %s: received %s", quoteName(resource), signalName(s))
	}

	st, err := a.openStore(ctx, u, false)
	if err != nil {
		if s := stopWatch(); s != nil {
			return interrupted(s)
		}
		return err
	}
	defer st.Close()

	// WithReleaseWatch: on stores that announce releases, a lease freed or
	// taken by someone else ends within a round trip, and the command is
	// stopped then, not at the next renewal.
	lk, err := tenure.New(st, tenure.WithOwnerID(ownerID), tenure.WithLogger(a.libraryLog()), tenure.WithReleaseWatch())
	if err != nil {
		stopWatch()
		return fail(exitSoftware, "run: %s", errText(err))
	}
	// Every way out of run closes the Locker, bounded: an acquire that a
	// signal interrupted after it was sent is resolved and what it may have
	// taken is freed before tenure exits.
	defer a.closeLocker(lk, resource, f.ttl)

	lease, slot, timedOut, err := a.acquire(ctx, lk, resource, f, c.Flags().Changed("wait"))
	granted := time.Now()
	if s := stopWatch(); s != nil {
		if lease != nil {
			a.release(lease)
		}
		return interrupted(s)
	}
	if err != nil {
		return a.notAcquired(st, resource, f, timedOut, err)
	}
	a.log.Info("lease acquired", "resource", lease.Resource(), "owner", lease.Owner(), "token", lease.Token(), "ttl", f.ttl)
	cmd := command{name: "run", resource: resource, slot: slot, path: path, argv: argv, grace: f.grace}
	return a.runCommand(cmd, lease, f, u, granted, sigCh)
}

// acquire gets the lease (with --slots, a slot's): one attempt with
// --no-wait (or --wait 0), else a blocking acquire bounded by --wait.
// timedOut reports that --wait ran out.
func (a *app) acquire(ctx context.Context, lk *tenure.Locker, resource string, f *runFlags, waitSet bool) (lease *tenure.Lease, slot int, timedOut bool, err error) {
	once := f.noWait || (waitSet && f.wait == 0)
	wctx := ctx
	if waitSet && !once {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeoutCause(ctx, f.wait, errWaitTimeout)
		defer cancel()
	}
	st := &waitStatus{a: a, resource: resource}
	if isTerminal(a.errFile) {
		st.tty = a.errFile
	}
	defer st.clear()
	if f.slots > 0 {
		sem, err := lk.Semaphore(resource, f.slots)
		if err != nil {
			return nil, 0, false, usage("run: --slots %d: %s", f.slots, errText(err))
		}
		var sl *tenure.SlotLease
		if once {
			sl, err = sem.TryAcquire(wctx, f.ttl)
		} else {
			sl, err = sem.Acquire(wctx, f.ttl, tenure.OnSlotsWait(st.updateSlots))
		}
		if err != nil {
			return nil, 0, err != nil && errors.Is(context.Cause(wctx), errWaitTimeout), err
		}
		return sl.Lease, sl.Slot, false, nil
	}
	if once {
		lease, err = lk.TryAcquire(wctx, resource, f.ttl)
		return lease, 0, false, err
	}
	lease, err = lk.Acquire(wctx, resource, f.ttl, tenure.OnWait(st.update))
	return lease, 0, err != nil && errors.Is(context.Cause(wctx), errWaitTimeout), err
}

// notAcquired turns a failed acquire into an exit code and a message.
func (a *app) notAcquired(st driver.Store, resource string, f *runFlags, timedOut bool, err error) error {
	gaveUp := ""
	if timedOut {
		gaveUp = "; gave up after waiting " + fmtDur(f.wait)
	}
	var slots *tenure.SlotsHeldError
	if errors.As(err, &slots) {
		return fail(exitNotAcquired, "%s%s", describeSlotsHeld(slots), gaveUp)
	}
	if errors.Is(err, tenure.ErrSlotsMismatch) {
		return fail(exitSlotsMismatch, "run: --slots %d: %s", f.slots, errText(err))
	}
	var held *tenure.HeldError
	if errors.As(err, &held) {
		return fail(exitNotAcquired, "%s%s", describeHolder(held.Holder), gaveUp)
	}
	if timedOut {
		// The wait ran out during a store call: say who holds it if the store
		// answers quickly.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if f.slots > 0 {
			return fail(exitNotAcquired, "no slot of %s was acquired within %s", quoteName(resource), fmtDur(f.wait))
		}
		if rec, gerr := st.Get(ctx, resource); gerr == nil {
			return fail(exitNotAcquired, "%s%s", describeHolder(rec), gaveUp)
		}
		return fail(exitNotAcquired, "%s was not acquired within %s", quoteName(resource), fmtDur(f.wait))
	}
	return storeErr(err, "run: acquire %s", quoteName(resource)) // errText drops the Locker's and the store's own "acquire ...: "
}

// maxHoldersShown bounds the holders named in one message.
const maxHoldersShown = 10

// describeSlotsHeld says that every slot is held, and by whom; the names
// come from the store and are quoted.
func describeSlotsHeld(e *tenure.SlotsHeldError) string {
	var b strings.Builder
	fmt.Fprintf(&b, "all %d slots of %s are held:", e.Slots, quoteName(e.Resource))
	for i, h := range e.Holders {
		if i == maxHoldersShown {
			fmt.Fprintf(&b, ", and %d more", len(e.Holders)-i)
			break
		}
		if i > 0 {
			b.WriteString(",")
		}
		slot, _, _ := tenure.ParseSlotName(h.Resource)
		fmt.Fprintf(&b, " slot %d by %s (%s", slot, quoteName(h.Owner), tokenText(h.Token))
		if h.Remaining > 0 {
			fmt.Fprintf(&b, ", %s left", fmtDur(h.Remaining))
		}
		b.WriteString(")")
	}
	return b.String()
}

func tokenText(t uint64) string {
	if t == 0 {
		return "no fencing token"
	}
	return fmt.Sprintf("token %d", t)
}

// waitStatus shows who holds the lease while run waits: a status line
// updated in place when stderr is a terminal, and an info log line for each
// new holder.
type waitStatus struct {
	a        *app
	resource string
	tty      *os.File
	shown    bool
	last     string // the holders last logged
}

func (w *waitStatus) update(h *tenure.HeldError, waited time.Duration) {
	rec := h.Holder
	if key := fmt.Sprint(rec.Owner, rec.Token); key != w.last {
		w.clear()
		w.a.log.Info("resource is held; waiting", "resource", w.resource, "holder", rec.Owner, "token", rec.Token, "left", rec.Remaining)
		w.last = key
	}
	w.show(waited, describeHolder(rec))
}

func (w *waitStatus) updateSlots(h *tenure.SlotsHeldError, waited time.Duration) {
	var key strings.Builder
	for _, r := range h.Holders {
		fmt.Fprint(&key, r.Resource, r.Owner, r.Token, ";")
	}
	if key.String() != w.last {
		w.clear()
		w.a.log.Info("every slot is held; waiting", "resource", w.resource, "slots", h.Slots, "holders", len(h.Holders))
		w.last = key.String()
	}
	w.show(waited, describeSlotsHeld(h))
}

func (w *waitStatus) show(waited time.Duration, what string) {
	if w.tty == nil {
		return
	}
	line := oneLine(fmt.Sprintf("waiting %s: %s", waited.Truncate(time.Second), what))
	line = "tenure: " + line
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
// by any cancelled context, and returns the store's answer. A release that
// the store did not confirm prints a warning.
func (a *app) release(lease *tenure.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), tenure.DefaultReleaseTimeout)
	defer cancel()
	err := lease.Release(ctx)
	switch {
	case err == nil:
		a.log.Info("lease released", "resource", lease.Resource(), "token", lease.Token())
	case errors.Is(err, tenure.ErrLeaseLost), errors.Is(err, tenure.ErrReleased):
		a.log.Info("lease already gone at release", "resource", lease.Resource(), "token", lease.Token(), "err", err)
	default:
		msg := errText(err)
		if !strings.Contains(msg, "will expire by its TTL") {
			msg += fmt.Sprintf("; it will expire by its TTL (%s)", fmtDur(lease.TTL()))
		}
		a.errorf("warning: could not release %s: %s", quoteName(lease.Resource()), msg)
	}
	return err
}

// lostAtRelease reports whether err, from a release (or ReleaseAfter) made
// after the command exited while the lease was trusted, means that the
// store no longer had this grant: it was freed (an operator's forced
// release) or expired in the store and maybe taken, while the command ran.
// A lease that only passed its local deadline after the command exited is
// not lost for the command, which finished while it was trusted.
func lostAtRelease(err error) bool {
	if !errors.Is(err, tenure.ErrLeaseLost) || errors.Is(err, tenure.ErrInvalidTTL) {
		return false
	}
	var le *tenure.LostError
	if errors.As(err, &le) {
		return errors.Is(le.Reason, tenure.ErrNotHolder)
	}
	return true
}

// runCommand runs the command while the lease is held, then releases the
// lease (or, with --hold-at-least, keeps it for the rest of that time) and
// returns the exit code to use (see runLong).
func (a *app) runCommand(cmd command, lease *tenure.Lease, f *runFlags, u *store.URL, granted time.Time, sigCh <-chan os.Signal) error {
	out, err := a.supervise(cmd, lease, sigCh)
	if err != nil {
		return err // the Locker's Close frees the lease
	}
	if out.lost != nil {
		return exitWith(exitLost)
	}
	var rerr error
	if rest := f.holdAtLeast - time.Since(granted); f.holdAtLeast > 0 && rest > 0 {
		rerr = a.keep(lease, rest, u)
	} else {
		rerr = a.release(lease)
	}
	if rerr != nil && lostAtRelease(rerr) {
		a.errorf("%s was lost while the command ran: the store no longer had it when tenure released it after the command exited (it was freed by someone else, or expired in the store); exit %d instead of the command's %d",
			describeLease(lease), exitLost, out.code)
		return exitWith(exitLost)
	}
	if out.stopped != nil && out.signal == nil {
		a.errorf("tenure stopped the command (%s): exit %d instead of the command's %d", out.stopped, exitLost, out.code)
		return exitWith(exitLost)
	}
	return exitWith(out.code)
}

// keep ends the lease but has the store keep it for rest (--hold-at-least),
// rounded up to a whole second on stores that keep whole seconds, and
// returns the store's answer. When the store cannot keep it, the lease is
// released as usual.
func (a *app) keep(lease *tenure.Lease, rest time.Duration, u *store.URL) error {
	d := rest
	if u.CheckTTL(d) != nil {
		if up := d.Truncate(time.Second) + time.Second; u.CheckTTL(up) == nil {
			d = up
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), tenure.DefaultReleaseTimeout)
	defer cancel()
	err := lease.ReleaseAfter(ctx, d)
	switch {
	case err == nil:
		a.log.Info("command done; the lease stays held for the rest of --hold-at-least", "resource", lease.Resource(), "token", lease.Token(), "for", d)
	case errors.Is(err, tenure.ErrInvalidTTL):
		a.log.Info("the store cannot keep the lease that briefly; releasing it", "resource", lease.Resource(), "rest", d, "err", err)
		return a.release(lease)
	case lostAtRelease(err):
	default:
		a.errorf("warning: could not keep %s for the rest of --hold-at-least (%s): %s", quoteName(lease.Resource()), fmtDur(d), errText(err))
	}
	return err
}
