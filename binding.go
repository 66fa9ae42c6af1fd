package varplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// SchemaBinding binds the scopes under Prefix (Prefix itself and every
// descendant) to the schema SchemaID: every document written there is
// validated against it, whether or not the request names a schema. Where
// bindings nest, the one of the longest prefix applies.
type SchemaBinding struct {
	Prefix   Scope  `json:"prefix"`
	SchemaID string `json:"schemaId"`
}

// Covers reports whether the binding applies to scope as far as its prefix
// goes (scope is Prefix or below it); a longer binding may still win.
func (b SchemaBinding) Covers(scope Scope) bool {
	return scope == b.Prefix || scope.IsDescendantOf(b.Prefix)
}

// Binder tells the Engine which schema binding covers a scope. The control
// package's Guard is one: it keeps the bindings in the store of record.
type Binder interface {
	// Binding returns the binding of the longest prefix that covers
	// scope, and false when none does. An error (the store cannot be
	// read) refuses the write that asked.
	Binding(ctx context.Context, scope Scope) (SchemaBinding, bool, error)
}

// Issue codes of schema bindings.
const (
	// IssueSchemaMismatch: the request names a schema other than the one
	// its scope is bound to.
	IssueSchemaMismatch = "document.schema-mismatch"
)

// LongestBinding returns the binding in list of the longest prefix that
// covers scope, and false when none does: the rule every Binder applies.
func LongestBinding(list []SchemaBinding, scope Scope) (SchemaBinding, bool) {
	var best SchemaBinding
	found := false
	for _, b := range list {
		if b.Covers(scope) && (!found || len(b.Prefix) > len(best.Prefix)) {
			best, found = b, true
		}
	}
	return best, found
}

// schemaLister is a Validator that can name its schemas (schema.Registry).
type schemaLister interface{ IDs() []string }

// SchemaIDs returns the ids of the schemas the engine's Validator holds,
// sorted; none when it has no Validator or one that cannot list them.
func (e *Engine) SchemaIDs() []string {
	l, ok := e.validator.(schemaLister)
	if !ok {
		return []string{}
	}
	ids := append([]string(nil), l.IDs()...)
	sort.Strings(ids)
	return ids
}

// SchemaIssues checks doc against the schema named schemaID alone (no
// binding, no scope rule): the issues found, none when it is valid. An
// unregistered schemaID is not-found.
func (e *Engine) SchemaIssues(schemaID string, doc json.RawMessage) ([]Issue, error) {
	if e.validator == nil {
		return nil, Errorf(CodeNotFound, "schema %q is not registered", schemaID)
	}
	issues, err := e.validator.Validate(schemaID, doc)
	if errors.Is(err, ErrUnknownSchema) {
		return nil, Errorf(CodeNotFound, "schema %q is not registered", schemaID)
	}
	return issues, err
}

// bound is the schema a write to a scope is checked against: the schema
// it is bound to (binding set) or, with no binding, the one the request
// named; mismatch is the issue of a request that named another schema
// than its binding's.
type bound struct {
	schemaID string
	binding  *SchemaBinding
	mismatch *Issue
}

// schemaOf resolves the schema of a write to scope that named named.
func (e *Engine) schemaOf(ctx context.Context, scope Scope, named string) (bound, error) {
	if e.binder == nil {
		return bound{schemaID: named}, nil
	}
	b, ok, err := e.binder.Binding(ctx, scope)
	if err != nil || !ok {
		return bound{schemaID: named}, err
	}
	out := bound{schemaID: b.SchemaID, binding: &b}
	if named != "" && named != b.SchemaID {
		out.mismatch = &Issue{Code: IssueSchemaMismatch, Path: "",
			Message: fmt.Sprintf("scope %q is bound to schema %q (by the binding of %q); the request names %q", scope, b.SchemaID, b.Prefix, named)}
	}
	return out, nil
}

// invalid is the revision-invalid error of issues found under b: it names
// the bound schema and its prefix when there is a binding.
func (b bound) invalid(issues []Issue) *Error {
	err := InvalidError(issues)
	if b.binding != nil {
		err.Message = fmt.Sprintf("document has %d validation issue(s) against schema %q, which %q is bound to", len(issues), b.schemaID, b.binding.Prefix)
	}
	return err
}

// checkBoundRevision refuses to make rev the head of scope when scope is
// bound to a schema that rejects rev's document (a revision stored before
// the binding, a rollback to one): revision-invalid naming the schema,
// with its issues. A revision the store does not hold is left to the
// activation, which answers not-found.
func (e *Engine) checkBoundRevision(ctx context.Context, scope Scope, rev Revision) error {
	b, err := e.schemaOf(ctx, scope, "")
	if err != nil || b.binding == nil {
		return err
	}
	rec, err := e.store.Revision(ctx, scope, rev)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	issues, err := e.SchemaIssues(b.schemaID, rec.Document)
	if ErrorCode(err) == CodeNotFound {
		issues, err = []Issue{unknownSchema(b.schemaID)}, nil
	}
	if err != nil {
		return fmt.Errorf("validate %s of %s against schema %q: %w", rev, scope, b.schemaID, err)
	}
	if len(issues) == 0 {
		return nil
	}
	out := b.invalid(issues)
	out.Scope = scope
	out.Message = fmt.Sprintf("revision %s of %q has %d validation issue(s) against schema %q, which %q is bound to", rev, scope, len(issues), b.schemaID, b.binding.Prefix)
	return out
}
