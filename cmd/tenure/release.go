package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
)

func (a *app) newReleaseCmd() *cobra.Command {
	var owner string
	var force bool
	c := &cobra.Command{
		Use:   "release [flags] RESOURCE (--owner ID | --force)",
		Short: "Free the lease on RESOURCE if ID holds it, or whoever does",
		Long: `Free the lease on RESOURCE on behalf of its holder, for operators and
scripts: for instance a lease that a crashed holder keeps for its TTL.

--owner frees it only if it names the holder, in one of three forms: its
readable id, ID (the --owner of "tenure run", by default HOST:PID); its
owner, ID#NONCE (one process: any of its grants); or its grant,
ID#NONCE.N, as "tenure status" and TENURE_OWNER show it. The release is
conditioned on that holder and its fencing token, so a lease that changed
hands in between is left alone.

--force frees it whoever holds it, and is dangerous: the holder learns of
it within about a second on PostgreSQL, MySQL, Redis and etcd, and at its
next renewal (within TTL/3) on SQLite and Cassandra; until then its command
runs on while another process may take the lease. Prefer stopping the holder.
A semaphore's slots are freed by their names (R/slot-2-of-3).

Exit codes: 0 released, 1 nothing released (also where there is no store
yet), 69 the store cannot be used (tenure help exit-codes).`,
		Example: `  # Free the lease that web-3:4711 holds on the backup lease.
  tenure release nightly-backup --owner web-3:4711

  # Free it whoever holds it (the holder's command runs on until its next renewal).
  tenure release nightly-backup --force`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usage("release: expected one RESOURCE, got %d arguments%s; usage: tenure release RESOURCE --owner ID | --force", len(args), dashHint(c, args))
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
				return usage("release: resource %s: %s", quoteName(resource), errText(err))
			}
			return a.withStore(func(ctx context.Context, s driver.Store) error {
				rec, err := s.Get(ctx, resource)
				if errors.Is(err, tenure.ErrNotHeld) {
					if slots, serr := slotHolders(ctx, s, resource); serr == nil && len(slots) > 0 {
						return fail(exitFree, "release: %s is a semaphore (%s); nothing released: release a slot by its name, such as %s",
							quoteName(resource), slotsSummary(slots), quoteName(slots[0].Resource))
					}
					if errors.Is(err, errNoStoreYet) {
						return fail(exitFree, "release: %s is not held: there is no tenure store at %s yet; nothing released", quoteName(resource), s.(noLeases).url)
					}
					return fail(exitFree, "release: %s is not held; nothing to release", quoteName(resource))
				}
				if err != nil {
					return storeErr(err, "release %s", quoteName(resource))
				}
				if !force && !ownerNames(owner, rec.Owner) {
					return fail(exitFree, "release: %s; not by %s: nothing released (use --force to free it anyway)", describeHolder(rec), quoteName(owner))
				}
				err = s.Release(ctx, resource, rec.Owner, rec.Token)
				if errors.Is(err, tenure.ErrLeaseLost) {
					return fail(exitFree, "release: the lease on %s changed hands or expired before it could be released; nothing released", quoteName(resource))
				}
				if err != nil {
					return storeErr(err, "release %s", quoteName(resource))
				}
				a.log.Info("lease released", "resource", resource, "owner", rec.Owner, "token", rec.Token, "force", force)
				fmt.Fprintf(a.stdout, "released %s (owner %s, token %d)\n", quoteName(resource), quoteName(rec.Owner), rec.Token)
				return nil
			})
		},
	}
	c.Flags().StringVar(&owner, "owner", "", "free it only if this holder has it (ID, ID#NONCE or ID#NONCE.N)")
	c.Flags().BoolVar(&force, "force", false, "free it whoever holds it (operators only)")
	return c
}

// ownerNames reports whether arg, the --owner of release, names the holder
// whose owner string the store keeps: the grant itself (ID#NONCE.N, also
// while ReleaseAfter keeps it, as ID#NONCE.N/kept), the Locker that made it
// (ID#NONCE: any of its grants), or its readable id (ID, the --owner of
// tenure run; for a tenure elect candidate its id without the published
// value).
func ownerNames(arg, holder string) bool {
	grant := strings.TrimSuffix(holder, naming.KeptOwner(""))
	if arg == holder || arg == grant {
		return true
	}
	if strings.Contains(arg, naming.OwnerSeparator) {
		n, ok := strings.CutPrefix(grant, arg+".")
		return ok && n != "" && strings.Trim(n, "0123456789") == ""
	}
	id, _ := naming.ParseCandidate(holder)
	return arg == tenure.OwnerID(holder) || arg == id
}
