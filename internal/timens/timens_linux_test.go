//go:build linux

package timens

import (
	"testing"
	"time"
)

func TestParseBoottimeOffset(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"monotonic           0         0\nboottime            0         0\n", 0, false},
		{"monotonic 5 0\nboottime 7200 0\n", 2 * time.Hour, false},
		{"boottime -3 500000000\n", -3*time.Second + 500*time.Millisecond, false},
		{"monotonic 1 0\n", 0, false},
		{"", 0, false},
		{"boottime 1 1000000000\n", 0, true},
		{"boottime x 0\n", 0, true},
	} {
		got, err := ParseBoottimeOffset([]byte(c.in))
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("%q: %v, %v; want %v (error: %v)", c.in, got, err, c.want, c.bad)
		}
	}
}
