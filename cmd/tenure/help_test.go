package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

// screenRows is one screen of a terminal; screenCols its width.
const (
	screenRows = 40
	screenCols = 80
)

// rows is the number of terminal rows text takes at screenCols columns.
func rows(text string) int {
	n := 0
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		n += max(1, (utf8.RuneCountInString(line)+screenCols-1)/screenCols)
	}
	return n
}

// helpOf runs tenure with args in this process and returns its exit code
// and standard output.
func helpOf(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(args, os.Stdin, &stdout, &stderr)
	if code == 0 && stderr.Len() > 0 {
		t.Errorf("tenure %s: stderr %q", strings.Join(args, " "), stderr.String())
	}
	return code, stdout.String()
}

// commandPaths returns the path (without "tenure") of every command a user
// can run, the root included, and of every help topic.
func commandPaths(t *testing.T) (commands, topics [][]string) {
	t.Helper()
	root := (&app{}).newRoot()
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		switch {
		case c.IsAdditionalHelpTopicCommand():
			topics = append(topics, path)
			return
		case c.Hidden:
			return
		}
		commands = append(commands, path)
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	root.InitDefaultHelpCmd()
	walk(root, nil)
	return commands, topics
}

// Every command's --help starts with its usage and fits a screen of 80
// columns before its first example (the long explanations are help topics
// and the reference in docs/cli); every help topic fits a longer page.
func TestHelpFitsAScreen(t *testing.T) {
	commands, topics := commandPaths(t)
	if len(commands) < 9 || len(topics) < 5 {
		t.Fatalf("found %d commands and %d topics: %q %q", len(commands), len(topics), commands, topics)
	}
	for _, path := range commands {
		name := strings.TrimSpace("tenure " + strings.Join(path, " "))
		code, out := helpOf(t, append(path, "--help")...)
		if code != 0 {
			t.Errorf("%s --help: exit %d", name, code)
			continue
		}
		if first, _, _ := strings.Cut(out, "\n"); first != "Usage:" {
			t.Errorf("%s --help begins with %q, want Usage:", name, first)
		}
		before, _, _ := strings.Cut(out, "\nExamples:\n")
		if n := rows(before); n > screenRows {
			t.Errorf("%s --help takes %d rows of %d columns before its examples, want at most %d:\n%s", name, n, screenCols, screenRows, before)
		}
		t.Logf("%s --help: %d rows before the examples, %d in all", name, rows(before), rows(out))
	}
	for _, path := range topics {
		code, out := helpOf(t, append([]string{"help"}, path...)...)
		if code != 0 || strings.Count(out, "\n") < 5 {
			t.Errorf("tenure help %s: exit %d:\n%s", strings.Join(path, " "), code, out)
		}
		if n := rows(out); n > screenRows+10 {
			t.Errorf("tenure help %s takes %d rows, want at most %d:\n%s", strings.Join(path, " "), n, screenRows+10, out)
		}
	}
}

// The root's help lists every topic.
func TestHelpTopics(t *testing.T) {
	_, out := helpOf(t, "--help")
	for _, topic := range helpTopics() {
		if !strings.Contains(out, "\n  "+topic.Name()+" ") {
			t.Errorf("tenure --help does not list the topic %s:\n%s", topic.Name(), out)
		}
	}
}
