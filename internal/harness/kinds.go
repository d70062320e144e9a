package harness

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/tenure-go/tenure/internal/netfault"
)

// Kind is a store kind that a module of its own adds to the harness: the
// Kubernetes store (store/kubernetes), whose client library this module
// must not link. Its module builds a harness command of its own that
// imports the store (registering its URL scheme with package store),
// calls RegisterKind, and runs RunMain, WorkerMain and CheckMain as
// cmd/tenure-harness does.
type Kind struct {
	// Schemes are the store's URL schemes; the first is its name.
	Schemes []string
	// Profile is the checker's timing profile of the store.
	Profile Profile
	// Setup prepares the store of raw for a run whose files go to out: it
	// puts fault proxies in front of the store's servers and returns the
	// URL the workers open (through the proxies) and the fault kinds that
	// apply.
	Setup func(ctx context.Context, raw, out string) (KindEnv, error)
	// DeleteKeys deletes the lease records of resources (exact names), or
	// with prefix set of every resource whose name starts with it, as an
	// operator would by hand (key-delete), and says what it deleted. Nil
	// when key-delete does not apply.
	DeleteKeys func(ctx context.Context, raw string, resources []string, prefix string) (string, error)
}

// KindEnv is what Kind.Setup prepared.
type KindEnv struct {
	WorkerURL string
	Proxies   []*netfault.Proxy
	Faults    []string
	// NodeScript and Nodes serve node-kill and node-pause: the script is
	// run with "kill N" and "restart N", "pause N" and "resume N".
	NodeScript string
	Nodes      []int
	Close      func()
}

var (
	kindsMu sync.Mutex
	kinds   []Kind
)

// RegisterKind adds a store kind. It panics when a scheme is registered
// twice, or when the kind has no scheme or no Setup.
func RegisterKind(k Kind) {
	if len(k.Schemes) == 0 || k.Setup == nil {
		panic("harness: RegisterKind needs schemes and Setup")
	}
	kindsMu.Lock()
	defer kindsMu.Unlock()
	for _, s := range k.Schemes {
		if kindFor(s) != nil {
			panic(fmt.Sprintf("harness: store kind %q registered twice", s))
		}
	}
	kinds = append(kinds, k)
}

// kindFor returns the registered kind of scheme, or nil (kindsMu held or
// not needed).
func kindFor(scheme string) *Kind {
	for i := range kinds {
		if slices.Contains(kinds[i].Schemes, scheme) {
			return &kinds[i]
		}
	}
	return nil
}

func lookupKind(scheme string) *Kind {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	return kindFor(scheme)
}

// setupKind prepares a store of a registered kind.
func setupKind(ctx context.Context, k *Kind, env *storeEnv, cfg Config) (*storeEnv, error) {
	ke, err := k.Setup(ctx, cfg.Store, cfg.Out)
	if err != nil {
		return nil, err
	}
	env.profile = k.Profile
	env.workerURL = ke.WorkerURL
	env.proxies = ke.Proxies
	env.faults = ke.Faults
	env.nodeScript = ke.NodeScript
	env.nodes = ke.Nodes
	if ke.Close != nil {
		env.closers = append(env.closers, func() error { ke.Close(); return nil })
	}
	return env, nil
}
