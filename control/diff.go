package control

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/varplane/varplane/internal/wire/jsontext"
)

// This is the control API's own diff for now; the CLI's internal/jsonpatch
// (another branch) is meant to become the one diff and this file to call it.

// PatchOp is one RFC 6902 operation: add, remove or replace (Value is
// absent for remove). Old is the value replaced or removed, for the text
// form only; it is not part of the patch.
type PatchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
	Old   json.RawMessage `json:"-"`
}

// Diff returns the JSON Patch that turns document a into b: objects are
// compared member by member (in sorted order), arrays element by element
// (extra elements removed from the end, new ones added at the end), and
// anything else is replaced whole. Numbers compare by their text, as the
// documents were authored. Applying the patch to a gives b.
func Diff(a, b json.RawMessage) ([]PatchOp, error) {
	va, err := decodeValue(a)
	if err != nil {
		return nil, err
	}
	vb, err := decodeValue(b)
	if err != nil {
		return nil, err
	}
	ops := []PatchOp{}
	if err := diffValue(&ops, "", va, vb); err != nil {
		return nil, err
	}
	return ops, nil
}

func decodeValue(doc json.RawMessage) (any, error) {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("control: diff: decode a document: %w", err)
	}
	return v, nil
}

func diffValue(ops *[]PatchOp, path string, a, b any) error {
	switch x := a.(type) {
	case map[string]any:
		if y, ok := b.(map[string]any); ok {
			return diffObject(ops, path, x, y)
		}
	case []any:
		if y, ok := b.([]any); ok {
			return diffArray(ops, path, x, y)
		}
	default:
		if equalScalar(a, b) {
			return nil
		}
	}
	return addOp(ops, "replace", path, a, b)
}

func diffObject(ops *[]PatchOp, path string, a, b map[string]any) error {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := path + "/" + escapePointer(k)
		va, inA := a[k]
		vb, inB := b[k]
		var err error
		switch {
		case inA && inB:
			err = diffValue(ops, p, va, vb)
		case inA:
			err = addOp(ops, "remove", p, va, nil)
		default:
			err = addOp(ops, "add", p, nil, vb)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func diffArray(ops *[]PatchOp, path string, a, b []any) error {
	n := min(len(a), len(b))
	for i := range n {
		if err := diffValue(ops, path+"/"+strconv.Itoa(i), a[i], b[i]); err != nil {
			return err
		}
	}
	for i := len(a) - 1; i >= n; i-- {
		if err := addOp(ops, "remove", path+"/"+strconv.Itoa(i), a[i], nil); err != nil {
			return err
		}
	}
	for i := n; i < len(b); i++ {
		if err := addOp(ops, "add", path+"/"+strconv.Itoa(i), nil, b[i]); err != nil {
			return err
		}
	}
	return nil
}

func equalScalar(a, b any) bool {
	switch a.(type) {
	case nil, json.Number, string, bool:
		return a == b
	}
	return false
}

func addOp(ops *[]PatchOp, op, path string, old, val any) error {
	o := PatchOp{Op: op, Path: path}
	var err error
	if op != "add" {
		if o.Old, err = jsontext.Marshal(old); err != nil {
			return err
		}
	}
	if op != "remove" {
		if o.Value, err = jsontext.Marshal(val); err != nil {
			return err
		}
	}
	*ops = append(*ops, o)
	return nil
}

// escapePointer escapes a member name as a JSON Pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// DiffText renders a patch for people, one line per operation:
// "+ path: value" (added), "- path: value" (removed), "~ path: old -> new"
// (replaced); the root is written "/". An empty patch is "no changes\n".
func DiffText(ops []PatchOp) string {
	if len(ops) == 0 {
		return "no changes\n"
	}
	var b strings.Builder
	for _, o := range ops {
		p := o.Path
		if p == "" {
			p = "/"
		}
		switch o.Op {
		case "add":
			fmt.Fprintf(&b, "+ %s: %s\n", p, o.Value)
		case "remove":
			fmt.Fprintf(&b, "- %s: %s\n", p, o.Old)
		default:
			fmt.Fprintf(&b, "~ %s: %s -> %s\n", p, o.Old, o.Value)
		}
	}
	return b.String()
}
