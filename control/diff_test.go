package control

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// apply applies an RFC 6902 patch of add, remove and replace to doc; the
// test's own reading of the RFC, to check that Diff's patches are exact.
func apply(t *rapid.T, doc any, ops []PatchOp) any {
	for _, op := range ops {
		var val any
		if op.Op != "remove" {
			v, err := decodeValue(op.Value)
			if err != nil {
				t.Fatal(err)
			}
			val = v
		}
		if op.Path == "" {
			if op.Op != "replace" {
				t.Fatalf("%s at the root", op.Op)
			}
			doc = val
			continue
		}
		toks := strings.Split(op.Path[1:], "/")
		doc = applyAt(t, doc, toks, op.Op, val)
	}
	return doc
}

func applyAt(t *rapid.T, node any, toks []string, op string, val any) any {
	tok := strings.NewReplacer("~1", "/", "~0", "~").Replace(toks[0])
	last := len(toks) == 1
	switch n := node.(type) {
	case map[string]any:
		if !last {
			n[tok] = applyAt(t, n[tok], toks[1:], op, val)
			return n
		}
		switch op {
		case "remove":
			delete(n, tok)
		default:
			n[tok] = val
		}
		return n
	case []any:
		i, err := strconv.Atoi(tok)
		if err != nil || i < 0 || i > len(n) {
			t.Fatalf("bad index %q of %d", tok, len(n))
		}
		if !last {
			n[i] = applyAt(t, n[i], toks[1:], op, val)
			return n
		}
		switch op {
		case "remove":
			return append(n[:i:i], n[i+1:]...)
		case "add":
			return append(n[:i:i], append([]any{val}, n[i:]...)...)
		default:
			n[i] = val
			return n
		}
	}
	t.Fatalf("path into a scalar")
	return nil
}

func genValue(depth int) *rapid.Generator[any] {
	return rapid.Custom(func(t *rapid.T) any {
		kind := rapid.IntRange(0, 5).Draw(t, "kind")
		if depth <= 0 {
			kind %= 4
		}
		switch kind {
		case 0:
			return nil
		case 1:
			return json.Number(strconv.Itoa(rapid.IntRange(-3, 3).Draw(t, "n")))
		case 2:
			return rapid.SampledFrom([]string{"", "a", "a/b", "~x"}).Draw(t, "s")
		case 3:
			return rapid.Bool().Draw(t, "b")
		case 4:
			return rapid.SliceOfN(genValue(depth-1), 0, 4).Draw(t, "arr")
		default:
			m := map[string]any{}
			for _, k := range rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"a", "b", "c/d", "e~f", ""}), 0, 4, rapid.ID).Draw(t, "keys") {
				m[k] = genValue(depth-1).Draw(t, "v")
			}
			return m
		}
	})
}

// TestDiffApplies: applying Diff(a, b) to a gives b, and Diff(a, a) is
// empty.
func TestDiffApplies(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genValue(3).Draw(t, "a")
		b := genValue(3).Draw(t, "b")
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		ops, err := Diff(ja, jb)
		if err != nil {
			t.Fatal(err)
		}
		va, _ := decodeValue(ja)
		vb, _ := decodeValue(jb)
		if got := apply(t, va, ops); !reflect.DeepEqual(got, vb) {
			t.Fatalf("patch %s of %s gives %v, want %s", fmt.Sprint(ops), ja, got, jb)
		}
		if same, _ := Diff(ja, ja); len(same) != 0 {
			t.Fatalf("Diff of a document with itself = %v", same)
		}
	})
}

func TestDiffRefusesInvalidJSON(t *testing.T) {
	if _, err := Diff(json.RawMessage(`{`), json.RawMessage(`{}`)); err == nil {
		t.Fatal("Diff of invalid JSON succeeded")
	}
}
