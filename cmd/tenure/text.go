package main

// Safe text: what tenure prints may contain strings it did not write (owner
// ids and resource names read from the store, written by other hosts;
// names given on the command line; drivers' messages). None of them may
// reach a terminal raw: a control character or an escape sequence could
// move the cursor, rewrite earlier lines or change the terminal's settings,
// and a name of 100 KB would flood it.

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// maxName is the longest name (after escaping) shown whole in a
	// message; longer ones are shortened (see shorten). Resource names and
	// owner ids are at most 256 bytes, so a valid name is shown whole unless
	// it needs many escapes.
	maxName = 300
	// maxLine is the longest message line tenure prints, in bytes.
	maxLine = 4000
)

// quoteName quotes a name for messages: in double quotes, with Go's
// escapes for quotes, backslashes, control characters, non-printing
// characters and invalid UTF-8 (strconv.Quote), shortened when long.
func quoteName(s string) string { return shorten(strconv.Quote(s), maxName) }

// display makes a name safe for a table cell or a line of output: plain
// when it is printable and has no spaces, otherwise quoted (see quoteName);
// shortened when long.
func display(s string) string {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '"' || r == '\\' }) || !utf8.ValidString(s) {
		return quoteName(s)
	}
	return shorten(s, maxName)
}

// escapeText returns s with every character that is not printable (control
// characters, escape sequences, bidirectional overrides and other format
// characters, invalid UTF-8) replaced by its Go escape, such as \x1b or
// \u202e. Printable text, spaces included, is left as it is.
func escapeText(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) && r != ' ' }) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == ' ' || unicode.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// shorten returns s when it has at most limit bytes, and otherwise its
// start and end around "…", with the number of bytes left out, within
// about limit bytes and without cutting a character in two.
func shorten(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	keep := limit - 40
	head, tail := keep*2/3, keep/3
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	start := len(s) - tail
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return fmt.Sprintf("%s…(%d bytes)…%s", s[:head], start-head, s[start:])
}

// libraryLog is the logger given to the library (Locker, election): a.log,
// except that the library's "lease lost" warning is logged at debug level,
// because run and elect say the same in a sentence of their own on stderr
// (the warning and the sentence both appeared, one after the other).
func (a *app) libraryLog() *slog.Logger {
	return slog.New(demoteHandler{Handler: a.log.Handler(), msgs: map[string]bool{"lease lost": true}})
}

// demoteHandler logs records whose message is in msgs at debug level.
type demoteHandler struct {
	slog.Handler
	msgs map[string]bool
}

func (h demoteHandler) Enabled(ctx context.Context, l slog.Level) bool {
	// The message is not known here: let records through that the inner
	// handler takes at any level, and decide in Handle.
	return h.Handler.Enabled(ctx, l) || h.Handler.Enabled(ctx, slog.LevelDebug)
}

func (h demoteHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.msgs[r.Message] && r.Level > slog.LevelDebug {
		r.Level = slog.LevelDebug
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h demoteHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return demoteHandler{Handler: h.Handler.WithAttrs(as), msgs: h.msgs}
}

func (h demoteHandler) WithGroup(name string) slog.Handler {
	return demoteHandler{Handler: h.Handler.WithGroup(name), msgs: h.msgs}
}
