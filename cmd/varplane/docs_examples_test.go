package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	goBlockRE = regexp.MustCompile("(?s)```go\n(.*?)\n```")
	embedRE   = regexp.MustCompile(`(?m)^//go:embed (\S+)$`)
)

// TestDocsExamplesCompile: every Go example in the README and docs/ is a
// whole program (package main) that type-checks against this module as it
// is, so no example calls a function that does not exist. A file an
// example embeds (//go:embed) is stood in for by an empty one.
func TestDocsExamplesCompile(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "..", "README.md"))
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goBlockRE.FindAllStringSubmatchIndex(string(data), -1) {
			src := string(data[m[2]:m[3]])
			line := strings.Count(string(data[:m[0]]), "\n") + 1
			where := filepath.Base(f) + ":" + strconv.Itoa(line)
			n++
			if !strings.HasPrefix(strings.TrimSpace(src), "package main") {
				t.Errorf("%s: a Go example that is not a whole program (package main): write it whole so that this test checks it", where)
				continue
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, e := range embedRE.FindAllStringSubmatch(src, -1) {
				if err := os.WriteFile(filepath.Join(dir, e[1]), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// A file named on the command line is checked as a package of
			// the module the go command runs in: this one.
			if out, err := exec.Command("go", "vet", filepath.Join(dir, "main.go")).CombinedOutput(); err != nil {
				t.Errorf("%s: the example does not compile: %v\n%s", where, err, out)
			}
		}
	}
	if n == 0 {
		t.Fatal("no Go example found: the pattern is wrong")
	}
}
