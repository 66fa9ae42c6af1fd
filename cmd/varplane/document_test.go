package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestYAMLDocument checks the CLI's YAML through the project's one
// converter (wire.YAMLToJSON, whose own tests cover the policy in full):
// what it accepts, and that what it refuses is a usage error (exit 2) naming
// the problem. Under this policy (YAML 1.2 core schema) a leading-zero
// integer such as 010 is refused as ambiguous, anchors, aliases and merge
// keys are refused, and scalar keys (1, true) become their text; the CLI's
// former converter read 010 as octal 8, expanded aliases and merge keys, and
// refused non-string keys.
func TestYAMLDocument(t *testing.T) {
	cases := []struct {
		name, yaml, want, refusal string
	}{
		{"mapping order kept", "b: 1\na: two\n", `{"b":1,"a":"two"}`, ""},
		{"nested and sequences", "x:\n  - 1\n  - {y: null}\n", `{"x":[1,{"y":null}]}`, ""},
		{"YAML 1.2 booleans only", "a: true\nb: no\nc: off\n", `{"a":true,"b":"no","c":"off"}`, ""},
		{"big integer keeps its digits", "n: 9007199254740993\n", `{"n":9007199254740993}`, ""},
		{"hex and octal integers", "h: 0x1F\no: 0o17\n", `{"h":31,"o":15}`, ""},
		{"timestamps stay text", "t: 2026-07-20\n", `{"t":"2026-07-20"}`, ""},
		{"unicode kept, HTML not escaped", "k: \"caf\\u00e9 <tag>\"\n", `{"k":"café <tag>"}`, ""},
		{"integer key is its text", "1: one\n", `{"1":"one"}`, ""},
		{"leading zero is ambiguous", "mode: 010\n", "", "leading zero"},
		{"anchors and aliases", "base: &b {x: 1}\nother: *b\n", "", "anchors and aliases"},
		{"merge keys", "base: {x: 1}\nderived:\n  <<: {x: 2}\n", "", "merge keys"},
		{"alias bomb", aliasBomb(), "", "anchors and aliases"},
		{"duplicate key", "a: 1\na: 2\n", "", "duplicate key"},
		{"two documents", "a: 1\n---\nb: 2\n", "", "more than one document"},
		{"infinity", "x: .inf\n", "", "no JSON form"},
		{"syntax error", "a: [1, 2\n", "", "not valid YAML"},
		{"deeper than the default limit", strings.Repeat("- ", 65) + "x\n", "", "depth limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := yamlDocument("doc.yaml", []byte(c.yaml))
			if c.refusal == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if string(got) != c.want {
					t.Fatalf("got %s, want %s", got, c.want)
				}
				return
			}
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("err = %v (%.100s), want a usage error", err, got)
			}
			if !strings.Contains(err.Error(), c.refusal) || !strings.Contains(err.Error(), "doc.yaml") {
				t.Fatalf("error %q does not name the file and %q", err, c.refusal)
			}
		})
	}
}

// aliasBomb returns a billion-laughs document: each level doubles the last.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("l0: &l0 [x, x]\n")
	for i := 1; i < 40; i++ {
		b.WriteString("l" + strconv.Itoa(i) + ": &l" + strconv.Itoa(i) + " [*l" + strconv.Itoa(i-1) + ", *l" + strconv.Itoa(i-1) + "]\n")
	}
	return b.String()
}

func TestReadDocument(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, path, stdin, want string
		usage                   bool
	}{
		{"JSON file kept as authored", write("a.json", `{"n": 1.0}`), "", `{"n": 1.0}`, false},
		{"YAML file", write("a.yaml", "n: 1\n"), "", `{"n":1}`, false},
		{"yml extension", write("a.yml", "n: [1]\n"), "", `{"n":[1]}`, false},
		{"JSON on stdin", "", `{"a":true}`, `{"a":true}`, false},
		{"YAML on stdin via -", "-", "a: true\n", `{"a":true}`, false},
		{"invalid .json file", write("bad.json", `{"a":`), "", "", true},
		{"empty stdin", "", "  \n", "", true},
		{"missing file", filepath.Join(dir, "missing.yaml"), "", "", true},
		{"YAML over the default body limit", write("big.yaml", "a: "+strings.Repeat("x", 1<<20)+"\n"), "", "", true},
		{"JSON over the default body limit is the server's to refuse", write("big.json", `"`+strings.Repeat("x", 1<<20)+`"`), "", `"` + strings.Repeat("x", 1<<20) + `"`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := readDocument(c.path, strings.NewReader(c.stdin))
			if c.usage {
				var ue *usageError
				if !errors.As(err, &ue) {
					t.Fatalf("err = %v, want a usage error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
		})
	}
}
