// Package harnesskind adds the Kubernetes store to tenure's fault-injection
// harness (internal/harness), which lives in the library's module and so
// cannot import this one: the harness command of this module
// (internal/cmd/tenure-harness) registers it.
package harnesskind

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/tenure-go/tenure/internal/harness"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/store/kubernetes"
)

// clockSlack is the harness's allowance for clock readings.
const clockSlack = 5 * time.Millisecond

func ceilSeconds(ttl time.Duration) time.Duration {
	return (ttl + time.Second - 1) / time.Second * time.Second
}

// Profile is the Kubernetes store's timing. Every Store counts a lease's
// duration (ceil(TTL) whole seconds, up to two more for renewals that come
// several in one second) from its own first look at the Lease's last
// write, which comes after the write took effect: the lease lives at least
// ceil(TTL) from its linearization point. There is no upper bound: a
// worker that has just started counts the whole duration from its first
// look, however old the write is. A worker that waits for the lease
// watches the Lease, so it counts from the holder's last write as it
// happens: Takeover. A request the proxy held back may still take effect
// after its sender gave up (late effects), when its resourceVersion
// condition still holds: so before any write applied after that
// (conditional writes), and even to a Lease every Store has judged
// expired, when nothing else wrote it since. The Store wakes its waiters on a release from
// its watch of the namespace's Leases (driver.Notifier); a watch that
// went silent ends at the latest when the time the Store gives one watch
// runs out (60 s asked of the API server plus 10 s of grace), and the
// next resumes from the last resourceVersion seen: SilenceBound. Over
// HTTP/2 the watch shares the client's one connection with every other
// request, so notify-halfopen does not apply.
var Profile = harness.Profile{
	Name:              "kubernetes",
	MinTTL:            func(ttl time.Duration) time.Duration { return ceilSeconds(ttl) - clockSlack },
	MaxTTL:            func(time.Duration) time.Duration { return math.MaxInt64 },
	LateEffects:       true,
	ExpiryFromEffect:  true,
	StaleRefusals:     true,
	ConditionalWrites: true,
	Takeover:          func(ttl time.Duration) time.Duration { return ceilSeconds(ttl) + 2*time.Second },
	Notifies:          true,
	SilenceBound:      70 * time.Second,
}

// Register adds the kind to the harness.
func Register() {
	harness.RegisterKind(harness.Kind{
		Schemes:    []string{"kubernetes", "k8s"},
		Profile:    Profile,
		Setup:      setup,
		DeleteKeys: deleteKeys,
	})
}

func clientFor(raw string) (*k8s.Clientset, kubernetes.Config, *clientcmdRaw, error) {
	cfg, err := kubernetes.ParseURL(raw)
	if err != nil {
		return nil, cfg, nil, err
	}
	if cfg.Kubeconfig == "" {
		return nil, cfg, nil, fmt.Errorf("harness: the kubernetes store's URL must name a kubeconfig (the harness drives a server on loopback)")
	}
	kc, err := clientcmd.LoadFromFile(cfg.Kubeconfig)
	if err != nil {
		return nil, cfg, nil, err
	}
	cc := clientcmd.NewNonInteractiveClientConfig(*kc, cfg.Context, &clientcmd.ConfigOverrides{}, nil)
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, cfg, nil, err
	}
	if cfg.Namespace == "" {
		if cfg.Namespace, _, err = cc.Namespace(); err != nil {
			return nil, cfg, nil, err
		}
	}
	rc.QPS = -1
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		return nil, cfg, nil, err
	}
	raw2, err := cc.RawConfig()
	if err != nil {
		return nil, cfg, nil, err
	}
	return cs, cfg, &clientcmdRaw{raw: raw2, server: rc.Host}, nil
}

type clientcmdRaw struct {
	raw    clientcmdapi.Config
	server string
}

// setup puts a fault proxy in front of the API server, writes a kubeconfig
// that reaches it through the proxy, makes sure the namespace exists, and
// checks that scripts/kube-apiserver and scripts/etcd manage the servers
// (node-kill and node-pause: node 1 is etcd, node 2 the API server).
func setup(ctx context.Context, raw, out string) (harness.KindEnv, error) {
	cs, cfg, rc, err := clientFor(raw)
	if err != nil {
		return harness.KindEnv{}, err
	}
	u, err := url.Parse(rc.server)
	if err != nil {
		return harness.KindEnv{}, err
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return harness.KindEnv{}, fmt.Errorf("harness: API server %q: the harness drives servers on loopback addresses only", u.Host)
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cfg.Namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return harness.KindEnv{}, fmt.Errorf("harness: namespace %s: %w", cfg.Namespace, err)
	}
	p, err := netfault.Start(u.Host)
	if err != nil {
		return harness.KindEnv{}, err
	}
	// The proxy listens on 127.0.0.1 too, which the serving certificate
	// names.
	kc := rc.raw.DeepCopy()
	ctxName := cfg.Context
	if ctxName == "" {
		ctxName = kc.CurrentContext
	}
	kctx, ok := kc.Contexts[ctxName]
	if !ok {
		p.Close()
		return harness.KindEnv{}, fmt.Errorf("harness: kubeconfig %s has no context %q", cfg.Kubeconfig, ctxName)
	}
	kc.Clusters[kctx.Cluster].Server = "https://" + p.Addr()
	kc.CurrentContext = ctxName
	proxied := filepath.Join(out, "proxied.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, proxied); err != nil {
		p.Close()
		return harness.KindEnv{}, err
	}
	env := harness.KindEnv{
		WorkerURL: "kubernetes:?kubeconfig=" + url.QueryEscape(proxied) + "&namespace=" + cfg.Namespace,
		Proxies:   []*netfault.Proxy{p},
		Faults: []string{harness.FaultPause, harness.FaultKill, harness.FaultProxyDelay, harness.FaultProxyDrop,
			harness.FaultProxyBlackhole, harness.FaultProxyPartition, harness.FaultLateDelivery, harness.FaultKeyDelete},
	}
	if script := nodeScript(); script != "" {
		if err := checkScripts(ctx, script, cfg.Kubeconfig); err != nil {
			p.Close()
			return harness.KindEnv{}, err
		}
		env.NodeScript, env.Nodes = script, []int{1, 2}
		env.Faults = append(env.Faults, harness.FaultNodeKill, harness.FaultNodePause)
	}
	return env, nil
}

// nodeScript is this package's harness-nodes script, when the harness runs
// from a checkout (its source file is there).
func nodeScript() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	s := filepath.Join(filepath.Dir(file), "harness-nodes")
	if _, err := os.Stat(s); err != nil {
		return ""
	}
	return s
}

// checkScripts makes sure that scripts/kube-apiserver (through
// harness-nodes) manages the API server of the store's kubeconfig, so that
// node faults hit the store's servers, never others.
func checkScripts(ctx context.Context, script, kubeconfig string) error {
	out, err := exec.CommandContext(ctx, script, "kubeconfig").Output()
	if err != nil {
		return fmt.Errorf("harness: %s kubeconfig: %w", script, err)
	}
	if got := strings.TrimSpace(string(out)); got != kubeconfig {
		return fmt.Errorf("harness: node faults: scripts/kube-apiserver manages the server of %s, the store's kubeconfig is %s (set TENURE_RUN_DIR and the ports as for its start)", got, kubeconfig)
	}
	return nil
}

// deleteKeys deletes Lease objects as an operator would.
func deleteKeys(ctx context.Context, raw string, resources []string, prefix string) (string, error) {
	cs, cfg, _, err := clientFor(raw)
	if err != nil {
		return "", err
	}
	leases := cs.CoordinationV1().Leases(cfg.Namespace)
	var names []string
	if prefix != "" {
		l, err := leases.List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		for _, obj := range l.Items {
			r := obj.Annotations[kubernetes.AnnotationResource]
			if r == "" {
				r = obj.Name
			}
			if strings.HasPrefix(r, prefix) {
				names = append(names, obj.Name)
			}
		}
	} else {
		for _, r := range resources {
			names = append(names, kubernetes.LeaseName(r))
		}
	}
	n := 0
	for _, name := range names {
		err := leases.Delete(ctx, name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		n++
	}
	return fmt.Sprintf("%d Leases deleted", n), nil
}
