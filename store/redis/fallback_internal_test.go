package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure/internal/testserver"
)

// TestAcquireBeforeRedis7: the acquire script's paths for servers that
// reject SET with NX and GET together (before Redis 7.0) and SET with GET
// (before 6.2), forced here by an option the server rejects the same way
// (a syntax error): grants, the same grant again, another owner refused,
// the counter kept.
func TestAcquireBeforeRedis7(t *testing.T) {
	raw := testserver.Env(t, "TENURE_REDIS", "redis")
	cfg, err := ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(cfg.Options)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := expand(acquire, "KEYS[1]", "@COMPAT", "false")
	for old, new := range map[string]string{
		"'NX', 'GET', 'PX'": "'NX', 'GETX', 'PX'", // as NX with GET before 7.0
		"s, 'GET')":         "s, 'GETX')",         // as SET ... GET before 6.2
	} {
		if !strings.Contains(src, old) {
			t.Fatalf("the acquire script has no %s", old)
		}
		src = strings.Replace(src, old, new, 1)
	}
	script := redis.NewScript(src)
	prefix := "tenuretest:" + t.Name() + ":" + time.Now().Format("150405.000000") + ":"
	lease, counter := prefix+"lease:r", prefix+"token"
	defer c.Del(context.Background(), lease, counter)
	run := func(owner string) any {
		v, err := script.Run(ctx, c, []string{lease, counter}, owner, 30000).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tok, ok := run("a").(int64)
	if !ok || tok < time.Now().Add(-time.Minute).UnixMicro() {
		t.Fatalf("grant: %v", tok)
	}
	if got := run("a"); got != tok {
		t.Fatalf("the same grant again: %v, want %d", got, tok)
	}
	if got, ok := run("b").([]any); !ok || len(got) != 2 || !strings.HasSuffix(got[0].(string), ":a:30000") {
		t.Fatalf("another owner: %v, want a's lease", got)
	}
	if n, err := c.Get(ctx, counter).Int64(); err != nil || n != tok {
		t.Fatalf("counter %d, %v; want %d", n, err, tok)
	}
	// The counter ahead of the clock: the token follows it, and the lease
	// carries that token.
	c.Del(ctx, lease)
	ahead := time.Now().Add(time.Hour).UnixMicro()
	c.Set(ctx, counter, ahead, 0)
	if got := run("c"); got != ahead+1 {
		t.Fatalf("grant after a counter ahead of the clock: %v, want %d", got, ahead+1)
	}
	if v := c.Get(ctx, lease).Val(); !strings.HasPrefix(v, strconv.FormatInt(ahead+1, 10)+":c:") {
		t.Fatalf("lease %q, want token %d", v, ahead+1)
	}
}
