//go:build !unix

package sqlite

import (
	"os"
	"path/filepath"
)

// fileKey identifies a file by its absolute path where no inode is known.
func fileKey(_ os.FileInfo, path string) any {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}
