package redis

import (
	"slices"
	"testing"
)

// Every parameter that the store passes to go-redis is one that go-redis's
// parser of the topology reads: none is listed that go-redis would call
// an unexpected option. (The bases have no database in their path: a db
// parameter that contradicts the path is refused.)
func TestGoRedisParamsKnown(t *testing.T) {
	for topology, base := range map[string]string{"": "rediss://h", "sentinel": "rediss+sentinel://h/m", "cluster": "rediss+cluster://h"} {
		names := append(slices.Clone(goRedisParams[topology]), goRedisParams["all"]...)
		if topology != "cluster" {
			names = append(names, "skip_verify")
		}
		for _, name := range names {
			var err error
			for _, v := range []string{"1", "true", "1s", "x"} {
				if _, err = ParseURL(base + "?" + name + "=" + v); err == nil {
					break
				}
			}
			if err != nil {
				t.Errorf("%s?%s=...: %v", base, name, err)
			}
		}
	}
}
