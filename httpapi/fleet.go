package httpapi

import (
	"net/http"
	"strconv"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/internal/wire"
)

// fleetRoutes registers the fleet view under prefix ({base}/control):
//
//	GET /instances?after=&limit=                   every instance, its entries of the scopes the caller may audit
//	GET /documents/{scope}/instances?after=&limit=  every instance, its entry of scope (audit on scope)
//
// Both are audit reads, as propagation is: they show which revision of a
// scope each instance runs and what it refused.
func (h *Handler) fleetRoutes(prefix string) {
	h.handleErr("GET "+prefix+"/instances", loud, h.handleFleet)
	h.handleErr("GET "+prefix+"/documents/{scope}/instances", loud, h.handleScopeFleet)
}

// handleFleet serves GET {base}/control/instances: the caller is
// authenticated, and each instance shows only its entries of the scopes
// the caller may audit.
func (h *Handler) handleFleet(w http.ResponseWriter, r *http.Request) error {
	if _, err := h.identify(r); err != nil {
		return err
	}
	return h.serveFleet(w, r, "")
}

// handleScopeFleet serves GET {base}/control/documents/{scope}/instances:
// audit on scope, and each instance shows its entry of scope alone.
func (h *Handler) handleScopeFleet(w http.ResponseWriter, r *http.Request) error {
	scope, err := h.auditPathScope(r)
	if err != nil {
		return err
	}
	return h.serveFleet(w, r, scope)
}

func (h *Handler) serveFleet(w http.ResponseWriter, r *http.Request, scope varplane.Scope) error {
	q, err := wire.SingleParams(r.URL.RawQuery, "after", "limit")
	if err != nil {
		return err
	}
	fq := control.FleetQuery{Scope: scope, After: q["after"],
		May: func(s varplane.Scope) (bool, error) { return h.mayAudit(r, s, false) }}
	if len(fq.After) > varplane.MaxInstanceID {
		return wire.BadRequest("after is longer than an instance id")
	}
	if s, ok := q["limit"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > control.MaxFleetLimit {
			return wire.BadRequest("limit must be an integer from 1 to %d", control.MaxFleetLimit)
		}
		fq.Limit = n
	}
	page, err := h.ctl.Fleet(r.Context(), fq)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}
