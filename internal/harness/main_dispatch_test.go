package harness

import (
	"bytes"
	"strings"
	"testing"
)

// Main prints the usage and exits 2 without a subcommand or with an
// unknown one, 0 for help, and hands the rest to the subcommand.
func TestMainDispatch(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{nil, ExitUsage},
		{[]string{"frobnicate"}, ExitUsage},
		{[]string{"help"}, ExitOK},
		{[]string{"check"}, ExitUsage}, // check without -out
	} {
		var out, errb bytes.Buffer
		if got := Main(c.args, &out, &errb, "usage: test"); got != c.code {
			t.Errorf("Main(%q) = %d, want %d; stderr %q", c.args, got, c.code, errb.String())
		}
		if c.code != ExitOK && len(c.args) < 1 && !strings.Contains(errb.String(), "usage: test") {
			t.Errorf("Main(%q) printed %q, not the usage", c.args, errb.String())
		}
	}
}
