package kubernetes_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/kubernetes"
)

// testNamespace keeps the Leases of the tests (created when missing); the
// tests delete its Leases when they end.
const testNamespace = "tenure-test"

func TestMain(m *testing.M) {
	testserver.FairHolderMain(func(ctx context.Context, url string) (driver.Store, error) {
		cfg, err := kubernetes.ParseURL(url)
		if err != nil {
			return nil, err
		}
		cfg.Namespace = testNamespace
		return kubernetes.Open(ctx, cfg)
	})
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(helperMain(role, os.Args[1:]))
	}
	code := m.Run()
	if os.Getenv("TENURE_KUBERNETES") != "" {
		cleanup()
	}
	os.Exit(code)
}

// cleanup deletes the Leases the tests left in testNamespace.
func cleanup() {
	rc, err := adminREST()
	if err != nil {
		return
	}
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = cs.CoordinationV1().Leases(testNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}

// storeURL returns $TENURE_KUBERNETES (the URL scripts/kube-apiserver env
// prints), or skips the test.
func storeURL(tb testing.TB) string {
	tb.Helper()
	return testserver.Env(tb, "TENURE_KUBERNETES", "kube-apiserver")
}

// adminREST is the REST configuration of $TENURE_KUBERNETES's kubeconfig
// (the API server's administrator).
func adminREST() (*rest.Config, error) {
	cfg, err := kubernetes.ParseURL(os.Getenv("TENURE_KUBERNETES"))
	if err != nil {
		return nil, err
	}
	if cfg.Kubeconfig == "" {
		return nil, fmt.Errorf("TENURE_KUBERNETES names no kubeconfig")
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: cfg.Context}).ClientConfig()
}

// admin returns a clientset of the API server's administrator, and makes
// sure testNamespace exists.
func admin(tb testing.TB) (*k8s.Clientset, *rest.Config) {
	tb.Helper()
	storeURL(tb)
	rc, err := adminREST()
	if err != nil {
		tb.Fatal(err)
	}
	rc.QPS = -1
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatalf("creating namespace %s: %v", testNamespace, err)
	}
	return cs, rc
}

// open returns a store on the test API server in testNamespace, closed at
// the end of the test.
func open(tb testing.TB, mod ...func(*kubernetes.Config)) *kubernetes.Store {
	tb.Helper()
	admin(tb)
	mod = append([]func(*kubernetes.Config){func(c *kubernetes.Config) { c.Namespace = testNamespace }}, mod...)
	return testserver.Open(tb, storeURL(tb), kubernetes.ParseURL, kubernetes.Open, mod...)
}

// TestFairnessAcrossProcesses: a process that takes the resource again as
// soon as it released it (Do in a loop, 50 ms of work) does not starve a
// waiter in another process, which the watch of Leases tells of the
// release. The store keeps no reservations (driver.Reserver): the woken
// waiter races the holder's next acquire.
func TestFairnessAcrossProcesses(t *testing.T) {
	testserver.Fairness(t, open(t), storeURL(t), 10, 20*time.Second)
}
