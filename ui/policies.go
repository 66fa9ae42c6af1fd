package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/internal/wire"
)

// policyForm is what the policy form holds: from a policy being edited,
// or as typed when the API refused it (kept through the redirect).
type policyForm struct {
	Scope     string
	Approvals string
	Roles     string
	Canary    bool
}

type policyRow struct {
	control.Policy
	// CanEdit is whether the token may put and delete this policy, as the
	// API decides it: mutate on the subtree and control.PolicyRole.
	CanEdit bool
}

type policiesView struct {
	Policies []policyRow
	// CanManage is whether the token holds control.PolicyRole: the form
	// is shown, and the API decides each scope.
	CanManage bool
	Form      policyForm
	Editing   bool
}

// policiesPath is the control API's path of the policies, or of the one
// on scope.
func policiesPath(scope string) string {
	if scope == "" {
		return "/control/policies"
	}
	return "/control/policies/" + url.PathEscape(scope)
}

// handlePolicies lists the review policies the token may audit (the API
// filters) and, for a token that may manage policies, a form to set one
// (?edit= a scope fills it with that policy) and a delete button per
// policy it may change.
func (h *Handler) handlePolicies(w http.ResponseWriter, r *http.Request, q *request) {
	ctx := r.Context()
	var out struct {
		Policies []control.Policy `json:"policies"`
	}
	if err := q.api.Call(ctx, http.MethodGet, policiesPath(""), nil, nil, &out); err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	v := policiesView{Form: policyForm{Approvals: "1"}}
	if id, err := varplane.Authorize(ctx, h.opts.Authorizer, varplane.Access{Kind: varplane.KindIdentify, Token: q.s.token}); err == nil {
		v.CanManage = id.Has(control.PolicyRole)
	}
	edit := r.URL.Query().Get("edit")
	for _, p := range out.Policies {
		row := policyRow{Policy: p}
		if v.CanManage {
			_, err := varplane.Authorize(ctx, h.opts.Authorizer, varplane.Access{Kind: varplane.KindMutate, Scope: p.Scope, Subtree: true, Token: q.s.token})
			row.CanEdit = err == nil
		}
		if row.CanEdit && edit != "" && string(p.Scope) == edit {
			v.Editing = true
			v.Form = policyForm{Scope: edit, Approvals: strconv.Itoa(p.Approvals), Roles: strings.Join(p.Roles, ", "), Canary: p.Canary}
		}
		v.Policies = append(v.Policies, row)
	}
	h.render(w, r, q.s, http.StatusOK, "policies", "Review policies", &v)
}

// handlePolicyWrite puts (action=put) or deletes (action=delete) the
// policy of a scope through the control API with the session's token, so
// the API's authorization decides; a refused or invalid form comes back
// with what was typed and the reason in words.
func (h *Handler) handlePolicyWrite(w http.ResponseWriter, r *http.Request, q *request) {
	back := h.prefix + "/policies"
	form := policyForm{
		Scope:     strings.TrimSpace(r.PostForm.Get("scope")),
		Approvals: strings.TrimSpace(r.PostForm.Get("approvals")),
		Roles:     r.PostForm.Get("roles"),
		Canary:    r.PostForm.Get("canary") != "",
	}
	refuse := func(field string, err error) {
		f := h.pageFlash(err)
		f.Field, f.Policy = field, &form
		h.redirect(w, r, q.s, back+"#policy-form", f)
	}
	scope, err := varplane.ParseScope(form.Scope)
	if err != nil {
		refuse("scope", wire.BadRequest("the scope is not a valid scope name: %s", varplane.ErrorMessage(err)))
		return
	}
	ctx := r.Context()
	switch r.PostForm.Get("action") {
	case "delete":
		if err := q.api.Call(ctx, http.MethodDelete, policiesPath(string(scope)), nil, nil, nil); err != nil {
			f := h.pageFlash(err)
			h.redirect(w, r, q.s, back, f)
			return
		}
		h.redirect(w, r, q.s, back, &flash{OK: true, Message: "The review policy on " + string(scope) + " is deleted: its scopes take direct writes again, unless a policy on a parent covers them."})
	case "put":
		n, err := strconv.Atoi(form.Approvals)
		if err != nil {
			refuse("approvals", wire.BadRequest("approvals must be a whole number"))
			return
		}
		// Roles are typed separated by commas or spaces (a role has
		// neither).
		roles := strings.FieldsFunc(form.Roles, func(c rune) bool { return c == ',' || unicode.IsSpace(c) })
		if roles == nil {
			roles = []string{}
		}
		body := map[string]any{"approvals": n, "roles": roles, "canary": form.Canary}
		var p control.Policy
		if err := q.api.Call(ctx, http.MethodPut, policiesPath(string(scope)), nil, body, &p); err != nil {
			refuse("", err)
			return
		}
		msg := "The review policy on " + string(p.Scope) + " is set: " + strconv.Itoa(p.Approvals) + " approval(s)"
		if len(p.Roles) > 0 {
			msg += " by " + strings.Join(p.Roles, ", ")
		}
		if p.Canary {
			msg += ", after a passed canary window"
		}
		h.redirect(w, r, q.s, back, &flash{OK: true, Message: msg + "."})
	default:
		h.redirect(w, r, q.s, back, &flash{Message: "Unknown action."})
	}
}
