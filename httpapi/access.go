package httpapi

import (
	"net/http"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/internal/wire"
)

// accessRoutes registers the access API (Options.Access) under prefix
// ({base}/access):
//
//	GET    /tokens       list the principals (audit)
//	POST   /tokens       create one; the answer holds its token, once (mutate)
//	DELETE /tokens/{id}  revoke one (mutate)
//
// Administration is a role of its own: every route needs access.AdminRole
// (kinds on access.Scope do not suffice), and a create or revoke is
// refused when the binding is wider than the caller holds
// (access.Creator.MayGive). Every write is recorded in the scope's history
// with the caller's identity as actor.
func (h *Handler) accessRoutes(prefix string) {
	h.handleErr("GET "+prefix+"/tokens", loud, h.handleAccessList)
	h.handleErr("POST "+prefix+"/tokens", loud, h.handleAccessCreate)
	h.handleErr("DELETE "+prefix+"/tokens/{id}", loud, h.handleAccessRevoke)
}

// maxAccessRequestBytes bounds a create request: an id, a few lists.
const maxAccessRequestBytes = 64 << 10

// authorizeAccess allows an administrator (access.AdminRole) only, and
// returns what it may give.
func (h *Handler) authorizeAccess(r *http.Request) (access.Creator, error) {
	id, err := h.identify(r)
	if err != nil {
		return access.Creator{}, err
	}
	if !id.Has(access.AdminRole) {
		return access.Creator{}, varplane.Errorf(varplane.CodeForbidden, "the access API needs the %s role", access.AdminRole)
	}
	return access.CreatorOf(r.Context(), h.auth, id, wire.RequestBearer(r))
}

// handleAccessList serves GET {base}/access/tokens.
func (h *Handler) handleAccessList(w http.ResponseWriter, r *http.Request) error {
	if _, err := h.authorizeAccess(r); err != nil {
		return err
	}
	ps, err := h.access.List(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		Principals []access.Info `json:"principals"`
	}{ps})
	return nil
}

// accessCreateRequest is the body of POST {base}/access/tokens.
type accessCreateRequest struct {
	ID       string          `json:"id"`
	Kinds    []varplane.Kind `json:"kinds"`
	Prefixes []string        `json:"prefixes"`
	Roles    []string        `json:"roles"`
	Reason   string          `json:"reason"`
}

// handleAccessCreate serves POST {base}/access/tokens: 201 with the new
// principal and its token, shown this once.
func (h *Handler) handleAccessCreate(w http.ResponseWriter, r *http.Request) error {
	by, err := h.authorizeAccess(r)
	if err != nil {
		return err
	}
	if err := wire.CheckContentType(r, "application/json"); err != nil {
		return err
	}
	body, err := wire.ReadBody(w, r, min(h.limits.MaxBodyBytes, maxAccessRequestBytes))
	if err != nil {
		return err
	}
	var req accessCreateRequest
	if err := wire.DecodeStrict(body, &req, h.limits); err != nil {
		return err
	}
	created, err := h.access.Create(r.Context(), req.ID, access.Binding{Kinds: req.Kinds, Prefixes: req.Prefixes, Roles: req.Roles}, by, req.Reason)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, created)
	return nil
}

// handleAccessRevoke serves DELETE {base}/access/tokens/{id}?reason=.
func (h *Handler) handleAccessRevoke(w http.ResponseWriter, r *http.Request) error {
	by, err := h.authorizeAccess(r)
	if err != nil {
		return err
	}
	name := r.PathValue("id")
	res, err := h.access.Revoke(r.Context(), name, by, r.URL.Query().Get("reason"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		ID         string              `json:"id"`
		Revoked    bool                `json:"revoked"`
		Generation varplane.Generation `json:"generation"`
		Revision   varplane.Revision   `json:"revision"`
	}{name, true, res.Generation, res.Revision})
	return nil
}
