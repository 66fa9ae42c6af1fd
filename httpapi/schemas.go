package httpapi

import (
	"net/http"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// schemaRoutes registers the routes of schemas and their bindings under
// prefix ({base}/admin/schemas); docs/api.md and docs/schemas.md have the
// table. The list needs an authenticated caller, and shows the bindings
// whose subtree the caller may audit; binding needs audit and mutate on
// the prefix's subtree (and, unless it is a dry run, the role
// control:schemas). Bindings are kept by the control service: without it
// (Options.Control nil) the list has none and the binding routes are
// absent.
//
//	GET    /                         {schemas: [id], bindings: [{prefix, schemaId}]}
//	PUT    /bindings/{scope}         {schemaId, dryRun?, force?} → 200 the preview
//	DELETE /bindings/{scope}         204
func (h *Handler) schemaRoutes(prefix string) {
	h.handleErr("GET "+prefix, loud, h.handleSchemas)
	if h.ctl != nil {
		h.handleErr("PUT "+prefix+"/bindings/{scope}", loud, h.handleBindSchema)
		h.handleErr("DELETE "+prefix+"/bindings/{scope}", loud, h.handleUnbindSchema)
	}
}

// SchemasResponse is the body of GET {base}/admin/schemas.
type SchemasResponse struct {
	Schemas  []string                 `json:"schemas"`
	Bindings []varplane.SchemaBinding `json:"bindings"`
}

// handleSchemas serves GET {base}/admin/schemas: the schemas the server
// loaded and the bindings whose subtree the caller may audit.
func (h *Handler) handleSchemas(w http.ResponseWriter, r *http.Request) error {
	if _, err := h.identify(r); err != nil {
		return err
	}
	out := SchemasResponse{Schemas: h.engine.SchemaIDs(), Bindings: []varplane.SchemaBinding{}}
	if h.ctl != nil {
		list, err := h.ctl.Bindings(r.Context())
		if err != nil {
			return err
		}
		for _, b := range list {
			ok, err := h.mayAudit(r, b.Prefix, true)
			if err != nil {
				return err
			}
			if ok {
				out.Bindings = append(out.Bindings, b)
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

type bindBody struct {
	SchemaID string `json:"schemaId"`
	DryRun   bool   `json:"dryRun"`
	Force    bool   `json:"force"`
}

// handleBindSchema serves PUT {base}/admin/schemas/bindings/{scope}: the
// preview of the binding (the current heads the schema rejects), written
// unless dryRun; 422 revision-invalid listing the rejected heads when
// there are some and force is not set.
func (h *Handler) handleBindSchema(w http.ResponseWriter, r *http.Request) error {
	scope, err := pathScope(r, "")
	if err != nil {
		return err
	}
	if _, err := h.authorize(r, varplane.KindAudit, scope, true); err != nil {
		return err
	}
	var b bindBody
	if err := h.readBody(w, r, &b); err != nil {
		return err
	}
	binding := varplane.SchemaBinding{Prefix: scope, SchemaID: b.SchemaID}
	var p control.BindingPreview
	if b.DryRun {
		p, err = h.ctl.PreviewBinding(r.Context(), binding)
	} else {
		var by varplane.Identity
		if by, err = h.authorize(r, varplane.KindMutate, scope, true); err == nil {
			p, err = h.ctl.Bind(r.Context(), by, binding, b.Force)
		}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// handleUnbindSchema serves DELETE {base}/admin/schemas/bindings/{scope}.
func (h *Handler) handleUnbindSchema(w http.ResponseWriter, r *http.Request) error {
	scope, err := pathScope(r, "")
	if err != nil {
		return err
	}
	by, err := h.authorize(r, varplane.KindMutate, scope, true)
	if err == nil {
		err = h.ctl.Unbind(r.Context(), by, scope)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
