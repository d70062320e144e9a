//go:build linux

// Package timens reads the clock offsets of the Linux time namespace the
// process is in (time_namespaces(7)): unshare --time, and the
// checkpoint/restore of CRIU and podman, give a namespace's processes a
// CLOCK_MONOTONIC and a CLOCK_BOOTTIME offset from the host's, while the
// boot id and the wall clock stay the host's.
package timens

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// timensFile is /proc/self/timens_offsets kept open (reading it again at
// offset 0 regenerates it), or nil on kernels without time namespaces.
var timensFile = func() *os.File {
	f, err := os.Open("/proc/self/timens_offsets")
	if err != nil {
		return nil
	}
	return f
}()

// BoottimeOffset returns the CLOCK_BOOTTIME offset of the process's time
// namespace, read now from /proc/self/timens_offsets (a restored process
// may find itself in a namespace with another offset than before): zero
// outside one, and on kernels without time namespaces (before 5.6). The
// host's CLOCK_BOOTTIME is the process's reading minus the offset. Safe for
// concurrent use; one pread(2).
func BoottimeOffset() (time.Duration, error) {
	if timensFile == nil {
		return 0, nil
	}
	var buf [256]byte
	n, err := timensFile.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("read the time namespace's clock offsets: %w", err)
	}
	return ParseBoottimeOffset(buf[:n])
}

// ParseBoottimeOffset reads the boottime line of a timens_offsets file:
// "boottime <seconds> <nanoseconds>", seconds possibly negative,
// nanoseconds from 0 to 999,999,999 (time_namespaces(7)).
func ParseBoottimeOffset(b []byte) (time.Duration, error) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		f := bytes.Fields(line)
		if len(f) != 3 || string(f[0]) != "boottime" {
			continue
		}
		secs, err1 := strconv.ParseInt(string(f[1]), 10, 64)
		nsecs, err2 := strconv.ParseInt(string(f[2]), 10, 64)
		if err1 != nil || err2 != nil || nsecs < 0 || nsecs > 999_999_999 || secs > 1<<32 || secs < -(1<<32) {
			return 0, fmt.Errorf("the time namespace's boottime offset %q is not <seconds> <nanoseconds>", line)
		}
		return time.Duration(secs)*time.Second + time.Duration(nsecs), nil
	}
	return 0, nil
}
