package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const dummyManifest = `name: dummy
namespace: dummies
operations: {}   # other tools' keys are not ours
configuration:
  schema:
    type: object
    properties:
      foo:
        type: string
      bar:
        type: number
  defaults:
    foo: bar
    bar: 1
`

func TestEpochVectors(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		want   string
	}{
		{"seed schema", `{"type":"object","properties":{"foo":{"type":"string"},"bar":{"type":"number"}}}`,
			"2a73909699a3acdecac991460876b4ba60db4b5d38b32cfb1fec3d38f71af06d"},
		{"key order and whitespace do not matter", "{ \"properties\" : {\"bar\":{\"type\":\"number\"},\n \"foo\":{\"type\":\"string\"}}, \"type\":\"object\"}",
			"2a73909699a3acdecac991460876b4ba60db4b5d38b32cfb1fec3d38f71af06d"},
		{"minimal", `{"type":"object"}`, "a2c799262a3ce3c19ef5cdd983bf3d12b43ab3c426227091b909dcb7054738c0"},
		{"ECMAScript number form", `{"type":"integer","maximum":1e2,"minimum":0.50}`,
			"6310a49fdc33442a3f70ceeea78390469d2713467f3fe4014d16b5cc4d1dc0e7"},
		{"UTF-16 key order, no HTML escaping", `{"type":"object","properties":{"\uff61":{},"\ud83d\ude00":{},"\u003ca>":{}}}`,
			"877fdd9b09e887ee98c910fbb8d521498ea2845fe4abcfd0bd4e088b7590c387"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Epoch(json.RawMessage(tt.schema))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Epoch = %s, want %s", got, tt.want)
			}
			if !ValidEpoch(got) {
				t.Errorf("ValidEpoch(%s) = false", got)
			}
		})
	}
	a, _ := Epoch(json.RawMessage(`{"type":"object"}`))
	b, _ := Epoch(json.RawMessage(`{"type":"object","required":[]}`))
	if a == b {
		t.Error("a schema change kept the epoch")
	}
	if _, err := Epoch(json.RawMessage(`{"maximum":9007199254740993}`)); err == nil {
		t.Error("Epoch accepted a number canonical JSON cannot keep")
	}
}

func TestParseManifest(t *testing.T) {
	m, err := ParseManifest("dummy.yaml", []byte(dummyManifest))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Component(), "dummies.dummy"; got != want {
		t.Errorf("Component = %q, want %q", got, want)
	}
	if got, want := m.Epoch, "2a73909699a3acdecac991460876b4ba60db4b5d38b32cfb1fec3d38f71af06d"; got != want {
		t.Errorf("Epoch = %s, want %s", got, want)
	}
	if got, want := string(m.Defaults), `{"bar":1,"foo":"bar"}`; got != want {
		t.Errorf("Defaults = %s, want %s", got, want)
	}
	// The same manifest as JSON has the same epoch.
	j, err := ParseManifest("m.json", []byte(`{"name":"dummy","namespace":"dummies","configuration":{"schema":{"properties":{"bar":{"type":"number"},"foo":{"type":"string"}},"type":"object"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if j.Epoch != m.Epoch || j.Defaults != nil {
		t.Errorf("JSON manifest: epoch %s defaults %s", j.Epoch, j.Defaults)
	}
	d, err := ParseManifest("m.yaml", []byte("name: x\nconfiguration:\n  schema: {type: object}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.Component(), "default.x"; got != want {
		t.Errorf("Component = %q, want %q", got, want)
	}
}

func TestParseManifestErrors(t *testing.T) {
	tests := []struct {
		name     string
		file     string
		data     string
		wantPath string
		wantMsg  string
	}{
		{"no name", "a.yaml", "configuration: {schema: {type: object}}", "/name", "name is required"},
		{"bad name", "a.yaml", "name: a.b\nconfiguration: {schema: {type: object}}", "/name", "name must be"},
		{"configuration not object", "a.yaml", "name: a\nconfiguration: 3", "/configuration", "must be an object"},
		{"no schema", "a.yaml", "name: a\nconfiguration: {defaults: {}}", "/configuration/schema", "schema is required"},
		{"schema not object", "a.yaml", "name: a\nconfiguration: {schema: true}", "/configuration/schema", "JSON Schema object"},
		{"extra property", "a.yaml", "name: a\nconfiguration: {schema: {}, extra: 1}", "/configuration/extra", "unknown property"},
		{"invalid schema", "a.yaml", "name: a\nconfiguration: {schema: {type: 5}}", "/configuration/schema", "not a valid JSON Schema"},
		{"defaults not object", "a.yaml", "name: a\nconfiguration: {schema: {}, defaults: [1]}", "/configuration/defaults", "must be an object"},
		{"defaults do not fit", "a.yaml", "name: a\nconfiguration:\n  schema: {type: object, properties: {foo: {type: string}}}\n  defaults: {foo: 1}",
			"/configuration/defaults/foo", "does not fit the schema"},
		// The YAML converter names the line where the path is not known yet.
		{"duplicate key", "a.yaml", "name: a\nname: b\nconfiguration: {schema: {}}", "", "line 2: duplicate key"},
		{"duplicate key json", "a.json", `{"name":"a","configuration":{"schema":{},"schema":{}}}`, "/configuration/schema", "duplicate key"},
		{"alias", "a.yaml", "name: a\nconfiguration:\n  schema: &s {type: object}\n  defaults: *s", "", "line 3: anchors and aliases are not supported"},
		{"YAML 1.1 octal in defaults", "a.yaml", "name: a\nconfiguration:\n  schema: {type: object}\n  defaults: {mode: 010}", "", "line 4: an integer with a leading zero"},
		{"YAML 1.1 octal in the schema", "a.yaml", "name: a\nconfiguration:\n  schema:\n    type: object\n    properties: {mode: {maximum: 0644}}", "", "line 5: an integer with a leading zero"},
		{"too deep", "a.json", `{"name":"a","configuration":{"schema":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}}`, "", "depth"},
		{"not valid yaml", "a.yaml", "name: [", "", "not valid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseManifest(tt.file, []byte(tt.data))
			var me *ManifestError
			if !errors.As(err, &me) {
				t.Fatalf("err = %v, want *ManifestError", err)
			}
			if me.File != tt.file {
				t.Errorf("File = %q, want %q", me.File, tt.file)
			}
			if me.Path != tt.wantPath {
				t.Errorf("Path = %q, want %q (%v)", me.Path, tt.wantPath, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) || !strings.HasPrefix(err.Error(), tt.file+": ") {
				t.Errorf("error %q does not start with the file or lacks %q", err, tt.wantMsg)
			}
		})
	}
	if _, err := ParseManifest("a.yaml", []byte("name: a\n")); !errors.Is(err, ErrNoConfiguration) {
		t.Errorf("manifest without configuration: err = %v, want ErrNoConfiguration", err)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadManifests(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "dummy", "manifest.toa.yaml"), dummyManifest)
	writeFile(t, filepath.Join(dir, "deep", "er", "other.json"), `{"name":"other","namespace":"alpha","configuration":{"schema":{"type":"object"}}}`)
	writeFile(t, filepath.Join(dir, "x", "plain.yml"), "name: plain\n")                  // no configuration: skipped
	writeFile(t, filepath.Join(dir, "x", "list.yaml"), "- 1\n- 2\n")                     // not a manifest: skipped
	writeFile(t, filepath.Join(dir, "x", "notes.txt"), "configuration: {schema: broken") // other extension: skipped
	writeFile(t, filepath.Join(dir, ".hidden", "m.yaml"), "name: h\nconfiguration: 1")   // hidden dir: skipped
	ms, err := LoadManifests(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.Component())
	}
	if want := "alpha.other,dummies.dummy"; strings.Join(got, ",") != want {
		t.Errorf("components = %v, want %s", got, want)
	}

	writeFile(t, filepath.Join(dir, "y", "bad.yaml"), "name: bad\nconfiguration: {schema: {}, defaults: 1}")
	_, err = LoadManifests(dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join("y", "bad.yaml")) || !strings.Contains(err.Error(), "/configuration/defaults") {
		t.Errorf("bad manifest: err = %v, want file and path named", err)
	}
	os.Remove(filepath.Join(dir, "y", "bad.yaml"))

	writeFile(t, filepath.Join(dir, "z", "again.yaml"), dummyManifest)
	if _, err = LoadManifests(dir); err == nil || !strings.Contains(err.Error(), "already declared") {
		t.Errorf("duplicate component: err = %v", err)
	}
}
