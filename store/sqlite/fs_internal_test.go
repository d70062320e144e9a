package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// Open refuses a database on a network file system reached through a
// symbolic link in a local directory, to an existing file or a dangling
// one (found by an adversarial review: the check looked only at the
// directory of the path as written).
func TestOpenRefusesNetworkFSThroughSymlink(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	nfs, local := filepath.Join(root, "nfs"), filepath.Join(root, "local")
	for _, d := range []string{nfs, local} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := fsOf
	fsOf = func(dir string) string { // nfs/ is an NFS mount
		if r, err := filepath.EvalSymlinks(dir); err == nil && r == nfs || dir == nfs {
			return "NFS"
		}
		return ""
	}
	defer func() { fsOf = old }()
	if _, err := Open(ctx, Config{Path: filepath.Join(nfs, "leases.db")}); err == nil {
		t.Fatal("a file in nfs/ was not refused")
	}
	// A dangling link (the file does not exist yet), then a link to an
	// existing file, and a relative one.
	cases := []struct{ name, target string }{
		{"dangling", filepath.Join(nfs, "new.db")},
		{"existing", filepath.Join(nfs, "old.db")},
		{"relative", filepath.Join("..", "nfs", "rel.db")},
	}
	if err := os.WriteFile(filepath.Join(nfs, "old.db"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		link := filepath.Join(local, c.name+".db")
		if err := os.Symlink(c.target, link); err != nil {
			t.Fatal(err)
		}
		if s, err := Open(ctx, Config{Path: link}); err == nil {
			s.Close()
			t.Errorf("%s: Open through a symlink in a local directory accepted a file on NFS", c.name)
		}
	}
	if _, err := os.Stat(filepath.Join(nfs, "new.db")); err == nil {
		t.Error("the refused Open created the file on NFS")
	}
}
