package secret

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestIsReference(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"$BAZ_VALUE", true},
		{"$A", true},
		{"$0_9", true},
		{"$" + strings.Repeat("A", 32), true},
		{"$" + strings.Repeat("A", 33), false},
		{"$", false},
		{"$baz", false},
		{"BAZ", false},
		{"$BAZ-VALUE", false},
		{" $BAZ", false},
		{"$BAZ\n", false},
		{"$$BAZ", false},
	}
	for _, tt := range tests {
		if got := IsReference(tt.in); got != tt.want {
			t.Errorf("IsReference(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestSecretNeverPrints(t *testing.T) {
	const value = "s3cr3t-value"
	s := New(value)
	if got := s.Unwrap(); got != value {
		t.Fatalf("Unwrap = %q", got)
	}
	type holder struct {
		Key Secret
		Map map[string]any
	}
	h := holder{Key: s, Map: map[string]any{"k": s, "list": []any{s}}}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10s", "%-8v"} {
		for _, arg := range []any{s, &s, h, &h} {
			if got := fmt.Sprintf(verb, arg); strings.Contains(got, value) || !strings.Contains(got, Redacted) {
				t.Errorf("Sprintf(%s, %T) = %q", verb, arg, got)
			}
		}
	}
	if got := fmt.Sprintf("%q", s); got != `"<REDACTED>"` {
		t.Errorf("%%q = %s", got)
	}
	if got := s.String(); got != Redacted {
		t.Errorf("String = %q", got)
	}
	if got := fmt.Sprint(s); got != Redacted {
		t.Errorf("Sprint = %q", got)
	}
	j, err := json.Marshal(h)
	var back struct{ Key string }
	if err != nil || bytes.Contains(j, []byte(value)) || json.Unmarshal(j, &back) != nil || back.Key != Redacted {
		t.Errorf("json = %s, %v", j, err)
	}
	txt, err := s.MarshalText()
	if err != nil || string(txt) != Redacted {
		t.Errorf("MarshalText = %s, %v", txt, err)
	}
	// As a map key, encoding/json uses MarshalText.
	mk, err := json.Marshal(map[Secret]int{s: 1})
	if err != nil || bytes.Contains(mk, []byte(value)) {
		t.Errorf("map key json = %s, %v", mk, err)
	}
	y, err := yaml.Marshal(h)
	if err != nil || bytes.Contains(y, []byte(value)) {
		t.Errorf("yaml = %s, %v", y, err)
	}
	var buf bytes.Buffer
	for _, hd := range []slog.Handler{slog.NewTextHandler(&buf, nil), slog.NewJSONHandler(&buf, nil)} {
		slog.New(hd).Info("msg", "key", s, "holder", h, slog.Any("any", s))
	}
	if strings.Contains(buf.String(), value) || !strings.Contains(buf.String(), Redacted) {
		t.Errorf("slog = %s", buf.String())
	}
}

func TestSubstitute(t *testing.T) {
	env := map[string]string{"VARPLANE_CONFIGURATION__BAZ_VALUE": "baz", "VARPLANE_CONFIGURATION__OTHER": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	in := map[string]any{
		"bar":   "$BAZ_VALUE",
		"plain": "BAZ_VALUE",
		"deep":  map[string]any{"list": []any{"$OTHER", "x", json.Number("1")}},
	}
	out, err := Substitute(in, lookup)
	if err != nil {
		t.Fatal(err)
	}
	m := out.(map[string]any)
	if s, ok := m["bar"].(Secret); !ok || s.Unwrap() != "baz" {
		t.Errorf("bar = %#v", m["bar"])
	}
	if s, ok := m["plain"].(string); !ok || s != "BAZ_VALUE" {
		t.Errorf("plain = %#v, want a plain string", m["plain"])
	}
	list := m["deep"].(map[string]any)["list"].([]any)
	if s, ok := list[0].(Secret); !ok || s.Unwrap() != "" {
		t.Errorf("list[0] = %#v, want an empty Secret", list[0])
	}
	if _, ok := list[1].(string); !ok {
		t.Errorf("list[1] = %#v", list[1])
	}
	if in["bar"] != "$BAZ_VALUE" {
		t.Error("Substitute modified its input")
	}

	_, err = Substitute(map[string]any{"a": "$MISSING", "b": []any{"$ALSO", "$MISSING"}}, lookup)
	var me *MissingError
	if !errors.As(err, &me) || strings.Join(me.Variables, ",") != "VARPLANE_CONFIGURATION__ALSO,VARPLANE_CONFIGURATION__MISSING" {
		t.Errorf("err = %v, want both variables named", err)
	}
}

func TestReferences(t *testing.T) {
	got := References([]any{map[string]any{"a": "$B", "c": []any{"$A", "$B", "no"}}, "$C"})
	if strings.Join(got, ",") != "A,B,C" {
		t.Errorf("References = %v", got)
	}
}

func TestConcealOutputs(t *testing.T) {
	vals, err := ParseAssignments([]string{"BAZ_VALUE=$ecr3t=x", "$API=k"}, Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	env, err := EnvFile(vals)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(env), "VARPLANE_CONFIGURATION__API=k\nVARPLANE_CONFIGURATION__BAZ_VALUE=$ecr3t=x\n"; got != want {
		t.Errorf("env file = %q, want %q", got, want)
	}
	k8s, err := KubernetesManifest("prod", vals)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		APIVersion string            `yaml:"apiVersion"`
		Kind       string            `yaml:"kind"`
		Type       string            `yaml:"type"`
		Metadata   map[string]string `yaml:"metadata"`
		Data       map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(k8s, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.APIVersion != "v1" || doc.Kind != "Secret" || doc.Type != "Opaque" || doc.Metadata["name"] != KubernetesName || doc.Metadata["namespace"] != "prod" {
		t.Errorf("manifest = %s", k8s)
	}
	dec, _ := base64.StdEncoding.DecodeString(doc.Data["VARPLANE_CONFIGURATION__BAZ_VALUE"])
	if string(dec) != "$ecr3t=x" {
		t.Errorf("data = %q", dec)
	}
	for _, bad := range [][]string{{"lower=x"}, {"NOEQUALS"}, {"A=1", "A=2"}, {strings.Repeat("A", 33) + "=x"}} {
		if _, err := ParseAssignments(bad, Inputs{}); err == nil {
			t.Errorf("ParseAssignments(%q) accepted", bad)
		}
	}
	if _, err := EnvFile(map[string]string{"A": "two\nlines"}); !errors.Is(err, ErrMultiline) {
		t.Errorf("multiline: %v", err)
	}
}
