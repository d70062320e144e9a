package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/election"
	"github.com/tenure-go/tenure/internal/naming"
)

type electFlags struct {
	leaseFlags
	retry time.Duration
	value string
}

const electLong = `Run COMMAND on one host at a time: every "tenure elect" with the same
RESOURCE and store is a candidate, and only the leader, the candidate that
holds the lease on RESOURCE, runs COMMAND. Followers try to take the lease
every --retry. A leader that dies is replaced within the TTL plus --retry;
one that is stopped or whose command exits, within one --retry.

COMMAND runs as with "tenure run", with TENURE_TOKEN the fencing token of
the term. When leadership is lost (renewals fail, an operator frees the
lease), tenure stops the command before the lease's deadline and campaigns
again. When COMMAND exits by itself, tenure releases the lease and exits
with its status, and another candidate starts it; run tenure elect under a
service manager that restarts it to keep the host a candidate. A resource
name that starts with "-": tenure elect -- -name -- COMMAND.

More: tenure help signals, exit-codes, environment; docs/election.md.`

const electExample = `  # On every host: run the sampling-rate calculator on exactly one of them.
  tenure --store 'cassandra://db1,db2,db3/tenure' elect sampling-calculator -- /usr/local/bin/calc-rates

  # A takeover within 5s plus 1s after the leader dies; 3s to stop on loss.
  tenure elect --ttl 5s --retry 1s --grace 3s --owner "$(hostname)" report-mailer -- ./mailer

  # The fencing token of the term, for the writes of the command.
  tenure elect compactor -- sh -c 'exec compact --fencing-token "$TENURE_TOKEN"'`

func (a *app) newElectCmd() *cobra.Command {
	var f electFlags
	c := &cobra.Command{
		Use:     "elect [flags] RESOURCE -- COMMAND [ARGS...]",
		Short:   "Run a command on the elected leader only",
		Long:    electLong,
		Example: electExample,
		Args:    cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return a.elect(c, &f, args)
		},
	}
	addLeaseFlags(c, &f.leaseFlags, election.DefaultTTL, "candidate")
	fl := c.Flags()
	fl.DurationVar(&f.retry, "retry", election.DefaultRetryPeriod, "how often a follower tries to lead")
	fl.StringVar(&f.value, "value", "", `value published while leading, such as "10.0.0.5:8080" (at most 128 printable bytes)`)
	return c
}

func validateElect(c *cobra.Command, f *electFlags, args []string) (resource string, argv []string, ownerID string, err error) {
	resource, argv, ownerID, err = validateCommand("elect", c, args, &f.leaseFlags)
	if err != nil {
		return "", nil, "", err
	}
	if f.retry <= 0 {
		return "", nil, "", usage("elect: --retry %v: the retry period must be positive, such as 2s", f.retry)
	}
	if _, err := naming.CandidateID(ownerID, f.value); err != nil {
		return "", nil, "", usage("elect: --owner %s --value %s: %s", quoteName(ownerID), quoteName(f.value), errText(err))
	}
	return resource, argv, ownerID, nil
}

func (a *app) elect(c *cobra.Command, f *electFlags, args []string) error {
	resource, argv, ownerID, err := validateElect(c, f, args)
	if err != nil {
		return err
	}
	u, err := a.parseStoreForTTL("elect", f.ttl)
	if err != nil {
		return err
	}
	path, err := lookCommand("elect", argv[0])
	if err != nil {
		return err
	}

	// From here on SIGINT, SIGTERM, SIGHUP and SIGQUIT are tenure's to
	// handle: they end the campaign, and are passed on to the command while
	// it runs, as are SIGUSR1 and SIGUSR2.
	sigCh := make(chan os.Signal, 16)
	signal.Notify(sigCh, forwardedSignals...)
	defer signal.Stop(sigCh)
	e := &elector{a: a, f: f, resource: resource, path: path, argv: argv, sigCh: sigCh}

	// Open the store: a store that cannot be reached at start is exit code
	// 69, as for tenure run.
	ctx, stopWatch := a.watchSignals(sigCh)
	store, err := a.openStore(ctx, u, false)
	if err != nil {
		if s := stopWatch(); s != nil {
			return e.interrupted(s)
		}
		return err
	}
	defer store.Close()

	e.st = &followStatus{a: a, resource: resource, self: ownerID, since: time.Now(), notify: make(chan struct{}, 1)}
	if isTerminal(a.errFile) {
		e.st.tty = a.errFile
	}
	defer e.st.clear()

	cand, err := e.newCandidate(store, ownerID)
	if err != nil {
		stopWatch()
		return storeErr(err, "elect")
	}
	// Every way out of elect closes the candidate, bounded: a campaign
	// attempt that a signal interrupted after it was sent is resolved and
	// what it may have taken is freed before tenure exits.
	defer a.closeLocker(cand, resource, f.ttl)

	if err := e.readLeader(ctx, store, stopWatch); err != nil {
		return err
	}
	e.campaign(cand)
	defer e.stopCampaign()
	return e.loop()
}

// elector is tenure elect once its store is open: loop handles each event
// of the campaign (a signal, a term won, a new leader seen, the campaign's
// end) with one method each, and the fields are the state they share.
type elector struct {
	a        *app
	f        *electFlags
	resource string
	path     string // the command's executable, as lookCommand found it
	argv     []string
	sigCh    chan os.Signal
	st       *followStatus

	starts       chan *tenure.Lease // each term's lease, from OnStartedLeading
	runDone      chan error         // the candidate's Run returned
	stopCampaign context.CancelFunc // ends Run's context
}

// interrupted is the exit error of a campaign that signal s ended.
func (e *elector) interrupted(s os.Signal) error {
	return fail(exitSignalBase+signalNumber(s), "stopped campaigning for %s: received %s", quoteName(e.resource), signalName(s))
}

// newCandidate makes the candidate. OnStartedLeading hands each term's
// lease to loop; a term that ends before loop takes it is dropped. New
// validates the whole configuration without I/O, before the leader is
// read.
func (e *elector) newCandidate(store driver.Store, ownerID string) (*election.Candidate, error) {
	e.starts = make(chan *tenure.Lease)
	starts := e.starts
	return election.New(store, election.Config{
		Resource:    e.resource,
		Identity:    ownerID,
		Value:       e.f.value,
		TTL:         e.f.ttl,
		RetryPeriod: e.f.retry,
		OnStartedLeading: func(term context.Context) {
			l := tenure.LeaseFromContext(term)
			select {
			case starts <- l:
			case <-term.Done():
			}
		},
		OnNewLeader: e.st.observe,
	}, e.a.lockerOptions(ownerID)...)
}

// readLeader reads the current leader, for the status line, and ends the
// watch of signals that stopWatch ends: a signal received meanwhile ends
// elect.
func (e *elector) readLeader(ctx context.Context, store driver.Store, stopWatch func() os.Signal) error {
	gctx, cancel := context.WithTimeout(ctx, storeTimeout)
	current, err := store.Get(gctx, e.resource)
	cancel()
	if s := stopWatch(); s != nil {
		return e.interrupted(s)
	}
	switch {
	case err == nil:
		e.st.leader, _ = naming.ParseCandidate(current.Owner)
	case !errors.Is(err, tenure.ErrNotHeld):
		return storeErr(err, "elect: read the leader of %s", quoteName(e.resource))
	}
	return nil
}

// campaign starts the candidate's Run; stopCampaign ends its context and
// leave waits for it.
func (e *elector) campaign(cand *election.Candidate) {
	ctx, stop := context.WithCancel(context.Background())
	e.stopCampaign = stop
	e.runDone = make(chan error, 1)
	runDone := e.runDone
	go func() { runDone <- cand.Run(ctx) }()
	e.a.log.Info("campaigning", "resource", e.resource, "candidate", cand.Owner(), "ttl", e.f.ttl, "retry", e.f.retry)
}

// leave ends the campaign: Run ends a term in progress and releases its
// lease before it returns.
func (e *elector) leave() {
	e.stopCampaign()
	<-e.runDone
}

// loop handles the campaign's events until one ends elect, and returns
// elect's result. The status line is redrawn every second on a terminal.
func (e *elector) loop() error {
	var tick <-chan time.Time
	if e.st.tty != nil {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	e.st.show()
	for {
		select {
		case s := <-e.sigCh:
			if err := e.onSignal(s); err != nil {
				return err
			}
		case lease := <-e.starts:
			if done, err := e.onTerm(lease); done {
				return err
			}
		case <-e.st.notify:
			e.st.show()
		case <-tick:
			e.st.show()
		case err := <-e.runDone:
			return e.onRunEnd(err)
		}
	}
}

// onSignal: with no command running, a signal that stops tenure ends the
// campaign (the error to return); any other is ignored (nil).
func (e *elector) onSignal(s os.Signal) error {
	if !isWaitStop(s) {
		e.a.log.Info("ignoring a signal: no command is running", "signal", signalName(s))
		return nil
	}
	e.st.clear()
	e.leave()
	return e.interrupted(s)
}

// onTerm runs the command for a term won, and says whether elect ends
// (done) with err, or campaigns again.
func (e *elector) onTerm(lease *tenure.Lease) (done bool, err error) {
	if lease.Err() != nil {
		return false, nil // the term ended before the command could start
	}
	e.st.clear()
	e.a.log.Info("leading: starting the command", "resource", e.resource, "token", lease.Token())
	cmd := command{name: "elect", resource: e.resource, path: e.path, argv: e.argv, grace: e.f.grace}
	out, err := e.a.supervise(cmd, lease, e.sigCh)
	if err != nil {
		return e.onNotRun(lease, err)
	}
	if out.lost == nil {
		out.lost = e.confirmTerm(lease)
	}
	return e.afterCommand(lease, out)
}

// onNotRun: supervise did not run the command (err).
func (e *elector) onNotRun(lease *tenure.Lease, err error) (done bool, _ error) {
	var ns *notStartedError
	switch {
	case errors.As(err, &ns) && ns.code == exitOSErr:
		// No reaper can guard a command on this host now: give the term up
		// and exit (71), rather than win terms it cannot use.
		e.a.release(lease)
		e.leave()
		return true, err
	case errors.As(err, &ns):
		// The term's lease is not usable: give it up, so that this
		// candidate (or another) campaigns again.
		e.a.errorf("%s; campaigning again", ns.msg)
		e.a.release(lease)
		e.st.restart()
		return false, nil
	default:
		e.leave()
		return true, err
	}
}

// confirmTerm runs once the command ended while this candidate led, the
// lease not known lost: it makes sure the store still has this term's
// lease, and returns the loss if not. One freed or taken while the command
// ran (found at the next renewal otherwise) means the command did not run
// as the only leader.
func (e *elector) confirmTerm(lease *tenure.Lease) error {
	rctx, cancel := context.WithTimeout(context.Background(), tenure.DefaultReleaseTimeout)
	defer cancel()
	if err := lease.Renew(rctx); lostAtRelease(err) {
		e.a.errorf("%s was lost while the command ran: %s", describeLease(lease), describeLoss(err))
		return err
	}
	return nil
}

// afterCommand decides, once the command of a term ended as out says,
// whether elect exits with the command's status (or 79 for a command
// stopped by a signal after a loss), or gives the term up and campaigns
// again.
func (e *elector) afterCommand(lease *tenure.Lease, out outcome) (done bool, _ error) {
	switch {
	case out.lost == nil && out.stopped != nil && out.signal == nil:
		// tenure stopped the command as renewals were not confirmed: the
		// term cannot be trusted to go on; give it up and campaign again,
		// as after a loss.
		e.a.errorf("tenure stopped the command (%s)", out.stopped)
	case out.lost == nil:
		// The command exited by itself (or after a signal passed on to it)
		// while this candidate led: release the lease and exit with its
		// status; another candidate takes over.
		e.a.log.Info("the command exited while leading; releasing the lease", "resource", e.resource, "token", lease.Token(), "exit_code", out.code)
		e.leave()
		return true, exitWith(out.code)
	case out.signal != nil:
		e.leave()
		return true, exitWith(exitLost)
	}
	if lease.Err() == nil {
		// The command was stopped for the lease's sake, but the term goes
		// on (a renewal came through after all, before the deadline): give
		// it up, or this candidate would keep the lease running nothing
		// while the others follow.
		e.a.release(lease)
	}
	e.a.errorf("campaigning again for %s", quoteName(e.resource))
	e.st.restart()
	return false, nil
}

// onRunEnd: Run returns by itself only for errors that retrying cannot
// fix, such as a TTL that the store does not accept.
func (e *elector) onRunEnd(err error) error {
	if errors.Is(err, tenure.ErrInvalidTTL) {
		return usage("elect: --ttl %v: %s", e.f.ttl, errText(err))
	}
	return fail(exitSoftware, "elect: the campaign for %s ended: %s", quoteName(e.resource), errText(err))
}

// followStatus shows the current leader while tenure elect follows: a status
// line updated in place when stderr is a terminal. (The candidate logs each
// new leader at level info.)
type followStatus struct {
	a        *app
	resource string
	self     string // this candidate's identity
	tty      *os.File
	notify   chan struct{} // a new leader was observed

	mu     sync.Mutex
	leader string
	since  time.Time // following or campaigning since
	shown  bool
}

// observe is the candidate's OnNewLeader. It must not block: it runs in the
// candidate's goroutine.
func (s *followStatus) observe(identity string) {
	s.mu.Lock()
	s.leader = identity
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// restart starts a new period of following, after a term ended.
func (s *followStatus) restart() {
	s.mu.Lock()
	s.since = time.Now()
	s.mu.Unlock()
	s.show()
}

func (s *followStatus) show() {
	if s.tty == nil {
		return
	}
	s.mu.Lock()
	leader, since := s.leader, s.since
	s.mu.Unlock()
	waited := time.Since(since).Truncate(time.Second)
	var line string
	if leader == "" || leader == s.self {
		// Nobody else seen leading since this candidate's own term.
		line = fmt.Sprintf("tenure: campaigning %s: %s has no leader yet", waited, quoteName(s.resource))
	} else {
		line = fmt.Sprintf("tenure: following %s: %s is led by %s", waited, quoteName(s.resource), quoteName(leader))
	}
	if width := terminalWidth(s.tty); width > 1 && utf8.RuneCountInString(line) > width-1 {
		r := []rune(line)
		line = string(r[:width-2]) + "…"
	}
	fmt.Fprintf(s.tty, "\r\x1b[K%s", line)
	s.shown = true
}

func (s *followStatus) clear() {
	if s.shown {
		fmt.Fprint(s.tty, "\r\x1b[K")
		s.shown = false
	}
}
