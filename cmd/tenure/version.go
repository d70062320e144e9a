package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func (a *app) newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print tenure's version, the commit it was built from, and the Go version",
		Long: `Version prints the tenure module's version ("(devel)" for a build from a
checkout), the VCS commit and whether the work tree had changes, and the Go
toolchain that built the binary, from the build information Go embeds
(runtime/debug.ReadBuildInfo). It touches no store. Exit codes: 0; 74 when
the line could not be written.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprintln(c.OutOrStdout(), versionLine())
			return nil
		},
	}
}

// versionLine is "tenure VERSION (commit REV[, modified]) GOVERSION".
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "tenure (no build information)"
	}
	line := "tenure " + bi.Main.Version
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
	return line + " " + bi.GoVersion
}
