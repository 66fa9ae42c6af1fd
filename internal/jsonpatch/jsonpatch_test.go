package jsonpatch

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/varplane/varplane/internal/jsontext"
)

func patchText(t *testing.T, p Patch) string {
	t.Helper()
	b, err := jsontext.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDiff: the patch of two documents, deterministic, and its round trip.
func TestDiff(t *testing.T) {
	tests := []struct {
		name, from, to, want string
	}{
		{"equal", `{"a":1,"b":[1,2]}`, `{"b":[1,2],"a":1}`, `[]`},
		{"replace a member", `{"a":1}`, `{"a":2}`, `[{"op":"replace","path":"/a","value":2}]`},
		{"add and remove, sorted", `{"b":1,"z":1}`, `{"a":null,"z":1}`, `[{"op":"add","path":"/a","value":null},{"op":"remove","path":"/b"}]`},
		{"nested", `{"x":{"y":{"z":true}}}`, `{"x":{"y":{"z":false}}}`, `[{"op":"replace","path":"/x/y/z","value":false}]`},
		{"escaped keys", `{"a/b":1,"m~n":1}`, `{"a/b":2}`, `[{"op":"replace","path":"/a~1b","value":2},{"op":"remove","path":"/m~0n"}]`},
		{"array grows", `[1]`, `[1,2,3]`, `[{"op":"add","path":"/-","value":2},{"op":"add","path":"/-","value":3}]`},
		{"array shrinks from the end", `[1,2,3]`, `[1]`, `[{"op":"remove","path":"/2"},{"op":"remove","path":"/1"}]`},
		{"kind changes", `{"a":[1]}`, `{"a":{"0":1}}`, `[{"op":"replace","path":"/a","value":{"0":1}}]`},
		{"root", `1`, `"x"`, `[{"op":"replace","path":"","value":"x"}]`},
		{"numbers by text", `{"n":1}`, `{"n":1.0}`, `[{"op":"replace","path":"/n","value":1.0}]`},
		{"big numbers keep their digits", `{"n":12345678901234567890}`, `{"n":12345678901234567891}`, `[{"op":"replace","path":"/n","value":12345678901234567891}]`},
		{"no HTML escaping", `{"s":"a"}`, `{"s":"<b>&"}`, `[{"op":"replace","path":"/s","value":"<b>&"}]`},
		{"empty keys", `{"":{"":1},"x":{"":1}}`, `{"":{"":2}}`, `[{"op":"replace","path":"//","value":2},{"op":"remove","path":"/x"}]`},
		{"empty key removed and added", `{"":1}`, `{"a":{"":[]}}`, `[{"op":"remove","path":"/"},{"op":"add","path":"/a","value":{"":[]}}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Diff([]byte(tt.from), []byte(tt.to))
			if err != nil {
				t.Fatal(err)
			}
			if got := patchText(t, p); got != tt.want {
				t.Fatalf("Diff = %s, want %s", got, tt.want)
			}
			out, err := Apply([]byte(tt.from), p)
			if err != nil || !Equal(out, []byte(tt.to)) {
				t.Fatalf("Apply(Diff) = %s, %v; want %s", out, err, tt.to)
			}
		})
	}
	for _, bad := range [][2]string{{`{`, `1`}, {`1`, `1 2`}, {``, `1`}, {`1`, `1 }`}} {
		if _, err := Diff([]byte(bad[0]), []byte(bad[1])); err == nil {
			t.Errorf("Diff(%q, %q) succeeded", bad[0], bad[1])
		}
	}
}

// TestApply covers every operation and the refusals RFC 6902 asks for.
func TestApply(t *testing.T) {
	tests := []struct {
		name, doc, patch, want, err string
	}{
		{"add member", `{"a":1}`, `[{"op":"add","path":"/b","value":[1]}]`, `{"a":1,"b":[1]}`, ""},
		{"add replaces a member", `{"a":1}`, `[{"op":"add","path":"/a","value":2}]`, `{"a":2}`, ""},
		{"insert into array", `[1,3]`, `[{"op":"add","path":"/1","value":2}]`, `[1,2,3]`, ""},
		{"append", `[1]`, `[{"op":"add","path":"/-","value":2}]`, `[1,2]`, ""},
		{"add at len", `[1]`, `[{"op":"add","path":"/1","value":2}]`, `[1,2]`, ""},
		{"remove", `{"a":{"b":1,"c":2}}`, `[{"op":"remove","path":"/a/b"}]`, `{"a":{"c":2}}`, ""},
		{"replace in array", `[1,2]`, `[{"op":"replace","path":"/0","value":9}]`, `[9,2]`, ""},
		{"move", `{"a":{"b":1},"c":{}}`, `[{"op":"move","from":"/a/b","path":"/c/d"}]`, `{"a":{},"c":{"d":1}}`, ""},
		{"copy", `{"a":[1]}`, `[{"op":"copy","from":"/a","path":"/b"}]`, `{"a":[1],"b":[1]}`, ""},
		{"test passes", `{"a":{"x":1,"y":[true]}}`, `[{"op":"test","path":"/a","value":{"y":[true],"x":1}}]`, `{"a":{"x":1,"y":[true]}}`, ""},
		{"replace the root", `1`, `[{"op":"replace","path":"","value":{"a":1}}]`, `{"a":1}`, ""},
		{"test fails", `{"a":1}`, `[{"op":"test","path":"/a","value":2}]`, "", "test failed"},
		{"remove missing", `{"a":1}`, `[{"op":"remove","path":"/b"}]`, "", "does not exist"},
		{"replace missing", `{"a":1}`, `[{"op":"replace","path":"/b","value":1}]`, "", "does not exist"},
		{"add under missing", `{}`, `[{"op":"add","path":"/a/b","value":1}]`, "", "does not exist"},
		{"index out of range", `[1]`, `[{"op":"add","path":"/3","value":1}]`, "", "out of range"},
		{"leading zero index", `[1,2]`, `[{"op":"remove","path":"/01"}]`, "", "not a number"},
		{"dash outside add", `[1]`, `[{"op":"remove","path":"/-"}]`, "", "not a number"},
		{"bad pointer", `{}`, `[{"op":"add","path":"a","value":1}]`, "", "does not start with /"},
		{"bad escape", `{}`, `[{"op":"add","path":"/~2","value":1}]`, "", "escape"},
		{"move into itself", `{"a":{}}`, `[{"op":"move","from":"/a","path":"/a/b"}]`, "", "into itself"},
		{"unknown op", `{}`, `[{"op":"frob","path":"/a"}]`, "", "unknown op"},
		{"value missing", `{}`, `[{"op":"add","path":"/a"}]`, "", "value is missing"},
		{"scalar parent", `{"a":1}`, `[{"op":"add","path":"/a/b","value":1}]`, "", "not an object or array"},
		{"a later failure keeps nothing", `{"a":1}`, `[{"op":"remove","path":"/a"},{"op":"test","path":"/a","value":1}]`, "", "operation 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Patch
			if err := json.Unmarshal([]byte(tt.patch), &p); err != nil {
				t.Fatal(err)
			}
			doc := []byte(tt.doc)
			out, err := Apply(doc, p)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Apply = %s, %v; want error containing %q", out, err, tt.err)
				}
				if string(doc) != tt.doc {
					t.Fatalf("Apply modified its input: %s", doc)
				}
				return
			}
			if err != nil || !Equal(out, []byte(tt.want)) {
				t.Fatalf("Apply = %s, %v; want %s", out, err, tt.want)
			}
		})
	}
}

// FuzzDiff: for any two JSON documents, applying their diff to the first
// gives the second, and diffing a document with itself is empty.
func FuzzDiff(f *testing.F) {
	for _, s := range [][2]string{
		{`{"a":1}`, `{"a":2}`},
		{`[1,2,3]`, `[3]`},
		{`{"a/b":{"~":[null,true]}}`, `{"a/b":{"~":[false]},"c":"x"}`},
		{`1`, `{"x":[]}`},
		{`"s"`, `"s"`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, from, to string) {
		if len(from) > 4096 || len(to) > 4096 {
			return
		}
		p, err := Diff([]byte(from), []byte(to))
		if err != nil {
			return // not two JSON values
		}
		out, err := Apply([]byte(from), p)
		if err != nil {
			t.Fatalf("Apply(%q, Diff) failed: %v (patch %+v)", from, err, p)
		}
		if !Equal(out, []byte(to)) {
			t.Fatalf("Apply(%q, Diff) = %s, want %s (patch %+v)", from, out, to, p)
		}
		if self, err := Diff([]byte(to), []byte(to)); err != nil || len(self) != 0 {
			t.Fatalf("Diff(%q, itself) = %+v, %v", to, self, err)
		}
		// The patch survives its own JSON encoding.
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var back Patch
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if out, err := Apply([]byte(from), back); err != nil || !Equal(out, []byte(to)) {
			t.Fatalf("Apply of the re-read patch = %s, %v", out, err)
		}
	})
}

func TestAppendPointer(t *testing.T) {
	if got := AppendPointer("/a", "b/~c"); got != "/a/b~1~0c" {
		t.Fatalf("AppendPointer = %q", got)
	}
	toks, err := parsePointer("/a~1b/~0/")
	if err != nil || len(toks) != 3 || toks[0] != "a/b" || toks[1] != "~" || toks[2] != "" {
		t.Fatalf("parsePointer = %q, %v", toks, err)
	}
}

func TestGet(t *testing.T) {
	doc := []byte(`{"a":{"b/c":[1,{"d":"<x>"}]}}`)
	for ptr, want := range map[string]string{"": `{"a":{"b/c":[1,{"d":"<x>"}]}}`, "/a/b~1c/1": `{"d":"<x>"}`, "/a/b~1c/0": `1`} {
		if got, err := Get(doc, ptr); err != nil || string(got) != want {
			t.Errorf("Get(%q) = %s, %v; want %s", ptr, got, err, want)
		}
	}
	for _, ptr := range []string{"/x", "/a/b~1c/2", "a", "/a/b~1c/-"} {
		if _, err := Get(doc, ptr); err == nil {
			t.Errorf("Get(%q) succeeded", ptr)
		}
	}
}

// TestDiffBounded: the old values of a text form, the bound on the
// patch's size, and a context looked at during the work.
func TestDiffBounded(t *testing.T) {
	ctx := context.Background()
	from, to := `{"a":1,"b":[1,{"c":"x"}],"gone":{"deep":true}}`, `{"a":2,"b":[1]}`
	p, err := DiffBounded(ctx, []byte(from), []byte(to), Bounds{Old: true})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, o := range p {
		lines = append(lines, Line(o.Op, o.Path, o.Old, o.Value, "/", "->"))
	}
	if got, want := strings.Join(lines, "\n"), "~ /a: 1 -> 2\n- /b/1: {\"c\":\"x\"}\n- /gone: {\"deep\":true}"; got != want {
		t.Fatalf("lines\n%s\nwant\n%s", got, want)
	}
	if b := patchText(t, p); strings.Contains(b, "old") || strings.Contains(b, "deep") {
		t.Fatalf("the patch carries the old values: %s", b)
	}
	// Each operation counts its path, values and OpCost: 3 operations of
	// the patch above fit in their sum, and not in one byte less.
	size := int64(0)
	for _, o := range p {
		size += int64(len(o.Path)+len(o.Value)+len(o.Old)) + OpCost
	}
	if _, err := DiffBounded(ctx, []byte(from), []byte(to), Bounds{Old: true, MaxBytes: size}); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	if _, err := DiffBounded(ctx, []byte(from), []byte(to), Bounds{Old: true, MaxBytes: size - 1}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("past the bound: %v, want ErrTooLarge", err)
	}

	// A context done half-way stops the walk.
	var b strings.Builder
	b.WriteString("[")
	for i := 0; i < 10*checkEvery; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("1")
	}
	b.WriteString("]")
	cc := &countdown{Context: ctx, left: 3}
	if _, err := DiffBounded(cc, []byte(b.String()), []byte(strings.ReplaceAll(b.String(), "1", "2")), Bounds{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a context done during the diff: %v, want context.Canceled", err)
	}
	if cc.asked < 3 {
		t.Fatalf("the diff looked at its context %d times", cc.asked)
	}
}

// countdown is a context that is done from its left-th look on.
type countdown struct {
	context.Context
	left, asked int
}

func (c *countdown) Err() error {
	c.asked++
	if c.asked >= c.left {
		return context.Canceled
	}
	return nil
}
