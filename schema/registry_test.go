package schema_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/schema"
)

// writeTree creates files (slash paths relative to the returned directory).
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func mustLoad(t *testing.T, files map[string]string) *schema.Registry {
	t.Helper()
	r, err := schema.LoadDir(context.Background(), writeTree(t, files))
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	return r
}

func issuesOf(t *testing.T, r *schema.Registry, id, doc string) []varplane.Issue {
	t.Helper()
	issues, err := r.Validate(id, json.RawMessage(doc))
	if err != nil {
		t.Fatalf("Validate(%q, %s): %v", id, doc, err)
	}
	return issues
}

const lanesYAML = `# agentic lanes, version 1
type: object
additionalProperties: false
required: [enabled]
properties:
  enabled: {type: boolean}
  budgets:
    type: object
    properties:
      daily: {type: integer, maximum: 9007199254740993}
  since: {type: string, default: 2024-01-01}
  ratio: {type: number, maximum: 0.5}
`

func TestLoadDir(t *testing.T) {
	r := mustLoad(t, map[string]string{
		"agentic-lanes/v1.yaml": lanesYAML,
		"tenants/v2.json":       `{"$id":"https://127.0.0.1:1/tenant.json","type":"object","required":["name"]}`,
		"flat.yml":              "type: string\n",
		"deep/a/b/c.json":       `{"type":"integer"}`,
		"README.md":             "# not a schema",
		"notes.txt":             "{",
		".hidden.json":          "{broken",
		".git/config.json":      "{broken",
	})
	if got, want := r.IDs(), []string{"agentic-lanes/v1", "deep/a/b/c", "flat", "tenants/v2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("IDs = %q, want %q", got, want)
	}
	tests := []struct {
		id, doc string
		want    []varplane.Issue
	}{
		{"agentic-lanes/v1", `{"enabled":true,"budgets":{"daily":5},"since":"x","ratio":0.25}`, nil},
		{"agentic-lanes/v1", `{"enabled":true,"budgets2":{}}`,
			[]varplane.Issue{{Code: schema.CodeUnknownField, Path: "/budgets2", Message: "unknown field 'budgets2'"}}},
		// The YAML maximum is kept exact: 2^53+1 passes, 2^53+2 does not.
		{"agentic-lanes/v1", `{"enabled":true,"budgets":{"daily":9007199254740993}}`, nil},
		{"agentic-lanes/v1", `{"enabled":true,"budgets":{"daily":9007199254740994}}`,
			[]varplane.Issue{{Code: schema.CodeMaximum, Path: "/budgets/daily", Message: "field 'daily' must be at most 9007199254740993"}}},
		{"agentic-lanes/v1", `{"enabled":true,"ratio":0.75}`,
			[]varplane.Issue{{Code: schema.CodeMaximum, Path: "/ratio", Message: "field 'ratio' must be at most 0.5"}}},
		{"tenants/v2", `{}`,
			[]varplane.Issue{{Code: schema.CodeRequired, Path: "/name", Message: "missing required field 'name'"}}},
		{"flat", `"ok"`, nil},
		{"deep/a/b/c", `"no"`,
			[]varplane.Issue{{Code: schema.CodeType, Path: "", Message: "document must be integer, not string"}}},
	}
	for _, tt := range tests {
		if got := issuesOf(t, r, tt.id, tt.doc); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Validate(%q, %s) = %+v, want %+v", tt.id, tt.doc, got, tt.want)
		}
	}
}

func TestLoadDirEmpty(t *testing.T) {
	r := mustLoad(t, nil)
	if ids := r.IDs(); len(ids) != 0 {
		t.Errorf("IDs = %q, want none", ids)
	}
}

func TestLoadDirErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string // substrings of the error
	}{
		{"bad JSON", map[string]string{"ok.json": `{}`, "sub/bad.json": `{"type":`},
			[]string{filepath.Join("sub", "bad.json"), "not valid JSON"}},
		{"bad YAML", map[string]string{"bad.yaml": "type: [object\n"}, []string{"bad.yaml", "not valid YAML"}},
		{"schema does not compile", map[string]string{"v1.yaml": "type: banana\n"}, []string{"v1.yaml"}},
		{"duplicate YAML key", map[string]string{"dup.yaml": "type: object\nrequired: [a]\ntype: string\n"},
			[]string{"dup.yaml", "line 3", "duplicate key"}},
		{"nested duplicate YAML key", map[string]string{"dup.yml": "properties:\n  a: {}\n  a: {}\n"},
			[]string{"dup.yml", "line 3", "duplicate key"}},
		{"two YAML documents", map[string]string{"two.yaml": "type: object\n---\ntype: string\n"},
			[]string{"two.yaml", "more than one document"}},
		{"empty YAML", map[string]string{"empty.yaml": ""}, []string{"empty.yaml", "empty"}},
		{"merge key", map[string]string{"m.yaml": "properties:\n  a:\n    <<: {type: string}\n"},
			[]string{"m.yaml", "line 3", "merge keys"}},
		{"anchor", map[string]string{"a.yaml": "$defs:\n  name: &name {type: string}\nproperties:\n  first: *name\n"},
			[]string{"a.yaml", "line 2", "anchors and aliases are not supported"}},
		{"leading-zero integer", map[string]string{"z.yaml": "type: integer\nmaximum: 0644\n"},
			[]string{"z.yaml", "line 2", "leading zero"}},
		{"too deep", map[string]string{"deep.yaml": strings.Repeat("[", 300) + strings.Repeat("]", 300) + "\n"},
			[]string{"deep.yaml", "depth limit"}},
		{"infinite float", map[string]string{"inf.yaml": "maximum: .inf\n"}, []string{"inf.yaml", "no JSON form"}},
		{"binary value", map[string]string{"bin.yaml": "default: !!binary aGVsbG8=\n"}, []string{"bin.yaml", "line 1", "unsupported tag"}},
		{"external ref", map[string]string{"ref.json": `{"$ref":"file:///etc/passwd"}`},
			[]string{"ref.json", "external references are not allowed", "file:///etc/passwd"}},
		{"same id twice", map[string]string{"a/v1.json": `{}`, "a/v1.yaml": "{}\n"},
			[]string{"a/v1", "also defined by"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := schema.LoadDir(context.Background(), writeTree(t, tt.files))
			if err == nil {
				t.Fatal("LoadDir succeeded, want error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("LoadDir error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadDirExternalRefIsSentinel(t *testing.T) {
	_, err := schema.LoadDir(context.Background(), writeTree(t, map[string]string{
		"r.yaml": "properties:\n  a: {$ref: 'http://127.0.0.1:1/x.json'}\n",
	}))
	if !errors.Is(err, schema.ErrExternalRef) {
		t.Errorf("LoadDir = %v, want ErrExternalRef", err)
	}
}

func TestLoadDirNotADirectory(t *testing.T) {
	dir := writeTree(t, map[string]string{"f.json": `{}`})
	for _, p := range []string{filepath.Join(dir, "f.json"), filepath.Join(dir, "missing")} {
		if _, err := schema.LoadDir(context.Background(), p); err == nil {
			t.Errorf("LoadDir(%s) succeeded, want error", filepath.Base(p))
		}
	}
}

func TestLoadDirCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := schema.LoadDir(ctx, writeTree(t, map[string]string{"a.json": `{}`}))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("LoadDir = %v, want context.Canceled", err)
	}
}

// TestYAMLAliasBomb: a billion-laughs document is small as text but huge
// once aliases are expanded; the load must fail, not exhaust memory.
func TestYAMLAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	_, err := schema.LoadDir(context.Background(), writeTree(t, map[string]string{"bomb.yaml": b.String()}))
	if err == nil || !strings.Contains(err.Error(), "bomb.yaml") || !strings.Contains(err.Error(), "anchors and aliases are not supported") {
		t.Fatalf("LoadDir(alias bomb) = %v, want an error naming the file", err)
	}
}

func TestYAMLConversion(t *testing.T) {
	r := mustLoad(t, map[string]string{"s.yaml": `
$defs:
  name: {type: string, minLength: 1}
properties:
  first: {$ref: "#/$defs/name"}
  last: {$ref: "#/$defs/name"}
  port: {type: integer, maximum: 0x10}
  mode: {type: integer, maximum: 0o644}
  level: {enum: [1, 2.5, "3", true, null, 2024-05-01]}
  "no": {const: no}
`})
	tests := []struct {
		doc  string
		want []varplane.Issue
	}{
		{`{"first":"a","last":"b","port":16,"level":2.5,"no":"no"}`, nil},
		{`{"level":"2024-05-01"}`, nil},
		{`{"level":null}`, nil},
		{`{"last":""}`, []varplane.Issue{{Code: schema.CodeMinLength, Path: "/last", Message: "field 'last' must be at least 1 characters long"}}},
		{`{"port":17}`, []varplane.Issue{{Code: schema.CodeMaximum, Path: "/port", Message: "field 'port' must be at most 16"}}},
		// 0o644 is octal in YAML 1.2: 420.
		{`{"mode":420}`, nil},
		{`{"mode":421}`, []varplane.Issue{{Code: schema.CodeMaximum, Path: "/mode", Message: "field 'mode' must be at most 420"}}},
		// YAML 1.2: "no" is a string, not false.
		{`{"no":false}`, []varplane.Issue{{Code: schema.CodeConst, Path: "/no", Message: "field 'no' must equal the value the schema fixes"}}},
		{`{"level":3}`, []varplane.Issue{{Code: schema.CodeEnum, Path: "/level", Message: `field 'level' must be one of 1, 2.5, "3", true, null, "2024-05-01"`}}},
	}
	for _, tt := range tests {
		if got := issuesOf(t, r, "s", tt.doc); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Validate(%s) = %+v, want %+v", tt.doc, got, tt.want)
		}
	}
}

func TestLoadFS(t *testing.T) {
	r, err := schema.LoadFS(context.Background(), fstest.MapFS{
		"x/v1.json": {Data: []byte(`{"type":"object"}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.IDs(), []string{"x/v1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("IDs = %q, want %q", got, want)
	}
}

func TestRegistryAdd(t *testing.T) {
	r := schema.NewRegistry()
	if err := r.Add("a/v1", json.RawMessage(`{"type":"object"}`)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, id, schema string
		want             string
	}{
		{"duplicate", "a/v1", `{}`, `"a/v1"`},
		{"compile error names id", "b/v1", `{"type":7}`, `"b/v1"`},
		{"external ref names id", "c/v1", `{"$ref":"file:///etc/passwd"}`, `"c/v1"`},
		{"empty id", "", `{}`, "empty schemaId"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.Add(tt.id, json.RawMessage(tt.schema))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Add(%q) = %v, want an error containing %s", tt.id, err, tt.want)
			}
		})
	}
	if got, want := r.IDs(), []string{"a/v1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("IDs after failed adds = %q, want %q", got, want)
	}
	if _, ok := r.Lookup("a/v1"); !ok {
		t.Error("Lookup(a/v1) = false")
	}
}

func TestRegistryUnknownSchema(t *testing.T) {
	var r schema.Registry // the zero value is an empty registry
	if ids := r.IDs(); len(ids) != 0 {
		t.Errorf("IDs = %q, want none", ids)
	}
	// The engine sees the registry only through this interface.
	var v varplane.Validator = &r
	issues, err := v.Validate("missing/v1", json.RawMessage(`{}`))
	if !errors.Is(err, varplane.ErrUnknownSchema) {
		t.Errorf("Validate(unknown) error = %v, want ErrUnknownSchema", err)
	}
	if issues != nil {
		t.Errorf("Validate(unknown) issues = %+v, want nil", issues)
	}
}

// TestConcurrentValidate exercises shared compiled schemas from many
// goroutines while Add publishes new snapshots; run with -race.
func TestConcurrentValidate(t *testing.T) {
	r := mustLoad(t, map[string]string{"l/v1.yaml": lanesYAML})
	want := []varplane.Issue{{Code: schema.CodeUnknownField, Path: "/x", Message: "unknown field 'x'"}}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				got, err := r.Validate("l/v1", json.RawMessage(`{"enabled":true,"x":1}`))
				if err != nil || !reflect.DeepEqual(got, want) {
					errs <- fmt.Errorf("goroutine %d: Validate = %+v, %v", g, got, err)
					return
				}
				_ = r.IDs()
			}
		}(g)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20; i++ {
			if err := r.Add(fmt.Sprintf("extra/%d", i), json.RawMessage(`{"type":"string"}`)); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got, want := len(r.IDs()), 21; got != want {
		t.Errorf("len(IDs) = %d, want %d", got, want)
	}
}
