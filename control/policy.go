package control

import (
	"context"
	"errors"
	"slices"

	"github.com/varplane/varplane"
)

// Policy is the review policy of one scope subtree: the scope and every
// descendant. The policy of the longest covering scope applies.
type Policy struct {
	// Scope is the root of the subtree the policy covers.
	Scope varplane.Scope `json:"scope"`
	// Approvals is how many distinct identities, none of them the author,
	// must approve a change before it publishes (at least 1).
	Approvals int `json:"approvals"`
	// Roles, when not empty, are the roles of which an approver must hold
	// one (Identity.Has); empty lets any identity with mutate access on the
	// scope approve.
	Roles []string `json:"roles,omitempty"`
	// Canary requires a passed canary window before a change publishes.
	Canary bool `json:"canary,omitempty"`
}

// PolicyRole is the role an identity needs to put or delete a review
// policy (besides mutate access on its scope): without it, anyone allowed
// to write a scope could lift its policy and write around review.
const PolicyRole = "control:policies"

// MaxApprovals bounds Policy.Approvals.
const MaxApprovals = 16

type policiesDoc struct {
	Policies []Policy `json:"policies"`
}

// policySet is the policies as of one version of their record.
type policySet = recordSet[Policy]

// lookupPolicy returns the policy of the longest scope that covers s.
func lookupPolicy(ps *policySet, s varplane.Scope) (Policy, bool) {
	var best Policy
	found := false
	for _, p := range ps.list {
		if (s == p.Scope || s.IsDescendantOf(p.Scope)) && (!found || len(p.Scope) > len(best.Scope)) {
			best, found = p, true
		}
	}
	return best, found
}

// Prepare writes an empty policies record when the store holds none. The
// guard reads the policies on every write; a shared store such as Redis
// serves a scope it holds from memory (kept fresh by its change feed) but
// asks the server again each time for a scope that was never written, so
// a server calls Prepare once at start. Two replicas preparing at once are
// harmless: the second one's write is a conflict, and it is ignored.
func (svc *Service) Prepare(ctx context.Context) error {
	var doc policiesDoc
	version, found, err := readRecord(ctx, svc.store, policiesScope, &doc)
	if err != nil || found {
		return err
	}
	_, err = writeRecord(ctx, svc.engine, policiesScope, version, policiesDoc{Policies: []Policy{}}, "varplane:control", "policies prepared")
	if errors.Is(err, varplane.ErrConflict) {
		return nil
	}
	return err
}

// Policies returns every review policy, sorted by scope.
func (svc *Service) Policies(ctx context.Context) ([]Policy, error) {
	ps, err := svc.guard.policies(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(ps.list)
	if out == nil {
		out = []Policy{}
	}
	slices.SortFunc(out, func(a, b Policy) int { return compareScopes(a.Scope, b.Scope) })
	return out, nil
}

func compareScopes(a, b varplane.Scope) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// PolicyFor returns the policy that applies to scope, if any.
func (svc *Service) PolicyFor(ctx context.Context, scope varplane.Scope) (Policy, bool, error) {
	ps, err := svc.guard.policies(ctx)
	if err != nil {
		return Policy{}, false, err
	}
	p, ok := lookupPolicy(ps, scope)
	return p, ok, nil
}

// PutPolicy sets the policy of p.Scope (replacing one there), as by. by
// needs PolicyRole; the caller authorized mutate access on p.Scope. A
// policy on a reserved scope (one a subsystem of the engine owns, such as
// the access control's principals) is bad-request: its owner's rules
// guard it, and a policy there could only lock its administrators out. A
// policy on an ancestor is accepted and does not cover the reserved scopes
// below it.
func (svc *Service) PutPolicy(ctx context.Context, by varplane.Identity, p Policy) (Policy, error) {
	if err := checkPolicy(p); err != nil {
		return Policy{}, err
	}
	if owner, ok := svc.engine.Reserved(p.Scope); ok {
		return Policy{}, varplane.Errorf(varplane.CodeBadRequest, "scope %q is reserved to the %s, whose own rules guard it: a review policy cannot cover it", p.Scope, owner)
	}
	err := svc.editPolicies(ctx, by, "policy put "+string(p.Scope), func(list []Policy) ([]Policy, bool) {
		list = slices.DeleteFunc(list, func(q Policy) bool { return q.Scope == p.Scope })
		return append(list, p), true
	})
	return p, err
}

// DeletePolicy removes the policy of scope, as by (who needs PolicyRole);
// not-found when there is none.
func (svc *Service) DeletePolicy(ctx context.Context, by varplane.Identity, scope varplane.Scope) error {
	found := false
	err := svc.editPolicies(ctx, by, "policy delete "+string(scope), func(list []Policy) ([]Policy, bool) {
		n := len(list)
		list = slices.DeleteFunc(list, func(q Policy) bool { return q.Scope == scope })
		found = len(list) < n
		return list, found
	})
	if err == nil && !found {
		return varplane.Errorf(varplane.CodeNotFound, "no review policy on %q", scope)
	}
	return err
}

// editPolicies applies edit to the stored policies and writes them back
// guarded by their version; edit reports whether it changed anything.
func (svc *Service) editPolicies(ctx context.Context, by varplane.Identity, reason string, edit func([]Policy) ([]Policy, bool)) error {
	if !by.Has(PolicyRole) {
		return varplane.Errorf(varplane.CodeForbidden, "managing review policies needs the %s role", PolicyRole)
	}
	var doc policiesDoc
	version, _, err := readRecord(ctx, svc.store, policiesScope, &doc)
	if err != nil {
		return err
	}
	next, changed := edit(slices.Clone(doc.Policies))
	if !changed {
		return nil
	}
	_, err = writeRecord(ctx, svc.engine, policiesScope, version, policiesDoc{Policies: next}, by.ID, reason)
	return err
}

func checkPolicy(p Policy) error {
	if _, err := varplane.ParseScope(string(p.Scope)); err != nil {
		return err
	}
	if isRecordScope(p.Scope) {
		return varplane.Errorf(varplane.CodeBadRequest, "a review policy cannot cover the control subsystem's scopes (%s)", RecordRoot)
	}
	if p.Approvals < 1 || p.Approvals > MaxApprovals {
		return varplane.Errorf(varplane.CodeBadRequest, "approvals must be 1 to %d", MaxApprovals)
	}
	for _, r := range p.Roles {
		if r == "" || len(r) > 128 {
			return varplane.Errorf(varplane.CodeBadRequest, "a role must be 1 to 128 bytes")
		}
	}
	return nil
}
