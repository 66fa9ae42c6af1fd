package wire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/varplane/varplane"
)

func TestYAMLToJSON(t *testing.T) {
	tests := []struct {
		name, in, want string
		code           varplane.Code
	}{
		{"mapping order kept", "b: 1\na: 2\n", `{"b":1,"a":2}`, ""},
		{"1.2 booleans only", "a: yes\nb: no\nc: on\nd: true\ne: False\n", `{"a":"yes","b":"no","c":"on","d":true,"e":false}`, ""},
		{"decimal", "a: 10\nb: -3\nc: +4\nd: 0\n", `{"a":10,"b":-3,"c":4,"d":0}`, ""},
		{"leading zero refused", "mode: 0644\n", "", varplane.CodeBadRequest},
		{"leading zero refused (010)", "a: 010\n", "", varplane.CodeBadRequest},
		{"leading zero quoted is a string", "mode: '0644'\n", `{"mode":"0644"}`, ""},
		{"octal and hex", "a: 0o17\nb: 0x1F\n", `{"a":15,"b":31}`, ""},
		{"big integer keeps its digits", "a: 123456789012345678901234567890\n", `{"a":123456789012345678901234567890}`, ""},
		{"floats", "a: 1.50\nb: .5\nc: 5.\nd: -1e3\ne: +2.5E-2\n", `{"a":1.50,"b":0.5,"c":5.0,"d":-1e3,"e":2.5e-2}`, ""},
		{"1.1 forms are strings", "a: 1_000\nb: 0b101\nc: 2001-12-14\n", `{"a":"1_000","b":"0b101","c":"2001-12-14"}`, ""},
		{"nulls", "a: null\nb: ~\nc:\n", `{"a":null,"b":null,"c":null}`, ""},
		{"infinity refused", "a: .inf\n", "", varplane.CodeBadRequest},
		{"nan refused", "a: .nan\n", "", varplane.CodeBadRequest},
		{"anchor refused", "a: &x 1\nb: *x\n", "", varplane.CodeBadRequest},
		{"merge key refused", "a: {x: 1}\nb:\n  <<: {x: 2}\n", "", varplane.CodeBadRequest},
		{"duplicate key refused", "a: 1\na: 2\n", "", varplane.CodeBadRequest},
		{"non-scalar key refused", "? [a]\n: 1\n", "", varplane.CodeBadRequest},
		{"null key refused", "~: 1\n", "", varplane.CodeBadRequest},
		{"numeric key is its text", "200: ok\n", `{"200":"ok"}`, ""},
		{"two documents refused", "a: 1\n---\nb: 2\n", "", varplane.CodeBadRequest},
		{"empty refused", "", "", varplane.CodeBadRequest},
		{"custom tag refused", "a: !secret x\n", "", varplane.CodeBadRequest},
		{"explicit str tag", "a: !!str 10\n", `{"a":"10"}`, ""},
		{"explicit int tag that is no int", "a: !!int abc\n", "", varplane.CodeBadRequest},
		{"strings escaped", "a: \"<\\u2028>\"\n", `{"a":"<\u2028>"}`, ""},
		{"sequence", "- 1\n- [a, {b: c}]\n", `[1,["a",{"b":"c"}]]`, ""},
		{"scalar document", "hello\n", `"hello"`, ""},
		{"not YAML", "a: [1\n", "", varplane.CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := YAMLToJSON([]byte(tt.in), varplane.Limits{})
			if tt.code != "" {
				if err == nil || varplane.ErrorCode(err) != tt.code {
					t.Fatalf("got %s, %v; want code %s", got, err, tt.code)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestYAMLLimits(t *testing.T) {
	lim := varplane.Limits{MaxDepth: 3, MaxMembers: 2, MaxStringBytes: 5}
	for name, in := range map[string]string{
		"depth":      "a: {b: {c: {d: 1}}}\n",
		"members":    "[1, 2, 3]\n",
		"string":     "a: abcdef\n",
		"key length": "abcdef: 1\n",
	} {
		if _, err := YAMLToJSON([]byte(in), lim); varplane.ErrorCode(err) != varplane.CodeLimitExceeded {
			t.Errorf("%s: %v, want limit-exceeded", name, err)
		}
	}
	if _, err := YAMLToJSON([]byte(strings.Repeat("a", 100)), varplane.Limits{MaxBodyBytes: 10}); varplane.ErrorCode(err) != varplane.CodePayloadTooLarge {
		t.Errorf("size: %v", err)
	}
}

func TestYAMLErrorsNameNoValue(t *testing.T) {
	for _, in := range []string{"a: 0777secret\nb: 0644\n", "k: !custom topsecret\n", "a: &topsecret 1\n"} {
		_, err := YAMLToJSON([]byte(in), varplane.Limits{})
		if err == nil {
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "secret") || strings.Contains(msg, "0644") {
			t.Errorf("error %q shows a value", msg)
		}
	}
}

// FuzzYAMLToJSON: whatever the input, no panic, and what comes out is JSON
// within the limits.
func FuzzYAMLToJSON(f *testing.F) {
	for _, s := range []string{"a: 1", "- [x, {y: z}]", "a: &x [1]\nb: *x", "a: 010", "? a\n: b", "a: 'x'\nb: \"\\u00e9\"", "{a: [1, 2.5, .inf]}"} {
		f.Add([]byte(s))
	}
	lim := varplane.Limits{MaxBodyBytes: 1 << 16}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := YAMLToJSON(in, lim)
		if err != nil {
			if varplane.ErrorCode(err) == varplane.CodeInternal {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %q from %q", out, in)
		}
		if err := lim.CheckJSON(out, 0); err != nil {
			t.Fatalf("output beyond limits: %v", err)
		}
	})
}
