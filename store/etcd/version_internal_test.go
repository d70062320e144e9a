package etcd

import "testing"

func TestServerSafe(t *testing.T) {
	for v, want := range map[string]bool{
		"3.4.23":     false, // Debian's: etcd-io/etcd#15247 and #20547
		"3.4.40":     false, // 3.4 is refused whatever backports it has
		"3.5.12":     false, // before the leadership checks
		"3.5.22":     false, // before the renewal re-check
		"3.5.23":     true,
		"3.6.4":      false,
		"3.6.5":      true,
		"3.6.16":     true,
		"v3.6.16":    true,
		"3.7.0":      true,
		"3.10.1":     true,
		"4.0.0":      true,
		"2.3.8":      false,
		"3.6":        false,
		"":           false,
		"3.6.x":      false,
		"3.6.5-rc.0": true,
	} {
		if got := serverSafe(v); got != want {
			t.Errorf("serverSafe(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestPrintable(t *testing.T) {
	if got := printable("3.4\x1b[31m\n" + string(make([]byte, 40))); got != "3.4?[31m????????????????????????" {
		t.Errorf("printable = %q", got)
	}
}
