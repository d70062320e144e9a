package redis

import (
	"os"
	"testing"
)

func TestDumpScripts(t *testing.T) {
	if os.Getenv("DUMP") == "" {
		t.Skip()
	}
	os.WriteFile("/tmp/s_acq.lua", []byte(expand(acquire, "KEYS[1]", "@COMPAT", "false")), 0o644)
	os.WriteFile("/tmp/s_ren.lua", []byte(expand("\nlocal r\n"+renewOne+"\nreturn r", "KEYS[1]", "@E", "ARGV[1]", "@T", "ARGV[2]", "@R", "r")), 0o644)
	os.WriteFile("/tmp/s_rel.lua", []byte(expand(release, "KEYS[1]")), 0o644)
}
