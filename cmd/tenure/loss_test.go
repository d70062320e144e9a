package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/sqlite"
)

// A lease lost because its SQLite file was deleted is described as that,
// not as a grant that someone freed or took (new-user review: the message
// sent operators looking for who freed the lease).
func TestLossOfADeletedSQLiteFileSaysSo(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leases.db")
	st, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lk, err := tenure.New(st)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close(ctx)
	l, err := lk.TryAcquire(ctx, "del", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); err == nil {
		t.Fatal("renewal in a deleted file succeeded")
	}
	got := describeLoss(context.Cause(l.Context()))
	if !strings.Contains(got, "deleted") || strings.Contains(got, "freed by an operator") {
		t.Fatalf("describeLoss: %q; want the deleted file named as the cause", got)
	}
}
