package main

// Help: each command's --help shows its usage first, then the few lines a
// user needs, its flags and its examples, within a screen; the long
// explanations are help topics ("tenure help signals"): commands without a
// Run, which cobra lists as additional help topics. docs/cli/ and
// docs/man/ are generated from the same texts (TestCLIReference).

import (
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// helpTemplate renders a command's help: usage, description, subcommands
// and help topics, flags wrapped to 80 columns, then the examples. A help
// topic is its text alone.
const helpTemplate = `{{if .IsAdditionalHelpTopicCommand}}{{.Long | trimTrailingWhitespaces}}
{{else}}Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} COMMAND [flags]{{end}}
{{with (or .Long .Short)}}
{{. | trimTrailingWhitespaces}}
{{end}}{{if .HasAvailableSubCommands}}
Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding}}  {{.Short}}{{end}}{{end}}
{{end}}{{if .HasHelpSubCommands}}
Help topics (tenure help TOPIC):{{range .Commands}}{{if .IsAdditionalHelpTopicCommand}}
  {{rpad .Name .NamePadding}}  {{.Short}}{{end}}{{end}}
{{end}}{{if .HasAvailableLocalFlags}}
Flags:
{{.LocalFlags.FlagUsagesWrapped 80 | trimTrailingWhitespaces}}
{{end}}{{if .HasAvailableInheritedFlags}}
Global flags:
{{.InheritedFlags.FlagUsagesWrapped 80 | trimTrailingWhitespaces}}
{{end}}{{if .HasExample}}
Examples:
{{.Example}}
{{end}}{{end}}`

// usageTemplate is what cobra prints with an error when SilenceUsage is
// off, and what "tenure COMMAND" prints for a command that needs a
// subcommand: the usage lines and the pointer to the help.
const usageTemplate = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} COMMAND [flags]{{end}}

Run "{{.CommandPath}} --help" for more.
`

// quietHelp wraps cobra's help function so that a failed write of the help
// is reported once, by Main (exit 74), and not also by cobra, which prints
// the template's error to stderr.
func quietHelp(help func(*cobra.Command, []string)) func(*cobra.Command, []string) {
	return func(c *cobra.Command, args []string) {
		out := c.OutOrStdout()
		c.SetOut(errorlessWriter{out})
		defer c.SetOut(out)
		help(c, args)
	}
}

// errorlessWriter passes writes on and reports none of their errors.
type errorlessWriter struct{ w io.Writer }

func (e errorlessWriter) Write(p []byte) (int, error) {
	e.w.Write(p) // Main learns of a failed write from its outWriter
	return len(p), nil
}

// helpTopics returns the help topics, in the order "tenure --help" lists
// them.
func helpTopics() []*cobra.Command {
	topic := func(name, short, long string) *cobra.Command {
		return &cobra.Command{Use: name, Short: short, Long: strings.TrimSpace(long)}
	}
	return []*cobra.Command{
		topic("exit-codes", "What the exit codes mean, in every command", exitCodesTopic),
		topic("stores", "Store URLs, and which commands create a store", storesTopic()),
		topic("signals", "How run and elect start, signal and stop COMMAND", signalsTopic),
		topic("cron", "Once per tick across several hosts with --hold-at-least", cronTopic),
		topic("environment", "The variables tenure reads, and those it sets", environmentTopic),
	}
}

const exitCodesTopic = `
Exit codes of tenure, in every command. The 6x and 7x codes are those of
sysexits.h. A script should treat a code it does not know as a failure.

  0      success (run, elect: the command exited with 0)
  0-125  run, elect: the command's own exit status (the command may itself
         exit with one of the codes below)
  1      status: the resource is free; release: nothing was released (not
         held, or held by another owner than --owner); leader: no leader
         (status, release and leader also where there is no store yet)
  64     bad arguments or input: an unknown flag, a bad store URL, a --ttl
         below 1s or beyond what the store can keep, a --hold-at-least the
         store cannot keep; nothing was written to the store
  66     run, elect: a PostgreSQL, MySQL or Cassandra store whose schema
         "tenure init" has not created
  69     the store cannot be opened or reached, or is not a tenure store;
         run: the store does not renew the lease fast enough for --ttl (the
         command did not run)
  70     internal error
  71     run, elect: the reaper that stops the command if tenure dies or
         stalls could not be started (a limit on processes or open files);
         the command did not run
  74     tenure's own output could not be written (stdout is a pipe whose
         reader is gone, or the disk is full)
  75     run: the lease is held by another owner (--no-wait, or --wait ran
         out); the holder is printed (with --slots: every slot is held, and
         the holders are printed)
  78     run --slots N: RESOURCE is a semaphore of another number of
         slots (slots of it are held or kept, or its marker is live): the
         arguments are fine, the holders disagree; nothing was acquired
  79     run: the lease was lost while the command ran, or was found gone
         when tenure released it after the command, or was lost before the
         command could start (it did not run), or tenure stopped the command
         because renewals were not confirmed as the lease's deadline neared,
         or the reaper guarding the command exited (the command was
         stopped); elect: the lease was lost while the command was stopping
         after a signal (a leader that loses its lease otherwise stops the
         command and campaigns again)
  126    run, elect: the command was found but cannot be executed (checked
         before the lease is acquired)
  127    run, elect: the command was not found (checked before the lease is
         acquired)
  128+N  run, elect: the command was killed by signal N, or tenure was
         stopped by signal N while it waited for the lease or followed a
         leader (129 SIGHUP, 130 SIGINT, 131 SIGQUIT, 143 SIGTERM)`

// storesTopic lists every registered store URL, then the rules that are
// the same for all of them.
func storesTopic() string {
	return `
Leases live in a store named by a URL: --store, else $TENURE_STORE, else
` + defaultSQLitePathDoc + `.
Processes that share a lease use the same store. Guarantees and tuning:
docs/getting-started.md, docs/configuration.md.

` + schemeHelp() + `

URLs, TTLs and arguments are checked before anything is opened (exit 64
otherwise); an unknown parameter is an error. Passwords are never printed;
percent-encode '@', '/', '?' and '#' in a user name or password.

run, elect and init create a missing SQLite file (and only the default
location's directories); "tenure init" alone makes the schema of
PostgreSQL, MySQL and Cassandra; etcd and Redis need nothing. status,
list, release and leader create nothing: without a store they answer as of
an empty one; a file they may only read is opened read-only.`
}

const signalsTopic = `
How "tenure run" and "tenure elect" run the command. Nothing of the command
runs on without the lease.

Start. COMMAND is looked up (in $PATH unless it contains a slash) before the
lease is acquired: 127 or 126 at once if it cannot run. It runs directly,
not through a shell, in a process group of its own, with stdin, stdout and
stderr passed through, and starts only while the lease has at least its
renew window left: TTL·0.99 less the renew interval, about two thirds of
the TTL (tenure renews it first if needed). On a terminal the
command's group gets the foreground: an interactive command reads from it,
Ctrl-C reaches it directly, and Ctrl-Z stops the command and tenure
together (a stop longer than the TTL loses the lease).

Signals to tenure. While the command runs, SIGINT, SIGTERM and SIGHUP are
passed on to its process group, which gets SIGKILL if it has not exited
--grace later; SIGQUIT, SIGUSR1 and SIGUSR2 are passed on, and nothing else
happens. While waiting for the lease (run) or following (elect), SIGINT,
SIGTERM, SIGHUP and SIGQUIT make tenure exit with 128+N; if a request for
the lease was in flight, tenure finds out whether it got the lease and
frees it first (within 5s).

The command's exit. Processes it left in its group (a shell's background
jobs) get SIGTERM, then SIGKILL after --grace; only then is the lease
released, and tenure exits with the command's status (79 if the release
finds the lease gone).

Losing the lease. When renewals are not getting through and the time left
falls below --grace (at most a third of the TTL), the group gets SIGTERM,
and SIGKILL when the lease is lost at its deadline. A lease freed by an
operator ("tenure release --force") or taken by another owner: SIGTERM,
then SIGKILL after --grace or at the deadline, whichever comes first.
tenure learns of a forced release within about a second on PostgreSQL,
Redis and etcd, which send notifications, and MySQL, which polls, and at
its next renewal (within TTL/3) on SQLite and Cassandra. run then exits
79; elect campaigns again.

If tenure dies or stalls. A reaper process (the tenure binary, re-executed)
kills the command's group at once if tenure is killed (Linux), and a
twentieth of the TTL before the lease's deadline if tenure is stopped,
frozen or starved of CPU; the command starts only once the reaper is armed
(71 if it cannot be started). Processes that leave the group (setsid,
daemons) escape all of this: run tenure under a service manager that stops
the whole cgroup (systemd's default KillMode=control-group).`

const cronTopic = `
Once per tick across several hosts: put the same line in the crontab of
every host.

  # m h dom mon dow  command
    * * * * *        tenure run --no-wait --hold-at-least 50s --ttl 2m minutely-report -- /usr/local/bin/report
    0 3 * * *        tenure run --no-wait --hold-at-least 1h nightly-backup -- /usr/local/bin/backup --full

--hold-at-least D keeps the lease for D after it was granted, even when the
command finishes sooner (however it ended): tenure stops renewing it, has
the store keep it for the rest of D, and exits with the command's status at
once. A host whose clock is a few seconds behind, and whose cron therefore
starts the job a few seconds later, finds the lease held and skips the tick
(exit 75) instead of running the job a second time (ShedLock's
lockAtLeastFor; Lease.ReleaseAfter in the Go library).

Pick D longer than the largest clock difference between the hosts and
shorter than the period minus that difference: 50s for one minute when the
clocks are within 10s of each other. A job that runs longer than D releases
the lease when it ends; one that runs into the next tick makes that tick's
runs exit 75. D must be a TTL the store accepts. etcd and Cassandra keep
whole seconds: a hold there may end up to 1s (etcd) or 2s (Cassandra)
after D, so leave that much more room before the next tick.`

const environmentTopic = `
tenure reads:

  TENURE_STORE     the store URL when --store is not given (tenure help stores)
  XDG_STATE_HOME   where the default SQLite file lives:
                   $XDG_STATE_HOME/tenure/leases.db; without it (or when it
                   is not an absolute path) ~/.local/state/tenure/leases.db

"tenure run" and "tenure elect" add to the command's environment:

  TENURE_RESOURCE  the resource name
  TENURE_OWNER     the grant's owner string: the --owner id (default
                   HOST:PID; elect: "|" and the --value, if any), "#", a
                   random nonce, ".", and the grant's number
  TENURE_TOKEN     the fencing token: it grows with every grant of the
                   resource (elect: with every term); pass it to what the
                   command writes to, so that a late write from a holder
                   that lost its lease can be rejected
  TENURE_SLOT      run --slots N: the slot held, 1 to N

A resource name that starts with "-" goes after "--", with a second "--"
before the command: tenure run -- -name -- COMMAND.`
