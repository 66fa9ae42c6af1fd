package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

type bindingRow struct {
	varplane.SchemaBinding
	// CanEdit is whether the token may unbind it, as the API decides:
	// mutate on the subtree and control.SchemaRole.
	CanEdit bool
}

type schemasView struct {
	Schemas  []string
	Bindings []bindingRow
	// CanManage is whether the token holds control.SchemaRole: the form
	// is shown, and the API decides each prefix.
	CanManage bool
	// Prefix and Schema are the form's values (?prefix=&schema=).
	Prefix, Schema string
	// Preview is the dry run of binding Prefix to Schema (?preview=1).
	Preview *control.BindingPreview
}

// bindingPath is the API's path of the binding of prefix.
func bindingPath(prefix string) string { return "/admin/schemas/bindings/" + url.PathEscape(prefix) }

// handleSchemas lists the schemas the server loaded and the bindings the
// token may audit (the API filters) and, for a token that may bind, a form
// whose Preview (?preview=1&prefix=&schema=) shows the current heads the
// schema would reject before anything is bound.
func (h *Handler) handleSchemas(w http.ResponseWriter, r *http.Request, q *request) {
	ctx := r.Context()
	var out struct {
		Schemas  []string                 `json:"schemas"`
		Bindings []varplane.SchemaBinding `json:"bindings"`
	}
	if err := q.api.Call(ctx, http.MethodGet, "/admin/schemas", nil, nil, &out); err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	qs := r.URL.Query()
	v := schemasView{Schemas: out.Schemas, Prefix: strings.TrimSpace(qs.Get("prefix")), Schema: qs.Get("schema")}
	if id, err := varplane.Authorize(ctx, h.opts.Authorizer, varplane.Access{Kind: varplane.KindIdentify, Token: q.s.token}); err == nil {
		v.CanManage = id.Has(control.SchemaRole)
	}
	for _, b := range out.Bindings {
		row := bindingRow{SchemaBinding: b}
		if v.CanManage {
			_, err := varplane.Authorize(ctx, h.opts.Authorizer, varplane.Access{Kind: varplane.KindMutate, Scope: b.Prefix, Subtree: true, Token: q.s.token})
			row.CanEdit = err == nil
		}
		v.Bindings = append(v.Bindings, row)
	}
	if qs.Get("preview") != "" && v.Prefix != "" {
		var p control.BindingPreview
		body := map[string]any{"schemaId": v.Schema, "dryRun": true}
		if err := q.api.Call(ctx, http.MethodPut, bindingPath(v.Prefix), nil, body, &p); err != nil {
			h.redirect(w, r, q.s, h.prefix+"/schemas", h.pageFlash(err))
			return
		}
		v.Preview = &p
	}
	h.render(w, r, q.s, http.StatusOK, "schemas", "Schemas", &v)
}

// handleSchemaWrite binds (action=bind, with force when asked) or unbinds
// (action=unbind) a prefix through the API with the session's token, so
// the API's authorization and its check of the current heads decide; a
// refusal comes back in words, with the rejected heads listed.
func (h *Handler) handleSchemaWrite(w http.ResponseWriter, r *http.Request, q *request) {
	back := h.prefix + "/schemas"
	prefix, schemaID := strings.TrimSpace(r.PostForm.Get("prefix")), r.PostForm.Get("schema")
	ctx := r.Context()
	switch r.PostForm.Get("action") {
	case "unbind":
		if err := q.api.Call(ctx, http.MethodDelete, bindingPath(prefix), nil, nil, nil); err != nil {
			h.redirect(w, r, q.s, back, h.pageFlash(err))
			return
		}
		h.redirect(w, r, q.s, back, &flash{OK: true, Message: "The binding of " + prefix + " is removed: its scopes fall to a binding of a parent, if any, or take any document again."})
	case "bind":
		var p control.BindingPreview
		body := map[string]any{"schemaId": schemaID, "force": r.PostForm.Get("force") != ""}
		if err := q.api.Call(ctx, http.MethodPut, bindingPath(prefix), nil, body, &p); err != nil {
			f := h.pageFlash(err)
			if varplane.ErrorCode(err) == varplane.CodeRevisionInvalid {
				// The schema rejects current heads: say which, and how to
				// bind anyway.
				f.Message = varplane.ErrorMessage(err) + ". Preview lists them; tick \"Bind anyway\" to bind over them."
			}
			again := url.Values{"prefix": {prefix}, "schema": {schemaID}, "preview": {"1"}}
			h.redirect(w, r, q.s, back+"?"+again.Encode(), f)
			return
		}
		msg := "Every write to " + string(p.Prefix) + " and below is now validated against " + p.SchemaID + "."
		if p.RejectedCount > 0 {
			msg += " " + strconv.Itoa(p.RejectedCount) + " current head(s) it rejects stay live; their next write must pass it."
		}
		h.redirect(w, r, q.s, back, &flash{OK: true, Message: msg})
	default:
		h.redirect(w, r, q.s, back, &flash{Message: "Unknown action."})
	}
}

// validatedMessage is what the editor's Validate says of a valid document:
// the schema it was checked against, and the binding that chose it.
func validatedMessage(res varplane.ValidateResult) string {
	switch {
	case res.BoundBy != "":
		return "The document is valid against schema " + res.SchemaID + ", which " + string(res.BoundBy) + " is bound to. Nothing was published yet."
	case res.SchemaID != "":
		return "The document is valid against schema " + res.SchemaID + ". Nothing was published yet."
	}
	return "The document is valid (no schema is bound to this scope: only its syntax was checked). Nothing was published yet."
}
