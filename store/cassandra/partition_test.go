package cassandra_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/cassandra"
)

// TestBoundedWhenPartitioned: a Locker's calls end by their bounds when the
// node's connections go silent and new ones never complete (a partition),
// as on the other network stores.
func TestBoundedWhenPartitioned(t *testing.T) {
	needSingle(t)
	proxy, err := netfault.Start(single)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	host, port, err := net.SplitHostPort(proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	pport, _ := strconv.Atoi(port)
	pip := net.ParseIP(host)
	s := openStore(t, cassandra.ModeNative, func(c *cassandra.Config) {
		c.Hosts = []string{proxy.Addr()}
		c.Timeout = time.Second
		c.ClusterHook = func(cc *gocql.ClusterConfig) {
			cc.DisableInitialHostLookup = true
			// Whatever address the cluster reports, connect through the proxy.
			cc.AddressTranslator = gocql.AddressTranslatorFunc(func(net.IP, int) (net.IP, int) { return pip, pport })
		}
	})
	testserver.BoundedWhenPartitioned(t, s, proxy)
}
