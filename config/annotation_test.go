package config

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/varplane/varplane/internal/jsontext"
)

func mustYAML(t *testing.T, s string) any {
	t.Helper()
	v, err := Decode([]byte(s), true, FileLimits, 0)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := jsontext.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestResolveEnvironment(t *testing.T) {
	tests := []struct {
		name string
		in   string
		env  string
		want string
	}{
		{"tagged after plain", "{foo: qux, foo@staging: quux}", "staging", `{"foo":"quux"}`},
		{"tagged before plain", "{foo@staging: quux, foo: qux}", "staging", `{"foo":"quux"}`},
		{"tagged without plain", "{bar@staging: 2}", "staging", `{"bar":2}`},
		{"other environment dropped", "{foo: qux, foo@production: x, bar@production: 1}", "staging", `{"foo":"qux"}`},
		{"no environment drops every tag", "{foo: qux, foo@staging: quux}", "", `{"foo":"qux"}`},
		{"tagged object replaces, no merge", "{o: {a: 1, b: 2}, o@staging: {c: 3}}", "staging", `{"o":{"c":3}}`},
		{"nested depth", "{a: {b: {c: 1, c@staging: 2}}}", "staging", `{"a":{"b":{"c":2}}}`},
		{"inside arrays", "{list: [{x: 1, x@staging: 2}, {y@dev: 3, y: 4}]}", "staging", `{"list":[{"x":2},{"y":4}]}`},
		{"tagged array", "{list: [1], list@staging: [2, 3]}", "staging", `{"list":[2,3]}`},
		{"email-like keys are plain", `{"user@example.com": 1}`, "staging", `{"user@example.com":1}`},
		{"tagged value itself resolved", "{o@staging: {k: 1, k@staging: 2}}", "staging", `{"o":{"k":2}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := jsonOf(t, ResolveEnvironment(mustYAML(t, tt.in), tt.env)); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func dummy(t *testing.T) []*Manifest {
	t.Helper()
	m, err := ParseManifest("components/dummy/manifest.yaml", []byte(dummyManifest))
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseManifest("components/resources/manifest.yaml", []byte("name: resources\nconfiguration:\n  schema: {type: object, properties: {n: {type: integer}}}\n  defaults: {n: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return []*Manifest{m, r}
}

func TestNewDeployment(t *testing.T) {
	const ann = `
configuration:
  resources:
    cpu: [200m, 1000m]
    memory: [200Mi, 500Mi]
  dummies.dummy:
    foo: qux          # override default value
    foo@staging: quux # deployment environment discriminator
    bar: $BAZ_VALUE   # secret
`
	tests := []struct {
		env      string
		wantFoo  string
		wantJSON string
	}{
		{"staging", "quux", `{"bar":"$BAZ_VALUE","foo":"quux"}`},
		{"production", "qux", `{"bar":"$BAZ_VALUE","foo":"qux"}`},
		{"", "qux", `{"bar":"$BAZ_VALUE","foo":"qux"}`},
	}
	for _, tt := range tests {
		t.Run("env="+tt.env, func(t *testing.T) {
			// The reference's own example: a secret where the schema wants a
			// number deploys (the consumer checks the secret's value), and
			// so does a string schema.
			a, err := ParseAnnotation("context.yaml", []byte(ann))
			if err != nil {
				t.Fatal(err)
			}
			if d, err := NewDeployment(dummy(t), a, tt.env); err != nil {
				t.Fatalf("secret where the schema wants a number: %v", err)
			} else if c, _ := d.Component("dummies.dummy"); string(c.Defaults) != tt.wantJSON {
				t.Fatalf("defaults = %s, want %s", c.Defaults, tt.wantJSON)
			}
			ms := dummy(t)
			strSchema, err := ParseManifest("m.yaml", []byte("name: dummy\nnamespace: dummies\nconfiguration:\n  schema: {type: object, properties: {foo: {type: string}, bar: {type: string}}}\n  defaults: {foo: bar}\n"))
			if err != nil {
				t.Fatal(err)
			}
			ms[0] = strSchema
			d, err := NewDeployment(ms, a, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			c, ok := d.Component("dummies.dummy")
			if !ok {
				t.Fatal("dummies.dummy not deployed")
			}
			if got := string(c.Defaults); got != tt.wantJSON {
				t.Errorf("defaults = %s, want %s", got, tt.wantJSON)
			}
			if got, want := c.Epoch, strSchema.Epoch; got != want {
				t.Errorf("epoch = %s, want %s", got, want)
			}
			if d.Resources == nil || strings.Join(d.Resources.CPU, ",") != "200m,1000m" || strings.Join(d.Resources.Memory, ",") != "200Mi,500Mi" {
				t.Errorf("resources = %+v", d.Resources)
			}
			// The bare key resources is the service's, so the component
			// default.resources keeps its manifest defaults.
			if got := string(d.Components["default.resources"].Defaults); got != `{"n":1}` {
				t.Errorf("default.resources defaults = %s", got)
			}
			if got := strings.Join(d.Secrets(), ","); got != "BAZ_VALUE" {
				t.Errorf("Secrets = %s", got)
			}
		})
	}
}

func TestNewDeploymentAnnotationRules(t *testing.T) {
	tests := []struct {
		name     string
		ann      string
		env      string
		wantErr  string // substring; "" means success
		check    func(t *testing.T, d *Deployment)
		wantPath string
	}{
		{name: "default.resources names the component", ann: "configuration: {default.resources: {n: 5}}",
			check: func(t *testing.T, d *Deployment) {
				if got := string(d.Components["default.resources"].Defaults); got != `{"n":5}` {
					t.Errorf("defaults = %s", got)
				}
				if d.Resources != nil {
					t.Errorf("resources = %+v, want none", d.Resources)
				}
			}},
		{name: "resources null", ann: "configuration: {resources: null}",
			check: func(t *testing.T, d *Deployment) {
				if d.Resources != nil {
					t.Errorf("resources = %+v", d.Resources)
				}
			}},
		{name: "annotation replaces manifest defaults", ann: "configuration: {dummies.dummy: {bar: 3}}",
			check: func(t *testing.T, d *Deployment) {
				if got := string(d.Components["dummies.dummy"].Defaults); got != `{"bar":3}` {
					t.Errorf("defaults = %s", got)
				}
			}},
		{name: "tag at top level", ann: "configuration: {dummies.dummy@staging: {bar: 4}}", env: "staging",
			check: func(t *testing.T, d *Deployment) {
				if got := string(d.Components["dummies.dummy"].Defaults); got != `{"bar":4}` {
					t.Errorf("defaults = %s", got)
				}
			}},
		{name: "unknown component", ann: "configuration: {dummies.nope: {}}", wantErr: `"dummies.nope" names no known component`, wantPath: "/configuration/dummies.nope"},
		{name: "bare name is unknown", ann: "configuration: {dummy: {}}", wantErr: `"dummy" names no known component`, wantPath: "/configuration/dummy"},
		{name: "non-object value", ann: "configuration: {dummies.dummy: 5}", wantErr: "dummies.dummy must be an object", wantPath: "/configuration/dummies.dummy"},
		{name: "null value", ann: "configuration: {dummies.dummy: null}", wantErr: "dummies.dummy must be an object", wantPath: "/configuration/dummies.dummy"},
		{name: "not fitting", ann: "configuration: {dummies.dummy: {foo: 1}}", wantErr: "does not fit", wantPath: "/configuration/dummies.dummy/foo"},
		{name: "resources not object", ann: "configuration: {resources: 1}", wantErr: "resources must be null", wantPath: "/configuration/resources"},
		{name: "resources one value", ann: "configuration: {resources: {cpu: [1m]}}", wantErr: "[min, max]", wantPath: "/configuration/resources/cpu"},
		{name: "resources not strings", ann: "configuration: {resources: {memory: [1, 2]}}", wantErr: "[min, max]", wantPath: "/configuration/resources/memory/0"},
		{name: "resources unknown key", ann: "configuration: {resources: {gpu: [a, b]}}", wantErr: "unknown property", wantPath: "/configuration/resources/gpu"},
		{name: "configuration not object", ann: "configuration: [1]", wantErr: "must be an object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseAnnotation("ctx.yaml", []byte(tt.ann))
			if err == nil {
				var d *Deployment
				d, err = NewDeployment(dummy(t), a, tt.env)
				if err == nil && tt.check != nil {
					tt.check(t, d)
				}
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "ctx.yaml: ") {
				t.Fatalf("err = %v, want one naming ctx.yaml and %q", err, tt.wantErr)
			}
			var me *ManifestError
			if tt.wantPath != "" && (!errors.As(err, &me) || me.Path != tt.wantPath) {
				t.Errorf("path = %v, want %s", err, tt.wantPath)
			}
		})
	}
}

func TestDeployAndLoad(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "manifests", "dummy", "manifest.yaml"), dummyManifest)
	writeFile(t, filepath.Join(dir, "context.yaml"), "configuration:\n  dummies.dummy: {foo: qux, foo@staging: quux, bar: 2}\n")
	out, err := Deploy(filepath.Join(dir, "manifests"), filepath.Join(dir, "context.yaml"), "staging")
	if err != nil {
		t.Fatal(err)
	}
	var decl struct {
		Environment string `json:"environment"`
		Components  map[string]struct {
			Epoch    string          `json:"epoch"`
			Schema   json.RawMessage `json:"schema"`
			Defaults json.RawMessage `json:"defaults"`
		} `json:"components"`
	}
	if err := json.Unmarshal(out, &decl); err != nil {
		t.Fatalf("deploy output is not JSON: %v\n%s", err, out)
	}
	c := decl.Components["dummies.dummy"]
	if decl.Environment != "staging" || c.Epoch != "2a73909699a3acdecac991460876b4ba60db4b5d38b32cfb1fec3d38f71af06d" {
		t.Errorf("declaration = %s", out)
	}
	if got := compact(t, c.Defaults); got != `{"bar":2,"foo":"quux"}` {
		t.Errorf("defaults = %s", got)
	}

	file := filepath.Join(dir, "deployment.json")
	writeFile(t, file, string(out))
	d, err := LoadDeployment(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(d.Components["dummies.dummy"].Defaults); got != `{"bar":2,"foo":"quux"}` || d.Environment != "staging" {
		t.Errorf("loaded = %+v", d.Components["dummies.dummy"])
	}
	again, err := d.JSON()
	if err != nil || string(again) != string(out) {
		t.Errorf("round trip changed the declaration:\n%s\n%s", out, again)
	}

	// The seed's bare map form loads too.
	bare := `{"dummies.dummy": {"epoch": "a2c799262a3ce3c19ef5cdd983bf3d12b43ab3c426227091b909dcb7054738c0", "schema": {"type": "object"}, "defaults": {"foo": "bye"}}}`
	if d, err := ParseDeployment("values.json", []byte(bare)); err != nil || string(d.Components["dummies.dummy"].Defaults) != `{"foo":"bye"}` {
		t.Errorf("bare form: %v", err)
	}
}

func TestParseDeploymentErrors(t *testing.T) {
	const ep = "a2c799262a3ce3c19ef5cdd983bf3d12b43ab3c426227091b909dcb7054738c0"
	tests := []struct {
		name, data, wantPath string
	}{
		{"epoch mismatch", `{"components":{"a.b":{"epoch":"00","schema":{"type":"object"}}}}`, "/components/a.b/epoch"},
		{"bad name", `{"components":{"ab":{"epoch":"` + ep + `","schema":{"type":"object"}}}}`, "/components/ab"},
		{"no schema", `{"components":{"a.b":{"epoch":"` + ep + `"}}}`, "/components/a.b/schema"},
		{"defaults do not fit", `{"components":{"a.b":{"epoch":"` + ep + `","schema":{"type":"object"},"defaults":[]}}}`, "/components/a.b/defaults"},
		{"not an object", `[]`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseDeployment("d.json", []byte(tt.data))
			var me *ManifestError
			if !errors.As(err, &me) || me.Path != tt.wantPath || me.File != "d.json" {
				t.Errorf("err = %v, want a ManifestError at d.json %s", err, tt.wantPath)
			}
		})
	}
}

func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	v, err := DecodeJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	return jsonOf(t, v)
}
