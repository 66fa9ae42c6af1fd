package control

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/varplane/varplane/internal/jsonpatch"
)

// PatchOp is one RFC 6902 operation as the control API answers it: add,
// remove or replace (Value is absent for remove). Old is the value replaced
// or removed, for the text form only; it is not part of the patch.
type PatchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
	Old   json.RawMessage `json:"-"`
}

// Diff returns the JSON Patch that turns document a into b, computed by
// internal/jsonpatch (the one diff of the project, which `varplane diff`
// uses too), with the old value of every remove and replace for the text
// form. Applying the patch to a gives b. It takes time linear in the two
// documents and the patch, and has no bound on the patch (Service.Diff
// has).
func Diff(a, b json.RawMessage) ([]PatchOp, error) {
	return diff(context.Background(), a, b, jsonpatch.Bounds{Old: true})
}

func diff(ctx context.Context, a, b json.RawMessage, bounds jsonpatch.Bounds) ([]PatchOp, error) {
	p, err := jsonpatch.DiffBounded(ctx, a, b, bounds)
	if err != nil {
		return nil, fmt.Errorf("control: diff: %w", err)
	}
	ops := make([]PatchOp, len(p))
	for i, o := range p {
		ops[i] = PatchOp{Op: o.Op, Path: o.Path, Value: o.Value, Old: o.Old}
	}
	return ops, nil
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
		b.WriteString(jsonpatch.Line(o.Op, o.Path, o.Old, o.Value, "/", "->"))
		b.WriteByte('\n')
	}
	return b.String()
}
