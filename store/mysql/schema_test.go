package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/mysql"
)

// TestTableWithTenuresColumnsButNotItsSchema: a table with tenure's column
// names whose key, types or engine are not tenure's is refused by Init and
// by every Store, which grants nothing on it. Each of these tables breaks a
// promise when it is used: without the primary key on resource (a table
// re-created by CREATE TABLE ... AS SELECT from a backup copy), every
// acquire inserts a row of its own and two owners are granted the resource
// at once; a DATETIME without fractions truncates every expiry to the
// second, so leases end up to a second before their holders' deadlines; a
// case-insensitive resource column makes "a" and "A" one resource; a
// second unique key lets an acquire update another resource's row; and
// MyISAM has no transactions for the sweep.
func TestTableWithTenuresColumnsButNotItsSchema(t *testing.T) {
	ctx := testserver.Ctx(t)
	admin := open(t)
	schema, err := mysql.Schema(mysql.Config{Table: "SRC"})
	if err != nil {
		t.Fatal(err)
	}
	createLeases := strings.Split(schema, ";\n")[0]
	createTokens := strings.TrimSpace(strings.Split(schema, ";\n")[1])
	for _, c := range []struct {
		name, why string
		create    func(name string) string
	}{
		{"no primary key", "key", func(name string) string {
			return fmt.Sprintf("CREATE TABLE %s ENGINE=InnoDB AS SELECT * FROM %s", name, name+"_src")
		}},
		{"expiry in whole seconds", "expires_at", func(name string) string {
			return strings.Replace(strings.Replace(createLeases, "expires_at DATETIME(6)", "expires_at DATETIME", 1), "SRC", name, 1)
		}},
		{"case-insensitive resource", "resource", func(name string) string {
			return strings.Replace(strings.Replace(createLeases, "resource   VARBINARY(256)", "resource VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci", 1), "SRC", name, 1)
		}},
		{"a second unique key", "key", func(name string) string {
			return strings.Replace(strings.Replace(createLeases, "PRIMARY KEY (resource)", "PRIMARY KEY (resource), UNIQUE KEY (token)", 1), "SRC", name, 1)
		}},
		{"MyISAM", "MyISAM", func(name string) string {
			return strings.Replace(strings.Replace(createLeases, "ENGINE=InnoDB", "ENGINE=MyISAM", 1), "SRC", name, 1)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := fmt.Sprintf("tenure_hand_%d", time.Now().UnixNano())
			t.Cleanup(func() {
				_, _ = admin.DB().ExecContext(context.Background(), "DROP TABLE IF EXISTS "+name+", "+name+"_tokens, "+name+"_src")
			})
			for _, q := range []string{
				strings.Replace(createLeases, "SRC", name+"_src", 1),
				c.create(name),
				strings.Replace(createTokens, "SRC", name, 1),
			} {
				if _, err := admin.DB().ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			withTable := func(cf *mysql.Config) { cf.Table = name }
			if err := mysql.Init(ctx, config(t, withTable)); !errors.Is(err, driver.ErrNotStore) || !strings.Contains(err.Error(), c.why) {
				t.Errorf("Init: %v; want ErrNotStore naming %s", err, c.why)
			}
			s := open(t, withTable)
			a, b := owner(t, "a"), owner(t, "b")
			ra, errA := s.Acquire(ctx, "r", a, time.Minute)
			rb, errB := s.Acquire(ctx, "r", b, time.Minute)
			if errA == nil && errB == nil {
				t.Fatalf("two owners granted r at once: %+v and %+v", ra, rb)
			}
			t.Log(errA)
			for _, err := range []error{errA, errB} {
				if !errors.Is(err, driver.ErrNotStore) || !strings.Contains(err.Error(), c.why) {
					t.Fatalf("Acquire: %v; want ErrNotStore naming %s", err, c.why)
				}
			}
			if _, err := s.Get(ctx, "r"); !errors.Is(err, driver.ErrNotStore) {
				t.Fatalf("Get: %v; want ErrNotStore", err)
			}
			var n int
			if err := admin.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM "+name).Scan(&n); err != nil || n != 0 {
				t.Fatalf("%d rows in the table (%v); want it left alone", n, err)
			}
		})
	}
}
