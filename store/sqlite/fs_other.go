//go:build !linux

package sqlite

// networkFS is not known outside Linux.
func networkFS(string) string { return "" }
