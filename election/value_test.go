package election_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/election"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

func TestValidateValue(t *testing.T) {
	for _, v := range []string{"", "10.0.0.5:8080", "http://web-1:80/path#frag", "a|b", "100%", "%23", "ünïcødé 中文", "with space", strings.Repeat("x", election.MaxValueLen)} {
		if err := election.ValidateValue(v); err != nil {
			t.Errorf("ValidateValue(%q): %v", v, err)
		}
	}
	for _, v := range []string{strings.Repeat("x", election.MaxValueLen+1), "\xff", "a\nb", "a\tb", "\x1b[31mred", "\u202eevil", "nul\x00", "del\x7f", "\u0085"} {
		if err := election.ValidateValue(v); !errors.Is(err, tenure.ErrInvalidOwner) {
			t.Errorf("ValidateValue(%q) = %v; want ErrInvalidOwner", v, err)
		}
	}
}

// A candidate's identity and published value come back apart from every
// owner string of its grants, whatever the value holds ('%', '#', '|').
func TestParseOwnerRoundTrip(t *testing.T) {
	for _, v := range []string{"", "10.0.0.5:8080", "h:80/#x%|y", "%23%25", "|", "ü"} {
		c, err := election.New(memory.New(), election.Config{Resource: "e", Identity: "web-1:4711", Value: v})
		if err != nil {
			t.Fatalf("value %q: %v", v, err)
		}
		if c.Identity() != "web-1:4711" || c.Value() != v {
			t.Fatalf("value %q: Identity %q, Value %q", v, c.Identity(), c.Value())
		}
		for _, owner := range []string{c.Owner() + ".7", naming.KeptOwner(c.Owner() + ".7")} {
			id, got := election.ParseOwner(owner)
			if id != "web-1:4711" || got != v {
				t.Errorf("ParseOwner(%q) = %q, %q; want web-1:4711, %q", owner, id, got, v)
			}
		}
	}
	// Owner strings a candidate cannot have written: the whole readable id
	// is the identity, and there is no value.
	for owner, id := range map[string]string{
		"jaeger-host-3":              "jaeger-host-3",
		"web-1#0123456789abcdef.1":   "web-1",
		"a|%zz#0123456789abcdef.1":   "a|%zz",
		"a|#0123456789abcdef.1":      "a|",
		"a|\x1b[2J#0123456789abcd.1": "a|\x1b[2J",
		"a|%0a#0123456789abcdef.1":   "a|%0a",
	} {
		if gotID, v := election.ParseOwner(owner); gotID != id || v != "" {
			t.Errorf("ParseOwner(%q) = %q, %q; want %q and no value", owner, gotID, v, id)
		}
	}
}

// Bad identities and values are refused by New, before any I/O.
func TestNewRefusesBadValues(t *testing.T) {
	f := storetest.NewFaulty(memory.New())
	long := strings.Repeat("h", 150)
	for name, cfg := range map[string]election.Config{
		"identity with separator": {Identity: "a|b"},
		"value too long":          {Value: strings.Repeat("v", election.MaxValueLen+1)},
		"value with newline":      {Value: "10.0.0.5\n:80"},
		"value with escape":       {Value: "\x1b]0;pwned\x07"},
		"value not UTF-8":         {Value: "\xc3"},
		"identity and value long": {Identity: long, Value: strings.Repeat("v", 60)},
		"negative hand-over":      {HandOverTimeout: -time.Second},
	} {
		cfg.Resource = "e"
		if _, err := election.New(f, cfg); err == nil {
			t.Errorf("%s: accepted", name)
		} else if name != "negative hand-over" && !errors.Is(err, tenure.ErrInvalidOwner) {
			t.Errorf("%s: %v; want ErrInvalidOwner", name, err)
		}
		if err := election.ValidateIdentity(cfg.Identity, cfg.Value); err == nil && name != "negative hand-over" {
			t.Errorf("%s: ValidateIdentity accepted", name)
		}
	}
	for _, op := range []string{storetest.OpAcquire, storetest.OpGet, storetest.OpRenew, storetest.OpRelease} {
		if n := f.Calls(op); n != 0 {
			t.Fatalf("%d %s calls for configurations that were refused", n, op)
		}
	}
	// 150 + 1 + 49 = 200 bytes fit.
	if _, err := election.New(f, election.Config{Resource: "e", Identity: long, Value: strings.Repeat("v", 49)}); err != nil {
		t.Fatalf("identity and value of 200 bytes: %v", err)
	}
}

// The leader's published value is returned by Leader, to candidates and
// observers alike, and stays the same over the term's renewals.
func TestLeaderReturnsThePublishedValue(t *testing.T) {
	mem := memory.New()
	ev := newEvents()
	a, _ := election.New(mem, ev.config(election.Config{Resource: "e", Identity: "a", Value: "10.0.0.5:8080", TTL: time.Second, RetryPeriod: 10 * time.Millisecond}))
	b, _ := election.New(mem, election.Config{Resource: "e", Identity: "b", Value: "10.0.0.6:8080", TTL: time.Second})
	ctx := ctxT(t)
	go a.Run(ctx)
	defer a.Resign(context.Background())
	recv(t, ev.started, "a leads")
	o, err := election.NewObserver(mem, election.ObserverConfig{Resource: "e"})
	if err != nil {
		t.Fatal(err)
	}
	for _, get := range []func(context.Context) (election.Leader, error){a.Leader, b.Leader, o.Leader} {
		l, err := get(ctx)
		if err != nil || l.Identity != "a" || l.Value != "10.0.0.5:8080" || l.Token == 0 {
			t.Fatalf("Leader = %+v, %v", l, err)
		}
	}
	lease := a.Lease()
	if err := lease.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if l, _ := o.Leader(ctx); l.Value != "10.0.0.5:8080" || l.Owner != lease.Owner() {
		t.Fatalf("after a renewal: %+v", l)
	}
}
