package control

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/varplane/varplane/internal/jsonpatch"
)

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
		p := make(jsonpatch.Patch, len(ops))
		for i, o := range ops {
			p[i] = jsonpatch.Operation{Op: o.Op, Path: o.Path, Value: o.Value}
			if o.Op != jsonpatch.OpAdd {
				// The old value the text form shows is the one in a.
				if got, err := jsonpatch.Get(ja, o.Path); err != nil || !jsonpatch.Equal(got, o.Old) {
					t.Fatalf("op %d: old %s, a holds %s (%v)", i, o.Old, got, err)
				}
			}
		}
		got, err := jsonpatch.Apply(ja, p)
		if err != nil || !jsonpatch.Equal(got, jb) {
			t.Fatalf("patch %s of %s gives %s (%v), want %s", fmt.Sprint(ops), ja, got, err, jb)
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
