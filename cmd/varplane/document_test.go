package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestYAMLToJSON(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"mapping order kept", "b: 1\na: two\n", `{"b":1,"a":"two"}`},
		{"nested and sequences", "x:\n  - 1\n  - {y: null}\n", `{"x":[1,{"y":null}]}`},
		{"YAML 1.2 booleans only", "a: true\nb: no\nc: off\n", `{"a":true,"b":"no","c":"off"}`},
		{"big integer keeps its digits", "n: 9007199254740993\n", `{"n":9007199254740993}`},
		{"hex and octal integers", "h: 0x1F\no: 0o17\n", `{"h":31,"o":15}`},
		{"negative integer", "n: -42\n", `{"n":-42}`},
		{"float text kept when JSON", "f: 1.5e3\n", `{"f":1.5e3}`},
		{"float normalised otherwise", "f: .5\n", `{"f":0.5}`},
		{"quoted numbers stay strings", "s: '123'\n", `{"s":"123"}`},
		{"timestamps stay text", "t: 2026-07-20\n", `{"t":"2026-07-20"}`},
		{"anchors and aliases", "base: &b {x: 1}\nother: *b\n", `{"base":{"x":1},"other":{"x":1}}`},
		{"merge keys", "base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n", `{"base":{"x":1,"y":2},"derived":{"y":3,"x":1}}`},
		{"unicode and escapes", "k: \"caf\\u00e9 <tag>\"\n", `{"k":"café \u003ctag\u003e"}`},
		{"scalar document", "42\n", `42`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := yamlToJSON([]byte(c.yaml))
			if err != nil {
				t.Fatalf("yamlToJSON: %v", err)
			}
			if string(got) != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
		})
	}
}

func TestYAMLToJSONRefuses(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"integer key", "1: one\n", "not a string"},
		{"boolean key", "true: yes\n", "not a string"},
		{"null key", "~: x\n", "not a string"},
		{"sequence key", "? [a]\n: x\n", "not a string"},
		{"duplicate key", "a: 1\na: 2\n", "a"},
		{"two documents", "a: 1\n---\nb: 2\n", "more than one document"},
		{"infinity", "x: .inf\n", "no JSON form"},
		{"not a number", "x: .nan\n", "no JSON form"},
		{"syntax error", "a: [1, 2\n", "not valid YAML"},
		{"alias bomb", aliasBomb(), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := yamlToJSON([]byte(c.yaml))
			if err == nil {
				t.Fatalf("yamlToJSON accepted it: %.100s", got)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
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
