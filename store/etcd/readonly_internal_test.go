package etcd

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A read's context shows no deadline (so gRPC sends none to the server) but
// ends when the caller's does, with the caller's error and values.
func TestReadOnlyHidesTheDeadlineButEndsWithIt(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), 20*time.Millisecond)
	defer cancel()
	ctx := readOnly(parent)
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("readOnly kept the deadline")
	}
	if ctx.Value(key{}) != "v" {
		t.Fatal("readOnly lost the caller's values")
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("readOnly's context did not end at the caller's deadline")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err() = %v, want context.DeadlineExceeded", ctx.Err())
	}
	if readOnly(context.Background()) != context.Background() {
		t.Fatal("a context without a deadline was wrapped")
	}
}
