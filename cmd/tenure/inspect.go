package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

// leaseJSON is a lease as status and list print it with --json.
type leaseJSON struct {
	Resource    string `json:"resource"`
	Held        bool   `json:"held"`
	Owner       string `json:"owner,omitempty"`
	OwnerID     string `json:"owner_id,omitempty"`
	Token       uint64 `json:"token,omitempty"`
	TTLMs       int64  `json:"ttl_ms,omitempty"`
	RemainingMs int64  `json:"remaining_ms,omitempty"`
}

func toJSON(rec tenure.Record) leaseJSON {
	return leaseJSON{
		Resource:    rec.Resource,
		Held:        true,
		Owner:       rec.Owner,
		OwnerID:     tenure.OwnerID(rec.Owner),
		Token:       rec.Token,
		TTLMs:       rec.TTL.Milliseconds(),
		RemainingMs: rec.Remaining.Milliseconds(),
	}
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fail(exitSoftware, "write JSON: %v", err)
	}
	return nil
}

// display makes a name safe for a table cell: names with spaces or control
// characters are quoted.
func display(s string) string {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// withStore opens the store to inspect it (creating nothing) and runs f.
func (a *app) withStore(f func(ctx context.Context, s driver.Store) error) error {
	u, err := a.parseStore()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	s, err := a.openStore(ctx, u, true)
	if err != nil {
		return err
	}
	defer s.Close()
	return f(ctx, s)
}

func (a *app) newStatusCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status [flags] RESOURCE",
		Short: "Show who holds the lease on RESOURCE",
		Long: `Status shows the holder of the lease on RESOURCE: its owner, fencing token,
TTL and the time left before the store expires it unless it is renewed.

Exit codes: 0 when the resource is held, 1 when it is free, 64 for bad
arguments, 69 when the store cannot be opened or reached.`,
		Example: `  tenure status nightly-backup
  tenure status nightly-backup --json | jq .owner_id

  # In a script: is anyone running the backup?
  if tenure status nightly-backup >/dev/null; then echo "backup running"; fi`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usage("status: expected one RESOURCE, got %d arguments; usage: tenure status [--json] RESOURCE", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			resource := args[0]
			if err := driver.ValidateResource(resource); err != nil {
				return usage("status: resource %q: %s", resource, errText(err))
			}
			return a.withStore(func(ctx context.Context, s driver.Store) error {
				rec, err := s.Get(ctx, resource)
				if errors.Is(err, tenure.ErrNotHeld) {
					if asJSON {
						if err := a.printJSON(leaseJSON{Resource: resource}); err != nil {
							return err
						}
					} else {
						fmt.Fprintf(a.stdout, "%s is free\n", quoteName(resource))
					}
					return exitWith(exitFree)
				}
				if err != nil {
					return storeErr(err, "status %s", quoteName(resource))
				}
				if asJSON {
					return a.printJSON(toJSON(rec))
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(tw, "resource:\t%s\n", display(rec.Resource))
				fmt.Fprintf(tw, "owner:\t%s\n", display(rec.Owner))
				fmt.Fprintf(tw, "token:\t%s\n", tokenCell(rec.Token))
				fmt.Fprintf(tw, "ttl:\t%s\n", durCell(rec.TTL))
				fmt.Fprintf(tw, "left:\t%s\n", durCell(rec.Remaining))
				return tw.Flush()
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON: resource, held, owner, owner_id, token, ttl_ms, remaining_ms")
	return c
}

func tokenCell(t uint64) string {
	if t == 0 {
		return "-"
	}
	return strconv.FormatUint(t, 10)
}

// durCell formats a TTL or a time left; "-" when the store does not say.
func durCell(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmtDur(d)
}

func (a *app) newListCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [flags] [PREFIX]",
		Short: "List the leases that are held, optionally only those whose name starts with PREFIX",
		Long: `List prints the live leases, sorted by resource: a table with the columns
RESOURCE, OWNER, TOKEN, TTL and LEFT (the time before the store expires the
lease unless it is renewed), or with --json an array of objects with the
fields resource, held, owner, owner_id, token, ttl_ms and remaining_ms.
With PREFIX, only resources whose name starts with it.

Exit codes: 0, also when no lease is held; 64 for bad arguments; 69 when the
store cannot be opened or reached.`,
		Example: `  tenure list
  tenure list jobs/
  tenure list --json | jq -r '.[] | select(.remaining_ms < 5000) | .resource'`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usage("list: expected at most one PREFIX, got %d arguments; usage: tenure list [--json] [PREFIX]", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			if err := driver.ValidatePrefix(prefix); err != nil {
				return usage("list: prefix %q: %s", prefix, errText(err))
			}
			return a.withStore(func(ctx context.Context, s driver.Store) error {
				recs, err := s.List(ctx, prefix)
				if err != nil {
					return storeErr(err, "list %s", quoteName(prefix))
				}
				if asJSON {
					out := make([]leaseJSON, 0, len(recs))
					for _, r := range recs {
						out = append(out, toJSON(r))
					}
					return a.printJSON(out)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "RESOURCE\tOWNER\tTOKEN\tTTL\tLEFT")
				for _, r := range recs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", display(r.Resource), display(r.Owner), tokenCell(r.Token), durCell(r.TTL), durCell(r.Remaining))
				}
				return tw.Flush()
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array instead of a table")
	return c
}

func (a *app) newReleaseCmd() *cobra.Command {
	var owner string
	var force bool
	c := &cobra.Command{
		Use:   "release [flags] RESOURCE (--owner ID | --force)",
		Short: "Free the lease on RESOURCE if ID holds it (or, with --force, whoever does)",
		Long: `Release frees the lease on RESOURCE, on behalf of its holder, for operators
and scripts: for instance to free a lease that a crashed holder's host keeps
for its TTL.

With --owner ID, release reads the current holder and frees the lease only if
its owner is ID: either the full owner string as "tenure status" shows it
(ID#NONCE, the value of TENURE_OWNER) or just its readable id (ID, as given
to "tenure run --owner", by default HOST:PID). The release is conditioned on
that owner and its fencing token, so a lease that changed hands in between is
left alone.

--force frees the lease whoever holds it. It is meant for operators, and it
is dangerous: the holder is not told. A "tenure run" holding it notices only
when its next renewal fails (within a third of its TTL) and then stops its
command, which until then runs on while another process may take the lease.
Prefer stopping the holder.

Exit codes: 0 released; 1 nothing released (the resource is not held, or it
is held by another owner than ID); 64 bad arguments, or neither --owner nor
--force; 69 the store cannot be opened or reached.`,
		Example: `  # Free the lease that web-3:4711 holds on the backup lease.
  tenure release nightly-backup --owner web-3:4711

  # Free it whoever holds it (the holder's command runs on until its next renewal).
  tenure release nightly-backup --force`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usage("release: expected one RESOURCE, got %d arguments; usage: tenure release RESOURCE --owner ID | --force", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			resource := args[0]
			ownerSet := c.Flags().Changed("owner")
			switch {
			case ownerSet && force:
				return usage("release: --owner and --force cannot be used together")
			case !ownerSet && !force:
				return usage("release: say whose lease to free with --owner ID, or free it whoever holds it with --force")
			case ownerSet && owner == "":
				return usage("release: --owner is empty")
			}
			if err := driver.ValidateResource(resource); err != nil {
				return usage("release: resource %q: %s", resource, errText(err))
			}
			return a.withStore(func(ctx context.Context, s driver.Store) error {
				rec, err := s.Get(ctx, resource)
				if errors.Is(err, tenure.ErrNotHeld) {
					return fail(exitFree, "release: %s is not held; nothing to release", quoteName(resource))
				}
				if err != nil {
					return storeErr(err, "release %s", quoteName(resource))
				}
				if !force && rec.Owner != owner && tenure.OwnerID(rec.Owner) != owner {
					return fail(exitFree, "release: %s; not by %s: nothing released (use --force to free it anyway)", describeHolder(rec), owner)
				}
				err = s.Release(ctx, resource, rec.Owner, rec.Token)
				if errors.Is(err, tenure.ErrLeaseLost) {
					return fail(exitFree, "release: the lease on %s changed hands or expired before it could be released; nothing released", quoteName(resource))
				}
				if err != nil {
					return storeErr(err, "release %s", quoteName(resource))
				}
				a.log.Info("lease released", "resource", resource, "owner", rec.Owner, "token", rec.Token, "force", force)
				fmt.Fprintf(a.stdout, "released %s (owner %s, token %d)\n", quoteName(resource), rec.Owner, rec.Token)
				return nil
			})
		},
	}
	c.Flags().StringVar(&owner, "owner", "", "free the lease only if this owner holds it (ID#NONCE, or just ID)")
	c.Flags().BoolVar(&force, "force", false, "free the lease whoever holds it (for operators: the holder is not told)")
	return c
}

func (a *app) newInitCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "init",
		Short: "Prepare the store for use: create its tables or keyspace if they do not exist",
		Long: `Init prepares the store named by --store (or $TENURE_STORE) for use: it
creates the PostgreSQL leases table, or the Cassandra keyspace (with the
URL's replication parameter) and table, if they do not exist yet. It leaves
existing leases alone and can be run again. A SQLite file needs no init (it
is created on first use); init then only checks that the file can be opened.

Exit codes: 0 done; 64 bad store URL; 69 the store cannot be reached or the
schema cannot be created (for instance for lack of privileges).`,
		Example: `  tenure --store 'postgres://tenure@db.internal/locks?sslmode=verify-full' init
  tenure --store 'cassandra://c1,c2,c3/tenure?replication=dc1:3' init`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usage("init: takes no arguments; name the store with --store URL")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			u, err := a.parseStore()
			if err != nil {
				return err
			}
			if err := a.makeDefaultDir(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*storeTimeout)
			defer cancel()
			if err := u.Init(ctx); err != nil {
				return storeOpenErr(err)
			}
			fmt.Fprintf(a.stdout, "store ready: %s\n", u)
			return nil
		},
	}
}
