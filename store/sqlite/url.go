package sqlite

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

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
		return Config{}, errors.New("sqlite store: want sqlite:PATH")
	}
	if strings.Contains(rest, "#") {
		return Config{}, errors.New("sqlite store: a file name cannot contain '#'")
	}
	p, query, _ := strings.Cut(rest, "?")
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
			return Config{}, fmt.Errorf("sqlite store: sqlite://%s: a SQLite file must be local; write sqlite:PATH or sqlite:///abs/path", file)
		}
		d, err := url.PathUnescape(path)
		if err != nil {
			return Config{}, fmt.Errorf("sqlite store: sqlite://%s: bad percent-encoding (in sqlite:PATH, '%%' is literal)", file)
		}
		p = d
	}
	if p == "" {
		return Config{}, errors.New("sqlite store: no file name; write sqlite:PATH, for example sqlite:/var/lib/tenure/leases.db")
	}
	if strings.ContainsAny(p, "?#") {
		return Config{}, fmt.Errorf("sqlite store: sqlite:%s: a file name cannot contain '?' or '#'", p)
	}
	if strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return Config{}, fmt.Errorf("sqlite store: sqlite:%s: %w", p, err)
		}
		p = filepath.Join(home, p[2:])
	}
	cfg := Config{Path: p}
	q, err := url.ParseQuery(query)
	if err != nil {
		return Config{}, fmt.Errorf("sqlite store: bad query %q", query)
	}
	for key, vals := range q {
		v := vals[len(vals)-1]
		switch key {
		case "busy_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return Config{}, fmt.Errorf("sqlite store: busy_timeout=%q is not a positive duration such as 5s", v)
			}
			cfg.BusyTimeout = d
		default:
			return Config{}, fmt.Errorf("sqlite store: unknown parameter %q (the only one is busy_timeout)", key)
		}
	}
	return cfg, nil
}
