//go:build !linux

package netfault

import "net"

// listen listens on a free TCP port of host. The backlog is the system's:
// Partition cannot fill it, so new connections are accepted and black-holed.
func listen(host string) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort(host, "0"))
}
