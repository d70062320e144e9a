package main

import (
	"runtime/debug"
	"testing"

	"github.com/tenure-go/tenure"
)

// The release comes from the module version when Go recorded one, and from
// tenure.Version otherwise (a build from a clone without VCS stamping).
func TestVersionLine(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"go install of a tag", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.2.0"}}, "tenure 0.2.0 go1.26.0"},
		{"a clone, devel", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs}, "tenure " + tenure.Version + " (commit abc123, modified) go1.26.8"},
		{"no version recorded", &debug.BuildInfo{GoVersion: "go1.26.8"}, "tenure " + tenure.Version + " go1.26.8"},
		{"a pseudo-version", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.1-0.20261204171205-2611742abcde"}, Settings: vcs[:1]}, "tenure 0.1.1-0.20261204171205-2611742abcde (commit abc123) go1.26.8"},
		{"a clone without tags", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261205044512-0fa4d8d1a2b3+dirty"}, Settings: vcs}, "tenure " + tenure.Version + " (commit abc123, modified) go1.26.8"},
		{"no build information", nil, "tenure " + tenure.Version},
	} {
		if got := versionLine(c.bi); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
