package config

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestValidateResolved: where a secret reference stands, the schema is
// checked on the secret's value, read as a string or as the JSON scalar it
// spells; an issue there names the secret's variable, never its value.
func TestValidateResolved(t *testing.T) {
	m, err := ParseManifest("m.yaml", []byte(`name: dummy
namespace: dummies
configuration:
  schema:
    type: object
    properties:
      foo: {type: string, maxLength: 4}
      bar: {type: number, maximum: 100}
      on: {type: boolean}
      list: {type: array, items: {type: integer}}
`))
	if err != nil {
		t.Fatal(err)
	}
	doc := json.RawMessage(`{"foo":"$FOO","bar":"$BAZ_VALUE","on":"$ON","list":[1,"$ITEM"]}`)
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	good := map[string]string{
		"VARPLANE_CONFIGURATION__FOO": "abcd", "VARPLANE_CONFIGURATION__BAZ_VALUE": "42",
		"VARPLANE_CONFIGURATION__ON": "true", "VARPLANE_CONFIGURATION__ITEM": "7",
	}
	for _, tc := range []struct {
		name   string
		change map[string]string
		path   string // "" when it fits
	}{
		{"every value fits its type", nil, ""},
		{"a number that is not one", map[string]string{"VARPLANE_CONFIGURATION__BAZ_VALUE": "s3cr3t-value"}, "/bar"},
		{"a number over the maximum", map[string]string{"VARPLANE_CONFIGURATION__BAZ_VALUE": "1000"}, "/bar"},
		{"a string over maxLength", map[string]string{"VARPLANE_CONFIGURATION__FOO": "s3cr3t-value"}, "/foo"},
		{"a string that spells a number stays a string", map[string]string{"VARPLANE_CONFIGURATION__FOO": "12"}, ""},
		{"an array item", map[string]string{"VARPLANE_CONFIGURATION__ITEM": "1.5"}, "/list/1"},
		{"the reference system's variable", map[string]string{"VARPLANE_CONFIGURATION__BAZ_VALUE": "", "TOA_CONFIGURATION__BAZ_VALUE": "3"}, ""},
		{"the reference system's variable, not a number", map[string]string{"VARPLANE_CONFIGURATION__BAZ_VALUE": "", "TOA_CONFIGURATION__BAZ_VALUE": "s3cr3t"}, "/bar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{}
			for k, v := range good {
				vars[k] = v
			}
			for k, v := range tc.change {
				if v == "" {
					delete(vars, k)
				} else {
					vars[k] = v
				}
			}
			issues, err := m.ValidateResolved(doc, env(vars))
			if err != nil {
				t.Fatal(err)
			}
			if tc.path == "" {
				if len(issues) != 0 {
					t.Fatalf("issues = %+v", issues)
				}
				return
			}
			if len(issues) != 1 || issues[0].Path != tc.path || !strings.Contains(issues[0].Message, "$") || strings.Contains(issues[0].Message, "s3cr3t") {
				t.Fatalf("issues = %+v, want one at %s naming the secret, not its value", issues, tc.path)
			}
		})
	}
	// Without the secrets, the stored document (references in place) fits.
	if issues, err := m.Validate(doc); err != nil || len(issues) != 0 {
		t.Fatalf("Validate with references = %+v %v", issues, err)
	}
	// A reference does not excuse its neighbours.
	if issues, _ := m.Validate(json.RawMessage(`{"bar":"$BAZ_VALUE","on":"yes"}`)); len(issues) != 1 || issues[0].Path != "/on" {
		t.Fatalf("issues = %+v, want one at /on", issues)
	}
}

// TestBareComponentNames: in an annotation and on the values service, a
// bare name means the default namespace; naming one component both ways
// is refused.
func TestBareComponentNames(t *testing.T) {
	plain, err := ParseManifest("components/plain/manifest.yaml", []byte("name: plain\nconfiguration:\n  schema: {type: object, properties: {n: {type: integer}}}\n  defaults: {n: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ms := append(dummy(t), plain)
	a, err := ParseAnnotation("context.yaml", []byte("configuration:\n  plain:\n    n: 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDeployment(ms, a, "")
	if err != nil {
		t.Fatalf("bare name refused: %v", err)
	}
	if c, ok := d.Component("default.plain"); !ok || string(c.Defaults) != `{"n":5}` {
		t.Fatalf("default.plain = %+v", c)
	}
	if c, ok := d.Component("plain"); !ok || string(c.Defaults) != `{"n":5}` {
		t.Fatalf("plain = %+v", c)
	}
	both, _ := ParseAnnotation("context.yaml", []byte("configuration:\n  plain: {n: 5}\n  default.plain: {n: 6}\n"))
	if _, err := NewDeployment(ms, both, ""); err == nil || !strings.Contains(err.Error(), "same component") {
		t.Fatalf("both forms: err = %v", err)
	}
	_, eng := newService(t)
	svc2, err := NewService(eng, d)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := svc2.Create(ctx, CreateRequest{Component: "plain", Configuration: json.RawMessage(`{"n":9}`), Originator: "x"}); err != nil {
		t.Fatal(err)
	}
	v, ok, err := svc2.Get(ctx, "default.plain", "")
	if err != nil || !ok || string(v.Configuration) != `{"n":9}` || v.Component != "default.plain" {
		t.Fatalf("Get(default.plain) = %+v %v %v", v, ok, err)
	}
}
