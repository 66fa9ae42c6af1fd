package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/varplane/varplane"
)

// SchemaRole is the role an identity needs to bind a scope prefix to a
// schema or to unbind it (besides audit and mutate access on the prefix's
// subtree): without it, anyone allowed to write a scope could lift the
// schema that guards it.
const SchemaRole = "control:schemas"

// MaxRejectedListed bounds how many rejected heads a binding preview (and
// the refusal of a binding) lists; RejectedCount counts them all.
const MaxRejectedListed = 50

// maxIssuesPerHead bounds the issues listed for each rejected head.
const maxIssuesPerHead = 3

// bindingsScope holds every schema binding in one document, so a binding
// change is one compare-and-set and each one is a revision with history.
const bindingsScope = RecordRoot + ".schemas"

type bindingsDoc struct {
	Bindings []varplane.SchemaBinding `json:"bindings"`
}

// bindingSet is the bindings as of one version of their record.
type bindingSet = recordSet[varplane.SchemaBinding]

// Binding returns the schema binding of the longest prefix that covers
// scope (varplane.Binder): give the Guard to varplane.Options.Binder. A
// scope another subsystem reserves (the access control's principals, the
// values service's configurations, the control records) is never bound,
// whatever the bindings record holds: its owner validates it. An error
// reading the record refuses the write that asked.
func (g *Guard) Binding(ctx context.Context, scope varplane.Scope) (varplane.SchemaBinding, bool, error) {
	if g.reserved(scope) {
		return varplane.SchemaBinding{}, false, nil
	}
	bs, err := g.bindings(ctx)
	if err != nil {
		return varplane.SchemaBinding{}, false, err
	}
	b, ok := varplane.LongestBinding(bs.list, scope)
	return b, ok, nil
}

// bindings returns the bindings the store holds, decoded once per revision
// of their record.
func (g *Guard) bindings(ctx context.Context) (*bindingSet, error) {
	return readSet(ctx, g, bindingsScope, &g.bound, func(raw json.RawMessage) ([]varplane.SchemaBinding, error) {
		var doc bindingsDoc
		err := json.Unmarshal(raw, &doc)
		return doc.Bindings, err
	})
}

// Bindings returns every schema binding, sorted by prefix.
func (svc *Service) Bindings(ctx context.Context) ([]varplane.SchemaBinding, error) {
	bs, err := svc.guard.bindings(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(bs.list)
	if out == nil {
		out = []varplane.SchemaBinding{}
	}
	slices.SortFunc(out, func(a, b varplane.SchemaBinding) int { return compareScopes(a.Prefix, b.Prefix) })
	return out, nil
}

// RejectedHead is a current head that a schema rejects: its scope,
// generation and revision, and its first issues.
type RejectedHead struct {
	Scope      varplane.Scope      `json:"scope"`
	Generation varplane.Generation `json:"generation"`
	Revision   varplane.Revision   `json:"revision"`
	Issues     []varplane.Issue    `json:"issues"`
}

// BindingPreview is what binding Prefix to SchemaID does: the schema it
// replaces (Previous, empty when the prefix was not bound), how many
// current heads the binding would govern (Checked: those under the prefix
// and under no longer binding), and those the schema rejects (the first
// MaxRejectedListed, RejectedCount in all). Bound says whether the
// binding was written.
type BindingPreview struct {
	varplane.SchemaBinding
	Previous      string         `json:"previous,omitempty"`
	Checked       int            `json:"checked"`
	Rejected      []RejectedHead `json:"rejected"`
	RejectedCount int            `json:"rejectedCount"`
	Bound         bool           `json:"bound"`
}

// PreviewBinding checks, without writing anything, the current heads that
// binding b.Prefix to b.SchemaID would govern against that schema. b is
// refused with bad-request on a reserved scope (the control records, the
// access control's principals, a values-service configuration: their
// owners validate them) and not-found for a schema the server has not
// loaded. The caller authorized an audit of the prefix's subtree.
func (svc *Service) PreviewBinding(ctx context.Context, b varplane.SchemaBinding) (BindingPreview, error) {
	bs, err := svc.guard.bindings(ctx)
	if err != nil {
		return BindingPreview{}, err
	}
	return svc.preview(ctx, bs, b)
}

func (svc *Service) preview(ctx context.Context, bs *bindingSet, b varplane.SchemaBinding) (BindingPreview, error) {
	if err := svc.checkBinding(b); err != nil {
		return BindingPreview{}, err
	}
	p := BindingPreview{SchemaBinding: b, Rejected: []RejectedHead{}}
	next := slices.DeleteFunc(slices.Clone(bs.list), func(x varplane.SchemaBinding) bool {
		if x.Prefix == b.Prefix {
			p.Previous = x.SchemaID
			return true
		}
		return false
	})
	next = append(next, b)
	scopes, err := svc.store.Scopes(ctx)
	if err != nil {
		return BindingPreview{}, err
	}
	for _, sc := range scopes {
		if !b.Covers(sc) || svc.guard.reserved(sc) {
			continue
		}
		if gov, _ := varplane.LongestBinding(next, sc); gov.Prefix != b.Prefix {
			continue // a longer binding governs it
		}
		st, err := svc.store.State(ctx, sc)
		if err != nil {
			return BindingPreview{}, err
		}
		if st.Head == nil {
			continue
		}
		p.Checked++
		issues, err := svc.engine.SchemaIssues(b.SchemaID, st.Head.Document)
		if err != nil {
			return BindingPreview{}, err
		}
		if len(issues) == 0 {
			continue
		}
		p.RejectedCount++
		if len(p.Rejected) < MaxRejectedListed {
			p.Rejected = append(p.Rejected, RejectedHead{Scope: sc, Generation: st.Generation, Revision: st.Head.Revision,
				Issues: issues[:min(len(issues), maxIssuesPerHead)]})
		}
	}
	return p, nil
}

// checkBinding refuses a binding of a malformed or reserved prefix, or to
// a schema the server has not loaded.
func (svc *Service) checkBinding(b varplane.SchemaBinding) error {
	if _, err := varplane.ParseScope(string(b.Prefix)); err != nil {
		return err
	}
	if b.Prefix.Internal() {
		return varplane.Errorf(varplane.CodeBadRequest, "scope %q is one of the project's own records: a schema cannot be bound to it", b.Prefix)
	}
	if owner, ok := svc.engine.Reserved(b.Prefix); ok {
		return varplane.Errorf(varplane.CodeBadRequest, "scope %q is reserved to the %s, which validates it: a schema cannot be bound to it", b.Prefix, owner)
	}
	if b.SchemaID == "" {
		return varplane.Errorf(varplane.CodeBadRequest, "schemaId is required")
	}
	if !slices.Contains(svc.engine.SchemaIDs(), b.SchemaID) {
		return varplane.Errorf(varplane.CodeNotFound, "schema %q is not loaded (the server's --documents directory holds %d schema(s); GET admin/schemas lists them)", b.SchemaID, len(svc.engine.SchemaIDs()))
	}
	return nil
}

// Bind binds b.Prefix (and every scope below it that no longer binding
// covers) to b.SchemaID, as by, who needs SchemaRole; the caller
// authorized audit and mutate access on the prefix's subtree. It first
// checks the current heads the binding would govern (PreviewBinding): when
// the schema rejects any and force is false, nothing is written and the
// refusal is revision-invalid, naming the schema and listing the rejected
// heads (each one's first issue, its message prefixed by the scope). With
// force the binding is written anyway; the rejected heads stay live, and
// their next write must pass the schema. The binding is a revision of the
// record scope varplane-control.schemas, with by as its actor.
func (svc *Service) Bind(ctx context.Context, by varplane.Identity, b varplane.SchemaBinding, force bool) (BindingPreview, error) {
	if !by.Has(SchemaRole) {
		return BindingPreview{}, varplane.Errorf(varplane.CodeForbidden, "binding schemas needs the %s role", SchemaRole)
	}
	bs, err := svc.guard.bindings(ctx)
	if err != nil {
		return BindingPreview{}, err
	}
	p, err := svc.preview(ctx, bs, b)
	if err != nil {
		return BindingPreview{}, err
	}
	if p.RejectedCount > 0 && !force {
		return p, rejectedError(p)
	}
	if p.Previous == b.SchemaID {
		p.Bound = true
		return p, nil
	}
	reason := fmt.Sprintf("schema bind %s to %s", b.Prefix, b.SchemaID)
	if p.RejectedCount > 0 {
		reason += fmt.Sprintf(" (forced over %d rejected head(s))", p.RejectedCount)
	}
	next := slices.DeleteFunc(slices.Clone(bs.list), func(x varplane.SchemaBinding) bool { return x.Prefix == b.Prefix })
	if _, err := writeRecord(ctx, svc.engine, bindingsScope, bs.version, bindingsDoc{Bindings: append(next, b)}, by.ID, reason); err != nil {
		return BindingPreview{}, err
	}
	p.Bound = true
	return p, nil
}

// rejectedError is the refusal of a binding whose schema rejects current
// heads.
func rejectedError(p BindingPreview) *varplane.Error {
	var names []string
	var issues []varplane.Issue
	for _, r := range p.Rejected {
		names = append(names, string(r.Scope))
		is := r.Issues[0]
		is.Message = fmt.Sprintf("%s (generation %d): %s", r.Scope, r.Generation, is.Message)
		issues = append(issues, is)
	}
	more := ""
	if p.RejectedCount > len(p.Rejected) {
		more = fmt.Sprintf(" and %d more", p.RejectedCount-len(p.Rejected))
	}
	return &varplane.Error{Code: varplane.CodeRevisionInvalid, Scope: p.Prefix, Issues: issues,
		Message: fmt.Sprintf("schema %q rejects %d current head(s) under %q: %s%s; nothing was bound",
			p.SchemaID, p.RejectedCount, p.Prefix, strings.Join(names, ", "), more),
		Hint: fmt.Sprintf("fix those heads first, or bind anyway with force (varplane schema bind %s %s --force): they stay live, and their next write must pass the schema", p.Prefix, p.SchemaID)}
}

// Unbind removes the binding of prefix itself, as by (who needs
// SchemaRole); not-found when prefix is not bound. The scopes below it
// fall to the next shorter binding, if any.
func (svc *Service) Unbind(ctx context.Context, by varplane.Identity, prefix varplane.Scope) error {
	if !by.Has(SchemaRole) {
		return varplane.Errorf(varplane.CodeForbidden, "unbinding schemas needs the %s role", SchemaRole)
	}
	bs, err := svc.guard.bindings(ctx)
	if err != nil {
		return err
	}
	next := slices.DeleteFunc(slices.Clone(bs.list), func(x varplane.SchemaBinding) bool { return x.Prefix == prefix })
	if len(next) == len(bs.list) {
		return varplane.Errorf(varplane.CodeNotFound, "no schema is bound to %q", prefix)
	}
	_, err = writeRecord(ctx, svc.engine, bindingsScope, bs.version, bindingsDoc{Bindings: next}, by.ID, "schema unbind "+string(prefix))
	return err
}

// issuesOf returns the issues err carries (revision-invalid), none for
// another error.
func issuesOf(err error) []varplane.Issue {
	var e *varplane.Error
	if errors.As(err, &e) {
		return e.Issues
	}
	return nil
}
