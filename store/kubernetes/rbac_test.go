package kubernetes_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/kubernetes"
	"github.com/tenure-go/tenure/store/storetest"
)

// rbacDoc reads rbac.yaml: the Role and the RoleBinding the store needs.
func rbacDoc(t *testing.T) (rbacv1.Role, rbacv1.RoleBinding) {
	t.Helper()
	b, err := os.ReadFile("rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("rbac.yaml: %d documents; want a Role and a RoleBinding", len(docs))
	}
	var role rbacv1.Role
	var binding rbacv1.RoleBinding
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &role); err != nil || role.Kind != "Role" {
		t.Fatalf("rbac.yaml's Role: %v (kind %q)", err, role.Kind)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &binding); err != nil || binding.Kind != "RoleBinding" {
		t.Fatalf("rbac.yaml's RoleBinding: %v (kind %q)", err, binding.Kind)
	}
	return role, binding
}

// TestRBAC runs the conformance suite as a service account that holds
// exactly the Role of rbac.yaml, with a token from the TokenRequest API,
// and shows that the Role holds no right the store does not use: a Role
// without any one of its verbs breaks the store.
func TestRBAC(t *testing.T) {
	cs, adminRC := admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	role, binding := rbacDoc(t)
	suffix := randSuffix()
	sa := "tenure-rbac-" + suffix
	role.Name, role.Namespace = "tenure-leases-"+suffix, testNamespace
	binding.Name, binding.Namespace = role.Name, testNamespace
	binding.RoleRef.Name = role.Name
	binding.Subjects[0].Name, binding.Subjects[0].Namespace = sa, testNamespace
	if _, err := cs.CoreV1().ServiceAccounts(testNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	roles := cs.RbacV1().Roles(testNamespace)
	if _, err := roles.Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(testNamespace).Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = cs.RbacV1().RoleBindings(testNamespace).Delete(ctx, binding.Name, metav1.DeleteOptions{})
		_ = roles.Delete(ctx, role.Name, metav1.DeleteOptions{})
		_ = cs.CoreV1().ServiceAccounts(testNamespace).Delete(ctx, sa, metav1.DeleteOptions{})
	})
	tok, err := cs.CoreV1().ServiceAccounts(testNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc := rest.AnonymousClientConfig(adminRC)
	rc.BearerToken = tok.Status.Token
	openAs := func(t *testing.T) (*kubernetes.Store, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := kubernetes.Open(ctx, kubernetes.Config{REST: rc, Namespace: testNamespace})
		if err == nil {
			t.Cleanup(func() { s.Close() })
		}
		return s, err
	}
	// The binding reaches the authorizer's cache within moments.
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := openAs(t)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service account cannot open the store: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	t.Run("Conformance", func(t *testing.T) {
		cfg := conformance
		cfg.New = func(t *testing.T) driver.Store {
			s, err := openAs(t)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		storetest.Run(t, cfg)
	})

	// Each verb is needed: without it, some operation is refused.
	for _, verb := range role.Rules[0].Verbs {
		t.Run("Without_"+verb, func(t *testing.T) {
			less := role.DeepCopy()
			less.ResourceVersion = ""
			var verbs []string
			for _, v := range role.Rules[0].Verbs {
				if v != verb {
					verbs = append(verbs, v)
				}
			}
			less.Rules[0].Verbs = verbs
			cur, err := roles.Get(ctx, role.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			less.ResourceVersion = cur.ResourceVersion
			if _, err := roles.Update(ctx, less, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cur, err := roles.Get(ctx, role.Name, metav1.GetOptions{})
				if err == nil {
					full := role.DeepCopy()
					full.ResourceVersion = cur.ResourceVersion
					_, err = roles.Update(ctx, full, metav1.UpdateOptions{})
				}
				if err != nil {
					t.Fatal(err)
				}
			}()
			// Until the authorizer sees the change, the operation may pass.
			for deadline := time.Now().Add(30 * time.Second); ; {
				err := tryVerb(t, ctx, openAs, verb)
				if apierrors.IsForbidden(err) || errors.Is(err, driver.ErrNotListening) {
					t.Logf("without %q: %v", verb, err)
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("without %q, the store still works: %v", verb, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}

// tryVerb runs the store operation that needs verb and returns its error.
func tryVerb(t *testing.T, ctx context.Context, openAs func(*testing.T) (*kubernetes.Store, error), verb string) error {
	if verb == "list" {
		_, err := openAs(t)
		return err
	}
	s, err := openAs(t)
	if err != nil {
		return err
	}
	a := owner(t, "a")
	switch verb {
	case "get", "create":
		_, err = s.Acquire(ctx, "rbac-new-"+randSuffix(), a, time.Minute)
	case "update":
		r := "rbac-" + randSuffix()
		rec, err2 := s.Acquire(ctx, r, a, time.Minute) // create
		if err2 != nil {
			return err2
		}
		err = s.Release(ctx, r, a, rec.Token)
	case "watch":
		var stop func()
		_, stop, err = s.Subscribe(ctx, "rbac-watch")
		if stop != nil {
			stop()
		}
	default:
		t.Fatalf("rbac.yaml names verb %q, which this test does not know", verb)
	}
	if errors.Is(err, tenure.ErrHeld) {
		return nil
	}
	return err
}

func ptrTo[T any](v T) *T { return &v }
