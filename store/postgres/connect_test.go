package postgres_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/tenure-go/tenure/store/postgres"
)

// A server that cannot be reached is reported once per address, with every
// address named, however many attempts pgx made (sslmode=prefer makes two
// per address), and the error still matches the dial's (new-user review:
// each dial error came twice).
func TestConnectErrorOncePerAddress(t *testing.T) {
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close()
	}
	_, err := postgres.OpenURL(context.Background(), "postgres://bob:secret@"+strings.Join(addrs, ",")+"/x?connect_timeout=2")
	if err == nil {
		t.Fatal("Open: no error")
	}
	msg := err.Error()
	for _, a := range addrs {
		if n := strings.Count(msg, "dial tcp "+a+": connect: connection refused"); n != 1 {
			t.Errorf("the dial error of %s appears %d times in %q", a, n, msg)
		}
	}
	if !strings.Contains(msg, "bob@"+strings.Join(addrs, ",")+"/x") || strings.Contains(msg, "secret") {
		t.Errorf("%q: want every address named, and no password", msg)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("%v does not match ECONNREFUSED", err)
	}
}
