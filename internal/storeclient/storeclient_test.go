package storeclient

import "testing"

type store struct{ cli *int }

func TestOf(t *testing.T) {
	n := 7
	Register(func(s *store) *int { return s.cli })
	if got := Of[*int](&store{cli: &n}); got != &n {
		t.Fatalf("Of = %v; want the store's client", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Of for an unregistered client type did not panic")
		}
	}()
	Of[*string](&store{})
}
