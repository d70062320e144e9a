// Command tenure runs a command while it holds a named lease, and inspects
// and frees leases: flock(1) for a fleet, with fencing tokens.
//
//	tenure run nightly-backup -- /usr/local/bin/backup --full
//	tenure elect sampling-calculator -- /usr/local/bin/calc-rates
//	tenure status nightly-backup
//	tenure list
//	tenure release nightly-backup --owner web-3:4711
//
// Leases live in a store named by a URL (--store, or $TENURE_STORE); the
// default is a SQLite file under $XDG_STATE_HOME, shared by every process on
// the host. Run "tenure help run" and "tenure help elect" for the exit codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store"
	_ "github.com/tenure-go/tenure/store/all" // every store's URL scheme
)

// Exit codes. The 6x and 7x codes are those of sysexits.h. A slot-count
// conflict (78) is the holders' configurations disagreeing: the arguments
// themselves are fine (not 64), and waiting does not help while the others
// run (not 75).
const (
	exitOK            = 0
	exitFree          = 1   // status: not held; release: nothing released
	exitUsage         = 64  // EX_USAGE: bad arguments or input
	exitNoStore       = 66  // EX_NOINPUT: status, list, release: no tenure store there (nothing was created)
	exitUnavailable   = 69  // EX_UNAVAILABLE: the store cannot be opened or reached
	exitSoftware      = 70  // EX_SOFTWARE: an internal error
	exitOSErr         = 71  // EX_OSERR: run, elect: the command's reaper could not be started (the command did not run)
	exitIOErr         = 74  // EX_IOERR: tenure's own output could not be written (stdout closed or full)
	exitNotAcquired   = 75  // EX_TEMPFAIL: the lease is held by another owner
	exitSlotsMismatch = 78  // EX_CONFIG: run --slots N: RESOURCE is a semaphore of another number of slots (slots of it held or kept, or its marker); nothing was acquired
	exitLost          = 79  // the lease was lost while the command ran (or before it could start)
	exitCannotExec    = 126 // the command was found but cannot be executed
	exitNotFound      = 127 // the command was not found
	exitSignalBase    = 128 // 128+N: the command (or tenure, while waiting) was killed by signal N
)

// envStore names the environment variable that holds the default store URL.
const envStore = "TENURE_STORE"

// storeTimeout bounds opening the store and the store calls of status, list
// and release.
const storeTimeout = 30 * time.Second

func main() {
	if len(os.Args) > 1 && os.Args[1] == reaperArg {
		os.Exit(reaperMain(os.Args[2:], os.Stdin, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == gateArg {
		os.Exit(gateMain(os.Args[2:], os.Stderr))
	}
	// A write to a closed pipe returns EPIPE instead of killing tenure with
	// SIGPIPE (Go does that for stdout and stderr unless SIGPIPE is
	// notified), so that it exits with exitIOErr in every subcommand. A
	// notified signal is reset to its default in the commands tenure runs.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// exitError is an error with the exit code it calls for. Its message is
// printed as one line prefixed "tenure: "; an empty message prints nothing.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// fail returns an exitError whose message is formatted like fmt.Sprintf.
func fail(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// exitWith returns an exitError that prints nothing.
func exitWith(code int) error { return &exitError{code: code} }

// usage returns an exitError with code 64.
func usage(format string, args ...any) error { return fail(exitUsage, format, args...) }

// oneLine turns an error message into one safe line without a leading
// "tenure: " (the library's errors start with it, and so will ours when
// printed): control characters and other non-printing characters are
// escaped (see escapeText), so that nothing in a message (a name read from
// the store, a driver's message) can move the cursor or change the
// terminal, and a line longer than maxLine bytes is shortened.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, ":\n", ": ") // a list after a colon (pgx's attempts) reads on
	// Lines become "; "-separated parts; blank lines go, and a line that
	// asks a question reads on into the next (cobra's "Did you mean
	// this?\n\trun").
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		line = strings.Join(strings.Fields(line), " ")
		if line == "" {
			continue
		}
		if b.Len() > 0 {
			if strings.HasSuffix(b.String(), "?") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(line)
	}
	s = b.String()
	for strings.HasPrefix(s, "tenure: ") {
		s = strings.TrimPrefix(s, "tenure: ")
	}
	return shorten(escapeText(s), maxLine)
}

// errText is oneLine(err.Error()) with the "tenure: " inside wrapped and
// joined errors removed as well.
func errText(err error) string {
	s := oneLine(err.Error())
	s = strings.ReplaceAll(s, "; tenure: ", "; ")
	return dedupeContext(strings.ReplaceAll(s, ": tenure: ", ": "))
}

// contextPart matches the context an error layer adds before the next
// one's: a store's name ("postgres store: ") or an operation on a name
// (`acquire "pgx": `).
var contextPart = regexp.MustCompile(`(?:[a-z]+ store|[a-z]+ "(?:[^"\\]|\\.)*"): `)

// dedupeContext removes from s each context part that an earlier one
// already said: the Locker, the store and the command each name the
// operation, so `acquire "pgx": postgres store: acquire "pgx": ` reads
// `acquire "pgx": postgres store: `.
func dedupeContext(s string) string {
	seen := map[string]bool{}
	return contextPart.ReplaceAllStringFunc(s, func(p string) string {
		if seen[p] {
			return ""
		}
		seen[p] = true
		return p
	})
}

// app holds what every command shares.
type app struct {
	stdin          *os.File
	stdout, stderr io.Writer
	errFile        *os.File // stderr as a file, to detect a terminal; may be nil
	storeURL       string
	logLevel       string
	log            *slog.Logger
	root           *cobra.Command
}

// Main runs tenure with args (without the program name) and returns the exit
// code.
func Main(args []string, stdin *os.File, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	if f, ok := stderr.(*os.File); ok {
		a.errFile = f
	}
	root := a.newRoot()
	out := &outWriter{w: stdout}
	a.stdout = out
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(out)
	root.SetErr(stderr)
	err := root.Execute()
	var xe *exitError
	isExit := errors.As(err, &xe)
	if werr := out.Err(); werr != nil {
		// What tenure printed did not reach its reader (a closed pipe, a
		// full disk): say so, with one exit code in every subcommand. The
		// command's own message, if any, is printed too; an error that is
		// only the failed write is not repeated.
		if isExit && xe.msg != "" && !strings.HasSuffix(xe.msg, ": "+werr.Error()) {
			fmt.Fprintf(stderr, "tenure: %s\n", oneLine(xe.msg))
		}
		fmt.Fprintf(stderr, "tenure: cannot write to standard output: %s\n", oneLine(werr.Error()))
		return exitIOErr
	}
	switch {
	case err == nil:
		return exitOK
	case isExit:
		if xe.msg != "" {
			fmt.Fprintf(stderr, "tenure: %s\n", oneLine(xe.msg))
		}
		return xe.code
	}
	// Errors that cobra itself returns: an unknown command or flag, a wrong
	// number of arguments.
	fmt.Fprintf(stderr, "tenure: %s (see tenure --help)\n", oneLine(err.Error()))
	return exitUsage
}

// outWriter is tenure's standard output. It keeps the first write error
// (a pipe whose reader is gone, a full disk, an I/O error) for Main, which
// then exits with exitIOErr, and writes nothing after it. (A standard
// output that was closed before tenure started cannot be told apart from
// /dev/null: the Go runtime opens /dev/null in its place at start-up.)
type outWriter struct {
	w   io.Writer
	mu  sync.Mutex
	err error
}

func (o *outWriter) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // "write /dev/stdout: ..." names a path the user did not give
		}
		o.err = err
	}
	return n, err
}

// Err returns the first write error.
func (o *outWriter) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

func (a *app) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "tenure",
		Short: "Run commands under distributed leases, and inspect and free leases",
		Long: `tenure holds a named lease while it runs a command, so that at most one
command per name runs at a time, on one host or across many: flock(1) with
timeouts, automatic renewal and fencing tokens.

A lease has a TTL. tenure renews it in the background while the command
runs; if tenure cannot renew it (the store is unreachable, tenure was paused,
an operator freed it), the lease is lost, and tenure stops the command. Each
grant carries a fencing token, a number that grows with every new grant of
the name; the command finds it in $TENURE_TOKEN and can pass it to whatever
it writes to, so that a writer that lost its lease is turned away.

Leases live in a store named by a URL: --store, else $TENURE_STORE, else the
SQLite file ` + defaultSQLitePathDoc + `.

Exit codes shared by every command: 64 bad arguments or input (nothing was
written to the store); 66 no tenure store at the URL (status, list and
release, which never create one); 69 the store cannot be opened or reached,
or is not a tenure store; 74 tenure's own output could not be written (a
pipe whose reader is gone, a full disk). Each command's help gives the
others.

Store URLs:
` + schemeHelp(),
		Example: `  # Run the backup unless another one is running; wait for it to finish first.
  tenure run nightly-backup -- /usr/local/bin/backup --full

  # Give up at once if the lease is held (exit code 75).
  tenure run --no-wait reindex -- ./reindex.sh

  # Start on every host; only the elected leader runs the command.
  tenure elect sampling-calculator -- /usr/local/bin/calc-rates

  # Who holds what?
  tenure list
  tenure status nightly-backup --json`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: a.setup,
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usage("%s%s (see %s --help)", err, flagHint(c, err), c.CommandPath())
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.storeURL, "store", "", "store URL; default $"+envStore+", else the SQLite file $XDG_STATE_HOME/tenure/leases.db")
	pf.StringVar(&a.logLevel, "log-level", "warn", "log detail on stderr: debug, info, warn or error")

	// "tenure help TOPIC" for a topic that is no command is a usage error
	// (64), as "tenure TOPIC" is; cobra's own help command exits 0.
	root.SetHelpCommand(&cobra.Command{
		Use:               "help [command]",
		Short:             "Help about any command",
		Args:              cobra.ArbitraryArgs,
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return usage("help: no command %s (see tenure --help)", quoteName(strings.Join(args, " ")))
			}
			return cmd.Help()
		},
	})
	root.AddCommand(a.newRunCmd(), a.newElectCmd(), a.newStatusCmd(), a.newListCmd(), a.newReleaseCmd(), a.newInitCmd(), a.newSchemaCmd(), a.newVersionCmd())
	a.root = root
	return root
}

// schemeHelp lists the store URLs: each scheme's form, then its
// description, indented and wrapped.
func schemeHelp() string {
	var b strings.Builder
	for _, s := range store.Schemes() {
		form, desc, _ := strings.Cut(s.Usage, "  ")
		fmt.Fprintf(&b, "  %s\n", strings.TrimSpace(form))
		line := "     "
		for _, w := range strings.Fields(desc) {
			if len(line)+1+len(w) > 78 {
				b.WriteString(line + "\n")
				line = "     "
			}
			line += " " + w
		}
		if strings.TrimSpace(line) != "" {
			b.WriteString(line + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// setup parses the global flags; it runs before every command, before any
// I/O.
func (a *app) setup(cmd *cobra.Command, args []string) error {
	var level slog.Level
	switch strings.ToLower(a.logLevel) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return usage("--log-level %q: use debug, info, warn or error", a.logLevel)
	}
	a.log = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, at slog.Attr) slog.Attr {
			if at.Key == slog.TimeKey && len(groups) == 0 {
				return slog.String(slog.TimeKey, at.Value.Time().Format("15:04:05.000"))
			}
			return safeAttr(at)
		},
	})).With("prog", "tenure")
	setDriverLoggers(a.log)
	if cmd.Flags().Changed("store") && strings.TrimSpace(a.storeURL) == "" {
		return usage("--store is empty; give a store URL such as sqlite:/var/lib/tenure/leases.db")
	}
	return nil
}

// safeAttr shortens a long log value, and escapes what is not printable in
// an error's message (the text handler quotes strings that need it, with
// escapes, but neither shortens them nor quotes an error's text).
func safeAttr(at slog.Attr) slog.Attr {
	v := at.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); len(s) > maxName {
			return slog.String(at.Key, shorten(s, maxName))
		}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(at.Key, shorten(escapeText(err.Error()), maxLine))
		}
	}
	return at
}

// storeURLOrDefault returns the store URL that --store, $TENURE_STORE or
// the default names.
func (a *app) storeURLOrDefault() (string, error) {
	raw := a.storeURL
	if raw == "" {
		raw = os.Getenv(envStore)
	}
	if strings.TrimSpace(raw) == "" {
		p, err := defaultSQLitePath()
		if err != nil {
			return "", fail(exitUnavailable, "%s", errText(err))
		}
		raw = "sqlite:" + p
	}
	return raw, nil
}

// parseStore checks the store URL that --store, $TENURE_STORE or the
// default names, before any I/O. A bad URL is a usage error (64) and names
// the known schemes.
func (a *app) parseStore() (*store.URL, error) {
	raw, err := a.storeURLOrDefault()
	if err != nil {
		return nil, err
	}
	u, err := store.Parse(raw)
	if err != nil {
		if errors.Is(err, store.ErrBadURL) {
			// Say which URL, and where it came from: a user who forgot that
			// $TENURE_STORE is set would not find it otherwise.
			msg := errText(err)
			if r := store.Redact(raw); !strings.Contains(msg, r) {
				msg += fmt.Sprintf(" (in %s)", r)
			}
			return nil, usage("%s; the URL came from %s", msg, a.storeSource())
		}
		return nil, storeOpenErr(err)
	}
	return u, nil
}

// storeSource names where the store URL came from, for messages.
func (a *app) storeSource() string {
	switch {
	case a.storeURL != "":
		return "--store"
	case strings.TrimSpace(os.Getenv(envStore)) != "":
		return "$" + envStore
	}
	return "the default"
}

// parseStoreForTTL is parseStore, then a check that the store can keep
// ttl: a TTL outside the store's limits is a usage error (64) before any
// I/O, so no file, table or connection is made for a command that cannot
// run.
func (a *app) parseStoreForTTL(cmd string, ttl time.Duration) (*store.URL, error) {
	u, err := a.parseStore()
	if err != nil {
		return nil, err
	}
	if err := u.CheckTTL(ttl); err != nil {
		return nil, usage("%s: --ttl %v: %s", cmd, ttl, errText(err))
	}
	return u, nil
}

// openStore opens the store of u, bounded by storeTimeout; a store that
// cannot be opened is exit code 69. With inspect (status, list, release)
// nothing is created (store.Inspect); otherwise the directory of the
// default SQLite file is created first, with mode 0700.
func (a *app) openStore(ctx context.Context, u *store.URL, inspect bool) (driver.Store, error) {
	var opts []store.Option
	if inspect {
		opts = append(opts, store.Inspect())
	} else if err := a.makeDefaultDir(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	s, err := u.Open(ctx, opts...)
	if err != nil {
		return nil, storeOpenErr(err)
	}
	a.log.Debug("store opened", "store", u.String())
	return s, nil
}

// storeOpenErr maps an error of store.Parse, Open or Init to an exit code:
// a bad URL is 64, no store at all (status, list and release create none)
// is 66, anything else 69.
func storeOpenErr(err error) error {
	switch {
	case errors.Is(err, store.ErrBadURL):
		return usage("%s", errText(err))
	case errors.Is(err, store.ErrNoStore):
		return fail(exitNoStore, "no tenure store: %s; nothing was created (tenure init creates one; on SQLite, tenure run and tenure elect do too)",
			strings.TrimPrefix(errText(err), store.ErrUnavailable.Error()+": "))
	}
	return fail(exitUnavailable, "%s", errText(err))
}

// storeErr maps an error of a store call to an exit code: bad input is 64,
// anything else means that the store could not be used (69).
func storeErr(err error, format string, args ...any) error {
	msg := dedupeContext(fmt.Sprintf(format, args...) + ": " + errText(err))
	switch {
	case errors.Is(err, tenure.ErrInvalidResource) || errors.Is(err, tenure.ErrInvalidOwner) || errors.Is(err, tenure.ErrInvalidTTL):
		return usage("%s", msg)
	case errors.Is(err, store.ErrNoStore):
		// A server store whose schema was never made (tenure init).
		return fail(exitNoStore, "no tenure store: %s", msg)
	}
	return fail(exitUnavailable, "%s", msg)
}

// fmtDur formats a duration for people: milliseconds below a second, tenths
// of a second below a minute, whole seconds above.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// describeHolder says who holds a lease, for messages. The names come from
// the store: they are quoted.
func describeHolder(rec tenure.Record) string {
	s := fmt.Sprintf("%s is held by %s", quoteName(rec.Resource), quoteName(rec.Owner))
	var parts []string
	if rec.Token != 0 {
		parts = append(parts, fmt.Sprintf("token %d", rec.Token))
	} else {
		parts = append(parts, "no fencing token")
	}
	if rec.Remaining > 0 {
		parts = append(parts, fmtDur(rec.Remaining)+" left")
	}
	return s + " (" + strings.Join(parts, ", ") + ")"
}

// flagHint explains an unknown flag where -- is the likely fix: after
// run's or elect's RESOURCE it is most likely the COMMAND's own flag, and
// elsewhere it may be a RESOURCE that begins with "-".
func flagHint(c *cobra.Command, err error) string {
	if !strings.HasPrefix(err.Error(), "unknown flag") && !strings.HasPrefix(err.Error(), "unknown shorthand flag") {
		return ""
	}
	switch name := c.Name(); name {
	case "run", "elect":
		if len(c.Flags().Args()) > 0 {
			return fmt.Sprintf("; if it is the command's, put -- between RESOURCE and COMMAND, as in: tenure %s [flags] RESOURCE -- COMMAND [ARGS...]", name)
		}
	case "status", "release":
		return fmt.Sprintf("; a RESOURCE that begins with - goes after --, with the flags before it, as in: tenure %s [flags] -- RESOURCE", name)
	}
	return ""
}

// dashHint is the hint for a count of RESOURCE arguments that is wrong
// because flags were written after --, where they are arguments.
func dashHint(c *cobra.Command, args []string) string {
	dash := c.ArgsLenAtDash()
	if dash < 0 {
		return ""
	}
	for _, a := range args[max(dash, 1):] { // args[0] is the RESOURCE
		if strings.HasPrefix(a, "-") && a != "-" {
			return fmt.Sprintf(" (%s after -- is an argument, not a flag: flags go before --)", quoteName(a))
		}
	}
	return ""
}
