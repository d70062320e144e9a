//go:build linux

package sqlite

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// networkFS names the file system of dir when it is one that other hosts
// share (NFS, SMB/CIFS, 9P, Ceph, AFS, Coda, Lustre, GFS2, OCFS2), or "".
// FUSE is not named: most FUSE file systems are local.
func networkFS(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Clean(dir), &st); err != nil {
		return ""
	}
	switch uint32(st.Type) {
	case 0x6969:
		return "NFS"
	case 0x517B, 0xFF534D42, 0xFE534D42:
		return "SMB/CIFS"
	case 0x01021997:
		return "9P"
	case 0x00C36400:
		return "Ceph"
	case 0x5346414F, 0x6B414653:
		return "AFS"
	case 0x73757245:
		return "Coda"
	case 0x0BD00BD0:
		return "Lustre"
	case 0x01161970:
		return "GFS2"
	case 0x7461636F:
		return "OCFS2"
	}
	return ""
}
