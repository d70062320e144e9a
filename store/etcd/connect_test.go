package etcd_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-go/tenure/store/etcd"
)

// An etcd that cannot be reached is reported with why, not only with the
// client's "context deadline exceeded" (new-user review).
func TestOpenSaysWhyNoEndpointAnswered(t *testing.T) {
	// A port that refuses: listen, note the address, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = etcd.Open(context.Background(), etcd.Config{Client: clientv3.Config{Endpoints: []string{addr}, DialTimeout: 300 * time.Millisecond}})
	if err == nil {
		t.Fatalf("Open %s: no error", addr)
	}
	if msg := err.Error(); !strings.Contains(msg, "no endpoint could be reached") || !strings.Contains(msg, "connection refused") {
		t.Fatalf("Open %s: %v; want the dial's error", addr, err)
	}
}
