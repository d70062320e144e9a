package kubernetes

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
)

// Defaults.
const (
	// DefaultDialTimeout bounds connecting to the API server, and Open.
	DefaultDialTimeout = 5 * time.Second
	// DefaultNamespace is the namespace of a kubeconfig context that names
	// none.
	DefaultNamespace = "default"
	// MaxTTL is the longest TTL: leaseDurationSeconds is an int32, less the
	// seconds a renewal may add (see renewSpec).
	MaxTTL = (1<<31 - 1 - maxDurationBump) * time.Second
)

// inClusterNamespace is the file of a pod's service account that names its
// namespace.
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ttls is the range of TTLs the store keeps: leaseDurationSeconds is whole
// seconds, so a TTL below one second is refused and others are rounded up.
var ttls = driver.TTLRange{Min: time.Second, Max: MaxTTL, Why: "a Lease's leaseDurationSeconds is whole seconds"}

// Config configures a Store. The zero Config opens the API server of the
// cluster the program runs in, with its pod's service account, in its
// pod's namespace.
type Config struct {
	// Kubeconfig is the path of a kubeconfig file. When it and Context are
	// empty and REST is nil, the Store uses the in-cluster configuration
	// (the pod's service account). When only Context is set, the kubeconfig
	// files are found as kubectl finds them ($KUBECONFIG, ~/.kube/config).
	Kubeconfig string

	// Context is the kubeconfig context to use; default: its current
	// context.
	Context string

	// Namespace keeps the Lease objects. Default: the kubeconfig context's
	// namespace, or in a cluster the pod's own namespace (from its service
	// account), or DefaultNamespace.
	Namespace string

	// REST, when set, is used instead of Kubeconfig, Context and the
	// in-cluster configuration (Namespace then defaults to
	// DefaultNamespace). The Store copies it; a zero QPS becomes no
	// client-side rate limit (client-go's default of 5 requests a second
	// would hold up renewals).
	REST *rest.Config

	// DialTimeout bounds each connection attempt and Open. Default
	// DefaultDialTimeout.
	DialTimeout time.Duration

	// Clock is the clock on which the Store counts how long it has seen a
	// Lease unchanged. Default clock.Real() (CLOCK_BOOTTIME on Linux). Tests
	// inject a fake one.
	Clock clock.Clock

	// Identity, when set, is the User-Agent of the Store's requests
	// (default "tenure").
	Identity string
}

// CheckTTL returns an error wrapping driver.ErrInvalidTTL for a TTL that
// the store cannot keep (below 1 s, or above MaxTTL), without I/O. Other
// TTLs are rounded up to whole seconds for the Lease; the holder's local
// deadline still uses the requested TTL.
func (c Config) CheckTTL(ttl time.Duration) error { return ttls.CheckTTL(ttl) }

// check validates the configuration before any I/O.
func (c Config) check() error {
	if c.Namespace != "" {
		if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
			return fmt.Errorf("kubernetes store: namespace %q: %s", c.Namespace, strings.Join(errs, "; "))
		}
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("kubernetes store: negative dial timeout %v", c.DialTimeout)
	}
	return nil
}

// ErrNotInCluster is wrapped by Open's error when the Config names no
// kubeconfig and the program does not run in a Kubernetes pod.
var ErrNotInCluster = errors.New("kubernetes store: not running in a Kubernetes cluster (no KUBERNETES_SERVICE_HOST); name a kubeconfig")

// restConfig resolves the API server, credentials and namespace.
func (c Config) restConfig() (*rest.Config, string, error) {
	ns := c.Namespace
	switch {
	case c.REST != nil:
		rc := rest.CopyConfig(c.REST)
		if ns == "" {
			ns = DefaultNamespace
		}
		return rc, ns, nil
	case c.Kubeconfig != "" || c.Context != "":
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if c.Kubeconfig != "" {
			rules.ExplicitPath = c.Kubeconfig
		}
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.Context})
		rc, err := cc.ClientConfig()
		if err != nil {
			return nil, "", fmt.Errorf("kubernetes store: kubeconfig: %w", err)
		}
		if ns == "" {
			if ns, _, err = cc.Namespace(); err != nil {
				return nil, "", fmt.Errorf("kubernetes store: kubeconfig namespace: %w", err)
			}
		}
		return rc, ns, nil
	default:
		rc, err := rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, "", ErrNotInCluster
		}
		if err != nil {
			return nil, "", fmt.Errorf("kubernetes store: in-cluster configuration: %w", err)
		}
		if ns == "" {
			if b, err := os.ReadFile(inClusterNamespace); err == nil && strings.TrimSpace(string(b)) != "" {
				ns = strings.TrimSpace(string(b))
			} else {
				ns = DefaultNamespace
			}
		}
		return rc, ns, nil
	}
}

// HTTP/2 health checks of the Store's connection: every request and the
// watch of a Store share one connection, so a connection that went silent
// (a black-holed network) is found and replaced after about
// http2ReadIdle + http2PingTimeout instead of client-go's 30 + 15 s.
const (
	http2ReadIdle    = 3 * time.Second
	http2PingTimeout = 3 * time.Second
)

// httpClient builds the Store's own HTTP client for rc: a transport of its
// own (so Close can close its connections), dials bounded by dialTimeout,
// HTTP/2 with short health checks, rc.WrapTransport, and client-go's
// authentication wrappers.
func httpClient(rc *rest.Config, dialTimeout time.Duration) (*http.Client, *http.Transport, error) {
	tlsCfg, err := rest.TLSConfigFor(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes store: TLS: %w", err)
	}
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	dial := dialer.DialContext
	if rc.Dial != nil {
		dial = rc.Dial
	}
	proxy := http.ProxyFromEnvironment
	if rc.Proxy != nil {
		proxy = rc.Proxy
	}
	tr := &http.Transport{
		Proxy:               proxy,
		DialContext:         dial,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: dialTimeout,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	if tlsCfg == nil {
		tr.TLSClientConfig = &tls.Config{}
	}
	t2, err := http2.ConfigureTransports(tr)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes store: HTTP/2: %w", err)
	}
	t2.ReadIdleTimeout = http2ReadIdle
	t2.PingTimeout = http2PingTimeout
	rt, err := rest.HTTPWrappersForConfig(rc, tr) // with rc.WrapTransport
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes store: %w", err)
	}
	return &http.Client{Transport: rt, Timeout: rc.Timeout}, tr, nil
}
