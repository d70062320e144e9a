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
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/store"
)

type runFlags struct {
	leaseFlags
	wait        time.Duration
	noWait      bool
	slots       int
	holdAtLeast time.Duration
	shared      bool
	exclusive   bool
}

const runLong = `Acquire the lease on RESOURCE, run COMMAND while holding it, and release
it when COMMAND exits: at most one "tenure run" per resource runs its
command at a time, across every process that uses the store (with --slots
N, at most N; with --shared, any number of --shared runs at once, never
beside an exclusive one, the default). run waits for the lease as long as
it takes, unless --wait or --no-wait says otherwise.

COMMAND runs directly (no shell) in a process group of its own, with
TENURE_RESOURCE, TENURE_OWNER and TENURE_TOKEN (the fencing token: pass it
to what the command writes to) in its environment, and TENURE_SLOT with
--slots. It starts only while the lease has at least its renew window
(about two thirds of the TTL) left. If
renewals fail or the lease is lost, the command is stopped (SIGTERM, then
SIGKILL after --grace) before the lease's deadline, and tenure exits 79;
otherwise it exits with the command's status. A resource name that starts
with "-" goes after --: tenure run -- -name -- COMMAND.

More: tenure help signals, exit-codes, cron, environment, stores.`

const runExample = `  # Run the nightly backup; wait while another backup holds the lease.
  tenure run nightly-backup -- /usr/local/bin/backup --full

  # Give up at once if someone else holds it (exit code 75).
  tenure run --no-wait reindex -- ./reindex.sh --all

  # Wait at most five minutes; a 2-minute TTL survives short store outages.
  tenure run --wait 5m --ttl 2m db-migrate -- ./migrate up

  # Readers share the lease; the writer waits for them and holds it alone.
  tenure run --shared reports -- ./read-reports
  tenure run reports -- ./rebuild-reports

  # At most 3 backups at once across the fleet; $TENURE_SLOT is 1, 2 or 3.
  tenure run --slots 3 backups -- /usr/local/bin/backup --part "$HOSTNAME"

  # Once a minute across every host whose crontab has it (tenure help cron).
  * * * * *  tenure run --no-wait --hold-at-least 50s minutely-report -- /usr/local/bin/report

  # A shell for pipes and redirections; the token fences the writes.
  tenure run report -- sh -c 'make-report --token "$TENURE_TOKEN" > /srv/report.html'

  # A resource name that starts with "-".
  tenure run -- -odd-name -- ./job`

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
	addLeaseFlags(c, &f.leaseFlags, 30*time.Second, "owner")
	fl := c.Flags()
	fl.DurationVar(&f.wait, "wait", 0, "wait at most this long (default: no limit)")
	fl.BoolVar(&f.noWait, "no-wait", false, "exit 75 at once if the lease is held")
	fl.IntVar(&f.slots, "slots", 0, fmt.Sprintf("a semaphore of N slots (1 to %d)", tenure.MaxSlots))
	fl.DurationVar(&f.holdAtLeast, "hold-at-least", 0, "keep the lease this long (tenure help cron)")
	fl.BoolVar(&f.shared, "shared", false, "hold RESOURCE shared with other --shared runs")
	fl.BoolVar(&f.exclusive, "exclusive", false, "hold RESOURCE alone (the default)")
	return c
}

// errWaitTimeout is the cause of the wait context when --wait runs out.
var errWaitTimeout = errors.New("--wait ran out")

// validateRun checks every argument before any I/O.
func validateRun(c *cobra.Command, f *runFlags, args []string) (resource string, argv []string, ownerID string, err error) {
	resource, argv, ownerID, err = validateCommand("run", c, args, &f.leaseFlags)
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
	case f.shared && f.exclusive:
		return "", nil, "", usage("run: --shared and --exclusive cannot be used together")
	case f.slots > 0 && (f.shared || f.exclusive):
		return "", nil, "", usage("run: --slots cannot be used with --shared or --exclusive: a semaphore's holders share it by its number of slots")
	}
	if f.shared {
		if err := driver.ValidateResource(naming.SharedName(resource, strings.Repeat("0", 16))); err != nil {
			return "", nil, "", usage("run: --shared: the shared holders of %s hold leases named %s, which is not a valid name: %s",
				quoteName(resource), quoteName(naming.SharedName(resource, "<16 hex digits>")), errText(err))
		}
	}
	if f.slots > 0 {
		if err := driver.ValidateResource(naming.SlotName(resource, f.slots, f.slots)); err != nil {
			return "", nil, "", usage("run: --slots %d: the slots of %s are leases named %s, which is not a valid name: %s",
				f.slots, quoteName(resource), quoteName(naming.SlotName(resource, f.slots, f.slots)), errText(err))
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

	lk, err := tenure.New(st, a.lockerOptions(ownerID)...)
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
	rw, err := lk.RWLock(resource)
	if err != nil {
		// A name too long for shared holders' leases can have none: the
		// plain lease is exclusive.
		if once {
			lease, err = lk.TryAcquire(wctx, resource, f.ttl)
			return lease, 0, false, err
		}
		lease, err = lk.Acquire(wctx, resource, f.ttl, tenure.OnWait(st.update))
		return lease, 0, err != nil && errors.Is(context.Cause(wctx), errWaitTimeout), err
	}
	switch {
	case f.shared && once:
		lease, err = rw.TryAcquireShared(wctx, f.ttl)
	case f.shared:
		lease, err = rw.AcquireShared(wctx, f.ttl, tenure.OnWait(st.update))
	case once:
		lease, err = rw.TryAcquireExclusive(wctx, f.ttl)
	default:
		lease, err = rw.AcquireExclusive(wctx, f.ttl, tenure.OnWait(st.update), tenure.OnSharedWait(st.updateShared))
	}
	return lease, 0, err != nil && !once && errors.Is(context.Cause(wctx), errWaitTimeout), err
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
	var shared *tenure.SharedHeldError
	if errors.As(err, &shared) {
		return fail(exitNotAcquired, "%s%s", describeSharedHeld(shared), gaveUp)
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
		slot, _, _ := naming.ParseSlotName(h.Resource)
		fmt.Fprintf(&b, " slot %d by %s (%s", slot, quoteName(h.Owner), tokenText(h.Token))
		if h.Remaining > 0 {
			fmt.Fprintf(&b, ", %s left", fmtDur(h.Remaining))
		}
		b.WriteString(")")
	}
	return b.String()
}

// describeSharedHeld says that RESOURCE has shared holders, and which;
// the names come from the store and are quoted.
func describeSharedHeld(e *tenure.SharedHeldError) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s has %d shared holder", quoteName(e.Resource), len(e.Holders))
	if len(e.Holders) != 1 {
		b.WriteString("s")
	}
	b.WriteString(":")
	for i, h := range e.Holders {
		if i == maxHoldersShown {
			fmt.Fprintf(&b, ", and %d more", len(e.Holders)-i)
			break
		}
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s", quoteName(h.Owner))
		if h.Remaining > 0 {
			fmt.Fprintf(&b, " (%s left)", fmtDur(h.Remaining))
		}
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

func (w *waitStatus) updateShared(h *tenure.SharedHeldError, waited time.Duration) {
	var key strings.Builder
	for _, r := range h.Holders {
		fmt.Fprint(&key, r.Resource, r.Owner, ";")
	}
	if key.String() != w.last {
		w.clear()
		w.a.log.Info("shared holders hold the resource; holding it for the exclusive run, waiting for them to end", "resource", w.resource, "shared_holders", len(h.Holders))
		w.last = key.String()
	}
	w.show(waited, describeSharedHeld(h))
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
