package sqlite

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store"
)

func init() {
	store.Register(store.Driver[Config, *Store]{
		Schemes:  []string{"sqlite"},
		Usage:    "sqlite:PATH  a SQLite file shared by the processes of one host (PATH as written, '%' included; also sqlite:///abs/path, percent-decoded; parameter busy_timeout=5s)",
		Parse:    ParseURL,
		Open:     Open,
		Inspect:  func(c *Config) { c.MustExist = true },
		Init:     Init,
		CheckTTL: Config.CheckTTL,
	})
}

// ParseURL turns a sqlite: URL into a Config, without I/O:
//
//	sqlite:PATH             PATH as written, every character literal ('%' too),
//	                        relative or absolute ("~/" is the home directory)
//	sqlite:///abs/path      an absolute path, percent-decoded as in file: URLs
//	sqlite://localhost/p    the same
//	sqlite://./rel/path     a relative path (also sqlite://../rel), percent-decoded
//
// The only parameter is busy_timeout=DURATION (a positive duration such as
// 5s; see Config.BusyTimeout). Other hosts are refused: a SQLite file must
// be on the local machine. File names cannot contain '?' or '#'.
func ParseURL(raw string) (Config, error) {
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok || !strings.EqualFold(scheme, "sqlite") {
		return Config{}, urlSpec.Errorf("want %s", urlSpec.Form)
	}
	if strings.Contains(rest, "#") {
		return Config{}, urlSpec.Errorf("a file name cannot contain '#'")
	}
	p, query, _ := strings.Cut(rest, "?")
	p, err := filePath(p)
	if err != nil {
		return Config{}, urlSpec.Wrap(err)
	}
	q, err := driver.ParseQuery(query)
	if err != nil {
		return Config{}, urlSpec.Wrap(err)
	}
	cfg := Config{Path: p, BusyTimeout: q.Duration("busy_timeout", 0)}
	if err := q.Err(); err != nil {
		return Config{}, urlSpec.Wrap(err)
	}
	return cfg, nil
}

// urlSpec describes sqlite: URLs, for messages.
var urlSpec = driver.URLSpec{Store: "sqlite", Schemes: []string{"sqlite"}, Form: "sqlite:PATH, for example sqlite:/var/lib/tenure/leases.db"}

// filePath returns the file that p, a sqlite: URL without its scheme and
// query, names.
func filePath(p string) (string, error) {
	if file, ok := strings.CutPrefix(p, "//"); ok {
		host, path := file, ""
		if i := strings.IndexByte(file, '/'); i >= 0 {
			host, path = file[:i], file[i:]
		}
		switch host {
		case "", "localhost":
		case ".", "..":
			path = host + path
		default:
			return "", fmt.Errorf("sqlite://%s: a SQLite file must be local; write sqlite:PATH or sqlite:///abs/path", file)
		}
		d, err := url.PathUnescape(path)
		if err != nil {
			return "", fmt.Errorf("sqlite://%s: bad percent-encoding (in sqlite:PATH, '%%' is literal)", file)
		}
		p = d
	}
	if p == "" {
		return "", errors.New("no file name; write sqlite:PATH, for example sqlite:/var/lib/tenure/leases.db")
	}
	if strings.ContainsAny(p, "?#") {
		return "", fmt.Errorf("sqlite:%s: a file name cannot contain '?' or '#'", p)
	}
	if strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("sqlite:%s: %w", p, err)
		}
		p = filepath.Join(home, p[2:])
	}
	return p, nil
}

// OpenURL opens the store that a sqlite: URL names (see ParseURL and Open).
func OpenURL(ctx context.Context, raw string) (*Store, error) {
	return driver.OpenURL(ctx, raw, ParseURL, Open)
}
