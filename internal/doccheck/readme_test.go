package doccheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The complete program in the README builds as it is, against this
// module: the file is laid over a directory of the module that does not
// exist (go build -overlay), so the tree is not written to.
func TestReadmeProgramBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program (-short)")
	}
	readme := readDoc(t, "README.md")
	var program string
	for _, block := range strings.Split(readme, "```go\n")[1:] {
		code, _, _ := strings.Cut(block, "```")
		if strings.HasPrefix(code, "package main\n") {
			program = code
			break
		}
	}
	if program == "" {
		t.Fatal("README.md has no complete program (a Go block that starts with package main)")
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	src := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(src, []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	virtual := filepath.Join(absRoot, "internal", "doccheck", "readmeprogram", "main.go")
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {virtual: src}})
	if err != nil {
		t.Fatal(err)
	}
	ovl := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovl, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", ovl, "-o", filepath.Join(tmp, "program"), "./internal/doccheck/readmeprogram")
	cmd.Dir = absRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's program does not build: %v\n%s", err, out)
	}
}
