package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/tenure-go/tenure/driver"
)

// ErrFileReplaced is wrapped by the errors of a store whose database file
// was deleted, or replaced by another file (the path now names another
// inode), after the store opened it. SQLite keeps working on the file it
// opened, which nobody else can find any more, so every lease in it is
// lost: Renew and Release return an error wrapping both ErrFileReplaced and
// driver.ErrLeaseLost, and Acquire, Get, List and RenewBatch fail with
// ErrFileReplaced from then on. Open the store again to use the file now at
// the path. Every such error also matches driver.ErrStoreUnusable
// (tenure.ErrStoreUnusable), so that a Locker's blocking Acquire returns it
// instead of waiting for a store that cannot come back.
var ErrFileReplaced = errors.New("sqlite store: the database file was deleted or replaced")

// replacedError says how the file at the store's path changed.
type replacedError struct{ path, how string }

func (e *replacedError) Error() string {
	return fmt.Sprintf("%s %s since this store opened it: the leases in the file it opened are lost "+
		"(open the store again to use the file now at that path)", e.path, e.how)
}

func (e *replacedError) Is(target error) bool {
	return target == ErrFileReplaced || target == driver.ErrStoreUnusable
}

// checkFile compares the file at the store's path with the one it opened
// (device and inode on Unix): one stat. Once the file is found deleted or
// replaced, the store stays so.
func (s *Store) checkFile() error {
	if err := s.gone.Load(); err != nil {
		return *err
	}
	fi, err := os.Stat(s.path)
	var rerr error
	switch {
	case errors.Is(err, fs.ErrNotExist):
		rerr = &replacedError{s.path, "was deleted"}
	case err != nil:
		return fmt.Errorf("sqlite store: check that %s is the file this store opened: %w", s.path, err)
	case !os.SameFile(fi, s.file):
		rerr = &replacedError{s.path, "was replaced by another file"}
	default:
		return nil
	}
	s.gone.CompareAndSwap(nil, &rerr)
	return *s.gone.Load()
}

// leftoverLog returns the write-ahead log or shared-memory file of path that
// exists while path itself does not, or "". SQLite would use it for a new
// file at path: it belongs to a database that was deleted, perhaps while
// processes still use it, and mixing the two corrupts both. The log is
// looked for first: SQLite creates it after the database file, so a
// database that other processes are creating at this moment is not taken
// for a deleted one.
func leftoverLog(path string) string {
	for _, suffix := range []string{"-wal", "-shm"} {
		if _, err := os.Lstat(path + suffix); err == nil {
			if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
				return path + suffix
			}
			return ""
		}
	}
	return ""
}
