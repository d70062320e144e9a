package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// defaultSQLitePathDoc describes defaultSQLitePath for help texts.
const defaultSQLitePathDoc = "$XDG_STATE_HOME/tenure/leases.db (or ~/.local/state/tenure/leases.db)"

// defaultSQLitePath returns the default SQLite file:
// $XDG_STATE_HOME/tenure/leases.db, or ~/.local/state/tenure/leases.db when
// XDG_STATE_HOME is unset or not an absolute path (as the XDG Base Directory
// specification asks). It creates nothing.
func defaultSQLitePath() (string, error) {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" || !filepath.IsAbs(dir) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no default store: neither XDG_STATE_HOME nor a home directory is set: %w", err)
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "tenure", "leases.db"), nil
}

// makeDefaultDir creates the directory of the default SQLite file, with
// mode 0700, when neither --store nor $TENURE_STORE names a store: for the
// commands that may create the store (run, elect, init).
func (a *app) makeDefaultDir() error {
	if a.storeURL != "" || strings.TrimSpace(os.Getenv(envStore)) != "" {
		return nil
	}
	p, err := defaultSQLitePath()
	if err != nil {
		return fail(exitUnavailable, "%s", errText(err))
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fail(exitUnavailable, "create the default store directory: %s", errText(err))
	}
	return nil
}

// setDriverLoggers sends what store drivers log on their own (go-redis
// prints dial failures) to tenure's logger at debug level, instead of raw
// lines on stderr, and what tenure's stores log (a notification connection
// lost and replaced; they log to slog.Default() unless configured) to
// tenure's logger as it is.
func setDriverLoggers(log *slog.Logger) {
	goredis.SetLogger(driverLog{log.With("driver", "go-redis")})
	slog.SetDefault(log)
}

type driverLog struct{ log *slog.Logger }

func (d driverLog) Printf(ctx context.Context, format string, v ...any) {
	d.log.DebugContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)))
}
