package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/sqlite"
)

func init() {
	Register("sqlite", openSQLite,
		"sqlite:PATH  a SQLite file shared by the processes of one host (also sqlite:///abs/path; parameter busy_timeout=5s)")
}

// SQLitePath returns the file that a sqlite: URL names:
//
//	sqlite:PATH             PATH as written, relative or absolute ("~/" is the home directory)
//	sqlite:///abs/path      an absolute path (percent-decoded, as in file: URLs)
//	sqlite://localhost/p    the same
//	sqlite://./rel/path     a relative path (also sqlite://../rel)
//
// Other hosts are refused: a SQLite file must be on the local machine.
func SQLitePath(u *url.URL) (string, error) {
	var p string
	switch {
	case u.Opaque != "":
		p = u.Opaque
	case u.Host == "" || u.Host == "localhost":
		p = u.Path
	case u.Host == "." || u.Host == "..":
		p = u.Host + u.Path
	default:
		return "", fmt.Errorf("%w: sqlite:%s: a SQLite file must be local; write sqlite:PATH or sqlite:///abs/path", ErrBadURL, "//"+u.Host+u.Path)
	}
	if u.Fragment != "" {
		return "", fmt.Errorf("%w: sqlite: a file name cannot contain '#'", ErrBadURL)
	}
	if p == "" {
		return "", fmt.Errorf("%w: sqlite: no file name; write sqlite:PATH, for example sqlite:/var/lib/tenure/leases.db", ErrBadURL)
	}
	if strings.ContainsAny(p, "?#") {
		return "", fmt.Errorf("%w: sqlite:%s: a file name cannot contain '?' or '#'", ErrBadURL, p)
	}
	if strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("%w: sqlite:%s: %w", ErrBadURL, p, err)
		}
		p = filepath.Join(home, p[2:])
	}
	return p, nil
}

func openSQLite(ctx context.Context, raw string) (driver.Store, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: %q: %v", ErrBadURL, raw, err)
	}
	path, err := SQLitePath(u)
	if err != nil {
		return nil, err
	}
	var opts []sqlite.Option
	for key, vals := range u.Query() {
		switch key {
		case "busy_timeout":
			d, err := time.ParseDuration(vals[len(vals)-1])
			if err != nil || d < 0 {
				return nil, fmt.Errorf("%w: sqlite: busy_timeout=%q is not a duration such as 5s", ErrBadURL, vals[len(vals)-1])
			}
			opts = append(opts, sqlite.WithBusyTimeout(d))
		default:
			return nil, fmt.Errorf("%w: sqlite: unknown parameter %q (the only one is busy_timeout)", ErrBadURL, key)
		}
	}
	s, err := sqlite.Open(ctx, path, opts...)
	if err != nil {
		return nil, err
	}
	return s, nil
}
