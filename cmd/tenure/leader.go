package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/election"
)

func (a *app) newLeaderCmd() *cobra.Command {
	var watch, asJSON bool
	var interval time.Duration
	c := &cobra.Command{
		Use:   "leader [--watch] [--json] [--interval D] RESOURCE",
		Short: "Show who leads the election on RESOURCE, and with --watch each change",
		Long: `tenure leader [--watch] [--json] [--interval D] RESOURCE

Leader prints the leader of the election on RESOURCE ("tenure elect"): its
id, the value it publishes (--value of tenure elect) and its fencing token.
With --watch it goes on, and prints a line, with the time, at each change
(a new term, or no leader), until interrupted. Changes are seen at once
where the store notifies releases, at the expiry of the leader's lease,
and otherwise within --interval; where there is no store yet, from when
one is made. With --json each line is a JSON object:
resource, held, owner, owner_id, value, token, ttl_ms, remaining_ms (and
time, with --watch). Names from the store are quoted when they contain
spaces or characters that do not print. It creates nothing and changes no
lease.

Exit codes: 0 a leader (with --watch: stopped by SIGINT, SIGTERM or
SIGHUP); 1 no leader (also where there is no store yet); 64 bad
arguments; 69 the store cannot be opened or reached at start; 74 the
output cannot be written.`,
		Example: `  tenure leader sampling-calculator
  tenure leader --watch --json sampling-calculator | jq -r .value`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usage("leader: expected one RESOURCE, got %d arguments%s; usage: tenure leader [--watch] [--json] RESOURCE", len(args), dashHint(c, args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			resource := args[0]
			if err := driver.ValidateResource(resource); err != nil {
				return usage("leader: resource %s: %s", quoteName(resource), errText(err))
			}
			if interval <= 0 {
				return usage("leader: --interval %v: the interval must be positive, such as 1s", interval)
			}
			return a.leader(resource, watch, asJSON, interval)
		},
	}
	fl := c.Flags()
	fl.BoolVar(&watch, "watch", false, "print each change of leader as it happens, until interrupted")
	fl.BoolVar(&asJSON, "json", false, "print JSON, one object per line")
	fl.DurationVar(&interval, "interval", election.DefaultPollInterval, "with --watch: the longest time between two reads of the leader")
	return c
}

// leaderJSON is a leader as "tenure leader --json" prints it: the fields
// of status --json, and with --watch the time it was observed.
type leaderJSON struct {
	leaseJSON
	Time string `json:"time,omitempty"`
}

func (a *app) leader(resource string, watch, asJSON bool, interval time.Duration) error {
	u, err := a.parseStore()
	if err != nil {
		return err
	}
	sigCh := make(chan os.Signal, 4)
	signal.Notify(sigCh, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigCh)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-sigCh:
			cancel()
		case <-ctx.Done():
		}
	}()

	s, err := a.inspectStore(ctx, u)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	var last election.Leader // the leader printed last; none yet
	printed := false
	if _, none := s.(noLeases); none && watch {
		// No store yet, so no leader: say so, and look for the store
		// every interval (tenure elect or init may create it).
		if err := a.printLeader(resource, last, watch, asJSON); err != nil {
			return err
		}
		printed = true
		for none {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(interval):
			}
			if next, err := a.inspectStore(ctx, u); err != nil {
				a.log.Debug("store not opened", "store", u.String(), "err", err)
			} else {
				s = next
				_, none = s.(noLeases)
			}
		}
	}
	defer s.Close()
	o, err := election.NewObserver(s, election.ObserverConfig{Resource: resource, PollInterval: interval, Logger: a.log})
	if err != nil {
		return usage("leader: %s", errText(err))
	}
	// The first read fails as status does when the store cannot be read.
	rctx, rcancel := context.WithTimeout(ctx, storeTimeout)
	first, err := o.Leader(rctx)
	rcancel()
	switch {
	case ctx.Err() != nil:
		return nil
	case err != nil && !errors.Is(err, election.ErrNoLeader) && !errors.Is(err, driver.ErrNoStore):
		return storeErr(err, "leader %s", quoteName(resource))
	}
	if !printed || !sameLeader(first, last) {
		if err := a.printLeader(resource, first, watch, asJSON); err != nil {
			return err
		}
	}
	if !watch {
		if first.Owner == "" {
			return exitWith(exitFree)
		}
		return nil
	}
	last = first
	for l := range o.Observe(ctx) {
		if sameLeader(l, last) {
			continue // the observer's first observation, already printed
		}
		last = l
		if err := a.printLeader(resource, l, watch, asJSON); err != nil {
			return err
		}
	}
	return nil
}

// sameLeader reports whether a and b are the same term (or both nobody).
func sameLeader(a, b election.Leader) bool {
	return a.Owner == b.Owner && a.Token == b.Token
}

// printLeader prints l, the leader of resource (the zero Leader: none), as
// one line.
func (a *app) printLeader(resource string, l election.Leader, watch, asJSON bool) error {
	now := time.Now()
	if asJSON {
		j := leaderJSON{leaseJSON: leaseJSON{Resource: resource}}
		if l.Owner != "" {
			j.leaseJSON = toJSON(tenure.Record{Resource: resource, Owner: l.Owner, Token: l.Token, TTL: l.TTL, Remaining: l.Remaining})
		}
		if watch {
			j.Time = now.Format(time.RFC3339Nano)
		}
		b, err := json.Marshal(j)
		if err != nil {
			return fail(exitSoftware, "write JSON: %v", err)
		}
		_, err = fmt.Fprintf(a.stdout, "%s\n", b)
		return err
	}
	var line string
	if l.Owner == "" {
		line = fmt.Sprintf("%s has no leader", quoteName(resource))
	} else {
		var parts []string
		if l.Value != "" {
			parts = append(parts, "value "+display(l.Value))
		}
		parts = append(parts, "token "+tokenCell(l.Token))
		if l.Remaining > 0 {
			parts = append(parts, fmtDur(l.Remaining)+" left")
		}
		line = fmt.Sprintf("%s is led by %s (%s)", quoteName(resource), display(l.Identity), strings.Join(parts, ", "))
	}
	if watch {
		line = now.Format("15:04:05.000") + " " + line
	}
	_, err := fmt.Fprintln(a.stdout, line)
	return err
}
