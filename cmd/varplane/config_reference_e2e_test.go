package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigAsReference runs the component-configuration reference's own
// example through the binary: a secret reference where the schema wants a
// number (`bar: $BAZ_VALUE`) deploys, a bare component name in the
// annotation means the default namespace, and `serve` reads the deployment
// declaration from TOA_CONFIGURATION_VALUES, as the reference deploys its
// values service, in the reference's shape (component → epoch, schema,
// defaults).
func TestConfigAsReference(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"components/dummy/manifest.toa.yaml": "name: dummy\nnamespace: dummies\nconfiguration:\n  schema:\n    type: object\n    properties:\n      foo: {type: string}\n      bar: {type: number}\n  defaults:\n    foo: bar\n    bar: 1\n",
		"components/plain/manifest.toa.yaml": "name: plain\nconfiguration:\n  schema: {type: object, properties: {n: {type: integer}}}\n",
		"context.toa.yaml":                   "configuration:\n  dummies.dummy:\n    foo: qux\n    bar: $BAZ_VALUE # secret\n  plain:\n    n: 3\n",
	})
	r := runCLI(t, nil, "", "config", "deploy", "--manifests", filepath.Join(dir, "components"), "--annotation", filepath.Join(dir, "context.toa.yaml"))
	if r.code != ExitOK {
		t.Fatalf("config deploy: exit %d\n%s", r.code, r.stderr)
	}
	var dep struct {
		Components map[string]json.RawMessage `json:"components"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &dep); err != nil {
		t.Fatal(err)
	}
	if _, ok := dep.Components["default.plain"]; !ok {
		t.Fatalf("the bare name plain did not deploy as default.plain: %s", r.stdout)
	}
	reference, err := json.Marshal(dep.Components) // the reference's shape: no wrapper
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TOA_CONFIGURATION_VALUES", string(reference))
	s := startServer(t, "--store", "memory:", "--ui=false")
	values := s.URL + "/configuration/values/"
	m := expect(t, call(t, "GET", values+"dummies.dummy/", nil), 200, "")
	if got, _ := json.Marshal(m["configuration"]); string(got) != `{"bar":"$BAZ_VALUE","foo":"qux"}` {
		t.Fatalf("dummies.dummy = %s", got)
	}
	m = expect(t, call(t, "GET", values+"plain/", nil), 200, "")
	if got, _ := json.Marshal(m["configuration"]); string(got) != `{"n":3}` {
		t.Fatalf("plain = %s", got)
	}
	// A secret where a number goes is stored at runtime too.
	expect(t, send(t, "POST", values+"dummies.dummy/", "application/yaml", "configuration:\n  foo: quux\n  bar: $BAZ_VALUE\n"), 201, "")

	// A declaration in the variable that does not parse is a usage error
	// that names the variable.
	code, _, stderr := runServe(t, map[string]string{"TOA_CONFIGURATION_VALUES": `{"dummies.dummy": {"epoch": "0", "schema": {}}}`}, "--store", "memory:")
	if code != 2 || !strings.Contains(stderr, "TOA_CONFIGURATION_VALUES") {
		t.Fatalf("bad declaration: exit %d, stderr %s", code, stderr)
	}
}
