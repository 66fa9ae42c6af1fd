package config

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/varplane/varplane"
)

// TestDecodeYAML: config reads YAML by the one converter's policy.
func TestDecodeYAML(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "a: no\nb: yes\nc: on", want: `{"a":"no","b":"yes","c":"on"}`}, // YAML 1.2: strings
		{in: "a: true\nb: null\nc: ~", want: `{"a":true,"b":null,"c":null}`},
		{in: "n: 1\nf: 1.5\ne: 1e3\nh: 0x1F\no: 0o644\nu: 1_000", want: `{"e":1e3,"f":1.5,"h":31,"n":1,"o":420,"u":"1_000"}`},
		{in: "big: 9007199254740993", want: `{"big":9007199254740993}`}, // kept as text; the canonicaliser refuses it later
		{in: "d: 2024-01-02", want: `{"d":"2024-01-02"}`},
		{in: "mode: '0644'", want: `{"mode":"0644"}`},
		{in: "mode: 0644", wantErr: "line 1: an integer with a leading zero"},
		{in: "a: 1\nb: 010", wantErr: "line 2: an integer with a leading zero"},
		{in: "", wantErr: "no document"},
		{in: "a: .inf", wantErr: "infinite"},
		{in: "? [1]\n: x", wantErr: "a key must be a scalar"},
		{in: "a: &x 1\nb: *x", wantErr: "anchors"},
		{in: "a: {x: 1}\nb:\n  <<: {y: 2}", wantErr: "merge keys"},
		{in: "a: 1\n---\nb: 2", wantErr: "more than one"},
		{in: "a: !custom x", wantErr: "unsupported tag"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			v, err := Decode([]byte(tt.in), true, varplane.Limits{}, 0)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || varplane.ErrorCode(err) != varplane.CodeBadRequest {
					t.Fatalf("err = %v, want bad-request %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := jsonOf(t, v); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

// TestDecodeLimits: Decode holds JSON and YAML to the limits before a tree
// is built, allowing extraDepth levels of envelope.
func TestDecodeLimits(t *testing.T) {
	lim := varplane.Limits{MaxDepth: 3, MaxStringBytes: 8, MaxMembers: 2}
	tests := []struct {
		name  string
		in    string
		yaml  bool
		extra int
		code  varplane.Code
	}{
		{"JSON at the depth", `[[[1]]]`, false, 0, ""},
		{"JSON too deep", `[[[[1]]]]`, false, 0, varplane.CodeLimitExceeded},
		{"JSON envelope", `[[[[1]]]]`, false, 1, ""},
		{"JSON long string", `["123456789"]`, false, 0, varplane.CodeLimitExceeded},
		{"JSON many members", `[1,2,3]`, false, 0, varplane.CodeLimitExceeded},
		{"YAML at the depth", "a: {b: {c: 1}}", true, 0, ""},
		{"YAML too deep", "a: {b: {c: {d: 1}}}", true, 0, varplane.CodeLimitExceeded},
		{"YAML envelope", "a: {b: {c: {d: 1}}}", true, 1, ""},
		{"YAML long key", "123456789: 1", true, 0, varplane.CodeLimitExceeded},
		{"YAML many members", "[1, 2, 3]", true, 0, varplane.CodeLimitExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.in), tt.yaml, lim, tt.extra)
			if tt.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if got := varplane.ErrorCode(err); got != tt.code {
				t.Fatalf("err = %v, want code %s", err, tt.code)
			}
		})
	}
}

// TestDecodeJSONDeepErrorPath: the path of an error deep down is written
// once, when the error is reported, and names every step.
func TestDecodeJSONDeepErrorPath(t *testing.T) {
	const depth = 2000
	doc := strings.Repeat(`{"a/b":[`, depth) + `{"k":1,"k":2}` + strings.Repeat("]}", depth)
	_, err := DecodeJSON([]byte(doc))
	var de *DecodeError
	if !errors.As(err, &de) || de.Message != "duplicate key" {
		t.Fatalf("err = %v", err)
	}
	if want := strings.Repeat("/a~1b/0", depth) + "/k"; de.Path != want {
		t.Fatalf("path has %d bytes, want %d", len(de.Path), len(want))
	}
}

func TestDecodeJSON(t *testing.T) {
	if _, err := DecodeJSON([]byte(`{"a":{"b":1,"b":2}}`)); err == nil || !strings.Contains(err.Error(), "/a/b: duplicate key") {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := DecodeJSON([]byte(`{} {}`)); err == nil {
		t.Error("two values accepted")
	}
	v, err := DecodeJSON([]byte(`{"x":[1.50,"<a>"]}`))
	if err != nil || jsonOf(t, v) != `{"x":[1.50,"<a>"]}` {
		t.Errorf("got %v %v", v, err)
	}
	y, err := JSONToYAML([]byte(`{"b":[1,2.5,"s",true,null],"a":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(y), "a: {}\nb:\n  - 1\n  - 2.5\n  - s\n  - true\n  - null\n"; got != want {
		t.Errorf("yaml = %q, want %q", got, want)
	}
}

func TestConceal(t *testing.T) {
	d := testDeployment(t)
	out, err := Conceal(d, "", []string{"OTHER=x"})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.EnvFile) != "VARPLANE_CONFIGURATION__OTHER=x\n" || strings.Join(out.Missing, ",") != "API_KEY" || !strings.Contains(string(out.Kubernetes), "name: configuration") {
		t.Errorf("concealed = %+v", out)
	}
	if _, err := Conceal(nil, "", []string{"bad"}); err == nil {
		t.Error("a malformed assignment was accepted")
	}
}

// TestDecodeJSONDeepMemory: a deep document costs DecodeJSON memory in
// proportion to its size, even with no limit in front of it (a path string
// per level made 200 KB of "[[[[" cost gigabytes).
func TestDecodeJSONDeepMemory(t *testing.T) {
	doc := []byte(strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := DecodeJSON(doc); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes decoded with %.1f MiB allocated", len(doc), float64(allocated)/(1<<20))
	if allocated > 64<<20 {
		t.Fatalf("decoding %d bytes allocated %d bytes", len(doc), allocated)
	}
}
