package kubernetes

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/tenure-go/tenure/store"
)

func init() {
	store.Register(store.Driver[Config, *Store]{
		Schemes: []string{"kubernetes", "k8s"},
		Usage: "kubernetes:[?param=value&...]  Lease objects of a Kubernetes namespace, in-cluster by default " +
			"(parameters: kubeconfig, context, namespace, dial_timeout)",
		Parse:    ParseURL,
		Open:     Open,
		CheckTTL: Config.CheckTTL,
	})
}

// ParseURL turns a store URL into a Config, without connecting:
//
//	kubernetes:[//][?option=value&...]     (or k8s:)
//
// Without options it names the cluster the program runs in (the pod's
// service account and namespace). Options: kubeconfig=PATH (a kubeconfig
// file; a leading "~/" is the home directory), context=NAME (a context of
// it, or of the kubeconfig kubectl would use), namespace=NAME,
// dial_timeout=DURATION (default 5s). Any other option, a host or a path is
// an error.
func ParseURL(raw string) (Config, error) {
	lower := strings.ToLower(raw)
	var rest string
	switch {
	case strings.HasPrefix(lower, "kubernetes:"):
		rest = raw[len("kubernetes:"):]
	case strings.HasPrefix(lower, "k8s:"):
		rest = raw[len("k8s:"):]
	default:
		return Config{}, errors.New("kubernetes store: URL must start with kubernetes: or k8s:")
	}
	body, query, _ := strings.Cut(rest, "?")
	body = strings.TrimPrefix(body, "//")
	if strings.Trim(body, "/") != "" {
		return Config{}, fmt.Errorf("kubernetes store: unexpected %q in URL: the API server and namespace come from the kubeconfig or the cluster, or the kubeconfig= and namespace= options", body)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return Config{}, fmt.Errorf("kubernetes store: bad URL query: %w", err)
	}
	var cfg Config
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "kubeconfig":
			if v == "" {
				return Config{}, errors.New("kubernetes store: kubeconfig= needs a path")
			}
			if strings.HasPrefix(v, "~/") {
				home, err := os.UserHomeDir()
				if err != nil {
					return Config{}, fmt.Errorf("kubernetes store: kubeconfig=%q: %w", v, err)
				}
				v = home + v[1:]
			}
			cfg.Kubeconfig = v
		case "context":
			if v == "" {
				return Config{}, errors.New("kubernetes store: context= needs a name")
			}
			cfg.Context = v
		case "namespace":
			if v == "" {
				return Config{}, errors.New("kubernetes store: namespace= needs a name")
			}
			cfg.Namespace = v
		case "dial_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return Config{}, fmt.Errorf("kubernetes store: dial_timeout=%q is not a positive duration such as 5s", v)
			}
			cfg.DialTimeout = d
		default:
			return Config{}, fmt.Errorf("kubernetes store: unknown URL option %q (known: kubeconfig, context, namespace, dial_timeout)", k)
		}
	}
	if err := cfg.check(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
