package redis_test

import (
	"testing"

	tredis "github.com/tenure-go/tenure/store/redis"
)

// TestURLNothingIgnored: a URL part or parameter that the store would drop
// or override without a word is refused, in every topology: a fragment
// ('#' not written %23, as in a prefix "app#1:" cut to "app"), a database
// parameter that contradicts the path's, the go-redis parameters whose
// values the store always replaces (max_retries: it never lets the client
// send a write again; context_timeout_enabled: calls end with their
// context), and wait_timeout without wait_replicas (no WAIT to bound).
// The same URLs without the contradiction still parse.
func TestURLNothingIgnored(t *testing.T) {
	for _, bad := range []string{
		"redis://h/0?prefix=app#1:",
		"redis://h/0#x",
		"redis+sentinel://h/m?prefix=app#1:",
		"redis+cluster://h1,h2#x",
		"redis://h/2?db=3",
		"redis+sentinel://h/m/2?db=3",
		"redis://h/0?max_retries=3",
		"redis+sentinel://h/m?max_retries=3",
		"redis+cluster://h?max_retries=3",
		"redis://h/0?context_timeout_enabled=false",
		"redis+cluster://h?context_timeout_enabled=false",
		"redis+sentinel://h/m?context_timeout_enabled=false",
		"redis://h/0?wait_timeout=2s",
		"redis+sentinel://h/m?wait_timeout=2s",
	} {
		if c, err := tredis.ParseURL(bad); err == nil {
			t.Errorf("%s: accepted (%+v)", bad, c)
		}
	}
	for _, good := range []string{
		"redis://h/0?prefix=app%231:",
		"redis://h/3?db=3",
		"redis://h?db=3",
		"redis+sentinel://h/m?db=3",
		"redis+sentinel://h/m?wait_replicas=1&wait_timeout=2s",
		"redis+cluster://h?wait_replicas=1&wait_timeout=500ms",
	} {
		if _, err := tredis.ParseURL(good); err != nil {
			t.Errorf("%s: %v", good, err)
		}
	}
	c, err := tredis.ParseURL("redis://h/0?prefix=app%231:")
	if err != nil || c.Prefix != "app#1:" {
		t.Errorf("prefix %q, %v", c.Prefix, err)
	}
}
