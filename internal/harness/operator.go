package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenure-go/tenure/internal/storeclient"
	"github.com/tenure-go/tenure/store"
	"github.com/tenure-go/tenure/store/etcd"
	"github.com/tenure-go/tenure/store/mysql"
	"github.com/tenure-go/tenure/store/postgres"
	"github.com/tenure-go/tenure/store/redis"
)

// runScript runs a server script (scripts/cassandra, scripts/etcd,
// scripts/postgres) with the harness's environment.
func runScript(ctx context.Context, script string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, script, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", script, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// scriptEnv returns the value that "SCRIPT env ARGS" exports as name.
func scriptEnv(ctx context.Context, script, name string, args ...string) (string, error) {
	out, err := runScript(ctx, script, append([]string{"env"}, args...)...)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "export "+name+"=")
		if ok {
			return strings.Trim(v, `'"`), nil
		}
	}
	return "", fmt.Errorf("%s env %s: no %s in %q", script, strings.Join(args, " "), name, out)
}

// checkScriptServer makes sure that the server script manages the server at
// hostport (its env names it), so that server-restart never restarts
// another one (a shared server, say).
func checkScriptServer(ctx context.Context, script, name, hostport string) error {
	v, err := scriptEnv(ctx, script, name)
	if err != nil {
		return fmt.Errorf("harness: server faults: %w", err)
	}
	u, err := url.Parse(v)
	if err != nil || u.Host != hostport {
		return fmt.Errorf("harness: server faults: %s manages the server of %s=%s, not %s (set its TENURE_* variables to the store's server, or leave out -server-faults)",
			script, name, store.Redact(v), hostport)
	}
	return nil
}

// checkScriptNodes makes sure that scripts/etcd's cluster (env 3) is the
// cluster of endpoints, so that member faults hit the store's members.
func checkScriptNodes(ctx context.Context, script string, endpoints []string) error {
	v, err := scriptEnv(ctx, script, "TENURE_ETCD_CLUSTER", "3")
	if err != nil {
		return fmt.Errorf("harness: member faults: %w", err)
	}
	got := strings.Split(v, ",")
	want := slices.Clone(endpoints)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("harness: member faults: %s env 3 names the cluster %s, the store %s (set TENURE_ETCD_NET and TENURE_ETCD_PORT as for its start3)",
			script, v, strings.Join(endpoints, ","))
	}
	return nil
}

// deleteKeys deletes, as an operator would by hand, the lease records of
// the resources (exact names), or with prefix set of every resource whose
// name starts with it, on the real server (not through the proxies). It
// returns what it deleted, for the fault's detail.
func deleteKeys(ctx context.Context, raw string, resources []string, prefix string) (string, error) {
	su, err := store.Parse(raw)
	if err != nil {
		return "", err
	}
	switch cfg := su.Config().(type) {
	case *postgres.Config:
		conn, err := pgx.ConnectConfig(ctx, cfg.Pool.ConnConfig)
		if err != nil {
			return "", err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		table := pgx.Identifier(strings.Split(postgres.DefaultTable, ".")).Sanitize()
		var tag string
		if prefix != "" {
			ct, err := conn.Exec(ctx, "DELETE FROM "+table+" WHERE starts_with(resource, $1)", prefix)
			if err != nil {
				return "", err
			}
			tag = ct.String()
		} else {
			ct, err := conn.Exec(ctx, "DELETE FROM "+table+" WHERE resource = ANY($1)", resources)
			if err != nil {
				return "", err
			}
			tag = ct.String()
		}
		return tag + " (rows of " + table + ")", nil
	case *mysql.Config:
		c := *cfg
		c.SweepInterval = -1
		s, err := mysql.Open(ctx, c)
		if err != nil {
			return "", err
		}
		defer s.Close()
		name := c.Table
		if name == "" {
			name = mysql.DefaultTable
		}
		table := "`" + strings.ReplaceAll(name, ".", "`.`") + "`"
		q, args := "DELETE FROM "+table+" WHERE LEFT(resource, ?) = ?", []any{len(prefix), prefix}
		if prefix == "" {
			if len(resources) == 0 {
				return "no rows", nil
			}
			q = "DELETE FROM " + table + " WHERE resource IN (?" + strings.Repeat(", ?", len(resources)-1) + ")"
			args = nil
			for _, r := range resources {
				args = append(args, r)
			}
		}
		res, err := storeclient.Of[*sql.DB](s).ExecContext(ctx, q, args...)
		if err != nil {
			return "", err
		}
		n, _ := res.RowsAffected()
		return fmt.Sprintf("DELETE %d (rows of %s)", n, name), nil
	case *redis.Config:
		if cfg.Options == nil {
			return "", fmt.Errorf("harness: key-delete applies to a single Redis server, not to %s", su.Scheme())
		}
		rdb := goredis.NewClient(cfg.Options)
		defer rdb.Close()
		kp := cfg.Prefix
		if kp == "" {
			kp = redis.DefaultPrefix
		}
		var keys []string
		if prefix != "" {
			// Every key whose name holds a name of this run (the lease
			// keys, and per-resource counters where the store has them).
			it := rdb.Scan(ctx, 0, kp+"*"+globEscape(prefix)+"*", 1000).Iterator()
			for it.Next(ctx) {
				keys = append(keys, it.Val())
			}
			if err := it.Err(); err != nil {
				return "", err
			}
		} else {
			for _, r := range resources {
				keys = append(keys, kp+"lease:"+r)
			}
		}
		if len(keys) == 0 {
			return "no keys", nil
		}
		n, err := rdb.Del(ctx, keys...).Result()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("DEL %d of %s", n, strings.Join(keys, " ")), nil
	case *etcd.Config:
		cc := cfg.Client
		cc.Logger = zap.NewNop()
		if cc.DialTimeout == 0 {
			cc.DialTimeout = 5 * time.Second
		}
		cli, err := clientv3.New(cc)
		if err != nil {
			return "", err
		}
		defer cli.Close()
		kp := cfg.Prefix
		if kp == "" {
			kp = etcd.DefaultPrefix
		}
		var n int64
		if prefix != "" {
			r, err := cli.Delete(ctx, kp+prefix, clientv3.WithPrefix())
			if err != nil {
				return "", err
			}
			n = r.Deleted
		} else {
			for _, res := range resources {
				r, err := cli.Delete(ctx, kp+res)
				if err != nil {
					return "", err
				}
				n += r.Deleted
			}
		}
		return fmt.Sprintf("%d keys deleted", n), nil
	}
	if k := lookupKind(su.Scheme()); k != nil && k.DeleteKeys != nil {
		return k.DeleteKeys(ctx, raw, resources, prefix)
	}
	return "", fmt.Errorf("harness: key-delete does not apply to %s stores", su.Scheme())
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// resetSQLite deletes the SQLite database (its file, WAL and shared-memory
// index), or replaces it with a new database that has the schema and no
// lease, under the running workers: the path then names another file.
func resetSQLite(ctx context.Context, path string, replace bool) (string, error) {
	if !replace {
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return "", err
			}
		}
		return "file, -wal and -shm deleted", nil
	}
	tmp := path + ".new"
	os.Remove(tmp)
	u, err := store.Parse("sqlite:" + tmp)
	if err != nil {
		return "", err
	}
	if err := u.Init(ctx); err != nil {
		return "", err
	}
	// Fold the new file's WAL into it, so that it stands alone.
	db, err := sql.Open("sqlite", "file:"+tmp)
	if err != nil {
		return "", err
	}
	_, err = db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	db.Close()
	if err != nil {
		return "", err
	}
	os.Remove(tmp + "-wal")
	os.Remove(tmp + "-shm")
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	for _, p := range []string{path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
	}
	return "replaced by a new database (rename over the file; -wal and -shm deleted)", nil
}

// openSQLite opens the database for the stuck writer.
func openSQLite(path string) (*sql.DB, error) {
	return sql.Open("sqlite", "file:"+path+"?_busy_timeout=30000&_txlock=immediate")
}

// watchTerms records every election of an etcd cluster's leader as an OpTerm
// operation in the operator's history: it asks each member for its raft
// term every 100 ms (on the members themselves, not through the proxies),
// and an operation spans from the last round that saw the old term to the
// first that saw a new one. It returns when ctx ends.
func (o *orch) watchTerms(ctx context.Context) error {
	su, err := store.Parse(o.env.raw)
	if err != nil {
		return err
	}
	cfg, ok := su.Config().(*etcd.Config)
	if !ok {
		return nil
	}
	cc := cfg.Client
	cc.Logger = zap.NewNop()
	cc.DialTimeout = 2 * time.Second
	cli, err := clientv3.New(cc)
	if err != nil {
		return err
	}
	defer cli.Close()
	var term uint64
	var lastSeen int64
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var seen uint64
		for _, ep := range cc.Endpoints {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(sctx, ep)
			cancel()
			if err == nil && st.RaftTerm > seen {
				seen = st.RaftTerm
			}
		}
		now := MonoNow()
		switch {
		case seen == 0: // no member answered
		case term == 0:
			term, lastSeen = seen, now
		case seen > term:
			id := o.operator.newID()
			o.operator.Record(Event{Ev: EvCall, T: lastSeen, ID: id, Op: OpTerm, Token: seen})
			o.operator.Record(Event{Ev: EvReturn, T: now, ID: id, Res: ResRenewed})
			term, lastSeen = seen, now
		default:
			lastSeen = now
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
