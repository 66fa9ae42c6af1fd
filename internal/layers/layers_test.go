package layers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/varplane/varplane"

// pkg is what the test reads of `go list -json`.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Module     *struct{ Path string }
}

// layer is one row of docs/architecture.md's table: its number, its
// packages (module-relative: "" is the root, "rpc/gen/..." a subtree) and
// what its third column allows besides the layers below.
type layer struct {
	n        int
	patterns []string
	also     string
}

// root returns the module's directory (two levels up from here).
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// readLayers parses the "Layers" table of docs/architecture.md.
func readLayers(t *testing.T) []layer {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root(t), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Layers\n")
	if !ok {
		t.Fatal("docs/architecture.md has no Layers section")
	}
	row := regexp.MustCompile(`^\| (\d+) [^|]*\| ([^|]*)\| ([^|]*)\|$`)
	tick := regexp.MustCompile("`([^`]*)`")
	var out []layer
	sc := bufio.NewScanner(strings.NewReader(section))
	for sc.Scan() {
		m := row.FindStringSubmatch(sc.Text())
		if m == nil {
			if len(out) > 0 && !strings.HasPrefix(sc.Text(), "|") {
				break
			}
			continue
		}
		n, _ := strconv.Atoi(m[1])
		l := layer{n: n, also: m[3]}
		for _, p := range tick.FindAllStringSubmatch(m[2], -1) {
			if p[1] == "varplane" {
				p[1] = ""
			}
			l.patterns = append(l.patterns, p[1])
		}
		out = append(out, l)
	}
	if len(out) < 7 {
		t.Fatalf("the Layers table has %d rows, want 7 (0 to 6)", len(out))
	}
	return out
}

// layerOf returns the layer of a module-relative package path, or -1.
func layerOf(layers []layer, r string) int {
	for _, l := range layers {
		for _, p := range l.patterns {
			if p == r || (strings.HasSuffix(p, "/...") && strings.HasPrefix(r+"/", strings.TrimSuffix(p, "..."))) {
				return l.n
			}
		}
	}
	return -1
}

// consultSources stats every Go file and go.mod of the module, so that go
// test's cache, which keys a test's result on the files it consulted,
// runs this test again whenever an import may have changed (go list, which
// the test runs, is not seen by the cache).
func consultSources(t *testing.T) {
	t.Helper()
	err := filepath.WalkDir(root(t), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bench", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") || d.Name() == "go.mod" {
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// goList returns every package of the module and its dependencies.
func goList(t *testing.T) map[string]*pkg {
	t.Helper()
	consultSources(t)
	cmd := exec.Command("go", "list", "-deps", "-json", "./...")
	cmd.Dir = root(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = &p
	}
	return pkgs
}

// rel returns path relative to the module ("" for the root) and whether
// it is a package of the module.
func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	r, ok := strings.CutPrefix(path, module+"/")
	return r, ok
}

func parentOf(r string) string {
	i := strings.LastIndexByte(r, '/')
	if i < 0 {
		return ""
	}
	return r[:i]
}

func isStore(r string) bool {
	return strings.HasPrefix(r, "store/") && !strings.HasSuffix(r, "test")
}

// TestLayers: every package of the module is in a layer of the table, and
// imports (test code apart) only what its layer may: the layers below, and
// the exceptions the table's third column names (each other in layers 0
// and 2; its parent in layers 3 and 4; the stores for a test-support
// package of layer 3; nothing of layer 3 for a client, but its parent).
func TestLayers(t *testing.T) {
	layers := readLayers(t)
	also := map[int]string{}
	for _, l := range layers {
		also[l.n] = l.also
	}
	// The exceptions below are the ones the table names: check that it
	// still does.
	for n, phrase := range map[int]string{0: "each other", 2: "each other", 3: "its parent and the stores", 4: "their parent"} {
		if !strings.Contains(also[n], phrase) {
			t.Errorf("layer %d's row no longer says %q: update this test with the table", n, phrase)
		}
	}
	pkgs := goList(t)
	var bad []string
	for _, p := range pkgs {
		from, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		lf := layerOf(layers, from)
		if lf < 0 {
			bad = append(bad, fmt.Sprintf("%s is in no layer of docs/architecture.md", p.ImportPath))
			continue
		}
		for _, imp := range p.Imports {
			to, ok := rel(imp)
			if !ok {
				continue
			}
			lt := layerOf(layers, to)
			allowed := lt >= 0 && lt < lf
			switch {
			case lt == lf && (lf == 0 || lf == 2):
				allowed = true // each other
			case (lf == 3 || lf == 4) && to == parentOf(from):
				allowed = true // its parent
			case lf == 3 && strings.HasSuffix(from, "test") && isStore(to):
				allowed = true // a test-support package and the stores
			case lf == 4 && lt == 3:
				allowed = false // a client links no service
			}
			if !allowed {
				bad = append(bad, fmt.Sprintf("%s (layer %d) imports %s (layer %d)", from, lf, to, lt))
			}
		}
	}
	slices.Sort(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// TestNetHTTP: net/http is imported by the transports, the clients, the
// one wire layer and the command, and by no service, store or mechanism.
func TestNetHTTP(t *testing.T) {
	may := []string{"httpapi", "rpc", "rpc/gen/varplane/v1/varplanev1connect", "ui", "client", "config/consumer", "control/hook", "internal/wire", "cmd/varplane"}
	for _, p := range goList(t) {
		r, ok := rel(p.ImportPath)
		if ok && slices.Contains(p.Imports, "net/http") && !slices.Contains(may, r) {
			t.Errorf("%s imports net/http; only %s may (docs/architecture.md)", p.ImportPath, strings.Join(may, ", "))
		}
	}
}

// TestSDKLinks: the SDK links no server code and no gRPC: none of its
// dependencies is a package of layers 3 or 5, grpc-go, protobuf or the
// Prometheus client, nor the OpenFeature SDK (client/openfeature links it).
func TestSDKLinks(t *testing.T) {
	layers := readLayers(t)
	pkgs := goList(t)
	sdk := pkgs[module+"/client"]
	if sdk == nil {
		t.Fatal("no package client")
	}
	for _, dep := range sdk.Deps {
		if r, ok := rel(dep); ok {
			if l := layerOf(layers, r); l == 3 || l == 5 {
				t.Errorf("client links %s (layer %d)", dep, l)
			}
			continue
		}
		for _, banned := range []string{"google.golang.org/grpc", "google.golang.org/protobuf", "github.com/prometheus/", "github.com/open-feature/"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("client links %s", dep)
			}
		}
	}
}
