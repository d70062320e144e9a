package netfault

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// listen listens on a free TCP port of host with a listen backlog of 0, so
// that one connection waiting to be accepted fills the queue (Partition).
func listen(host string) (net.Listener, error) {
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Is4() {
		return net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netfault: socket: %w", err)
	}
	sa := &unix.SockaddrInet4{Addr: ip.As4()}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netfault: bind %s: %w", host, err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netfault: listen: %w", err)
	}
	f := os.NewFile(uintptr(fd), "netfault-listener")
	defer f.Close()
	return net.FileListener(f)
}
