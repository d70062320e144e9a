package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tenure-go/tenure"
)

func (a *app) newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print tenure's release, commit and Go version",
		Long: `Print one line: tenure's release, the commit it was built from (with
", modified" when the work tree had changes) and the Go toolchain that
built it. The release is the module version when tenure was installed with
"go install github.com/tenure-go/tenure/cmd/tenure@VERSION", and otherwise
the release of the source tree it was built from. No store is opened.`,
		Example: `  tenure version
  # prints, for example: tenure 0.1.0 go1.26.8`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			bi, ok := debug.ReadBuildInfo()
			if !ok {
				bi = nil
			}
			fmt.Fprintln(c.OutOrStdout(), versionLine(bi))
			return nil
		},
	}
}

// versionLine is "tenure RELEASE (commit REV[, modified]) GOVERSION" for
// the build information bi (nil when the binary has none). RELEASE is the
// main module's version without its "v" when Go recorded one (go install
// of a tagged module, or a build in a clone that Go stamped with a
// pseudo-version after a release tag), and tenure.Version otherwise
// ("(devel)", none, or a pseudo-version of a history without a release
// tag, v0.0.0-…, which names no release).
func versionLine(bi *debug.BuildInfo) string {
	release := tenure.Version
	if bi == nil {
		return "tenure " + release
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" && !untagged(v) {
		release = strings.TrimPrefix(v, "v")
	}
	line := "tenure " + release
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		line += " (commit " + rev
		if modified == "true" {
			line += ", modified"
		}
		line += ")"
	}
	if bi.GoVersion != "" {
		line += " " + bi.GoVersion
	}
	return line
}

// untagged reports whether v is a Go pseudo-version of a commit with no
// release tag before it: v0.0.0-yyyymmddhhmmss-abcdefabcdef, perhaps with
// "+dirty" (https://go.dev/ref/mod#pseudo-versions).
func untagged(v string) bool {
	rest, ok := strings.CutPrefix(v, "v0.0.0-")
	if !ok {
		return false
	}
	rest, _, _ = strings.Cut(rest, "+")
	stamp, rev, ok := strings.Cut(rest, "-")
	return ok && len(stamp) == 14 && len(rev) == 12 && strings.Trim(stamp, "0123456789") == "" && strings.Trim(rev, "0123456789abcdef") == ""
}
