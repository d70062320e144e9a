//go:build unix

package sqlite

import (
	"os"
	"syscall"
)

// fileKey identifies a file: its device and inode.
func fileKey(fi os.FileInfo, path string) any {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return [2]uint64{uint64(st.Dev), uint64(st.Ino)}
	}
	return path
}
