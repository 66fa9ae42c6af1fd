package ui

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// fleetPageSize is how many instances the fleet page lists at a time.
const fleetPageSize = 50

type fleetView struct {
	// Scope narrows every instance to its entry of one scope ("" all).
	Scope varplane.Scope
	Page  control.FleetPage
	// After is the cursor the page started at ("" the first page).
	After string
}

// handleFleet lists the instances that report to the server, a page at a
// time (?after=), through GET {base}/control/instances or, with ?s=,
// {base}/control/documents/{s}/instances: the API shows only the scopes the
// token may audit.
func (h *Handler) handleFleet(w http.ResponseWriter, r *http.Request, q *request) {
	v := fleetView{After: r.URL.Query().Get("after")}
	path := "/control/instances"
	if s := r.URL.Query().Get("s"); s != "" {
		scope, err := varplane.ParseScope(s)
		if err != nil {
			h.renderError(w, r, q.s, err)
			return
		}
		v.Scope, path = scope, docPath(scope, "/instances")
	}
	rq := url.Values{"limit": {strconv.Itoa(fleetPageSize)}}
	if v.After != "" {
		rq.Set("after", v.After)
	}
	if err := q.api.Call(r.Context(), http.MethodGet, path, rq, nil, &v.Page); err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	title := "Fleet"
	if v.Scope != "" {
		title = "Fleet of " + string(v.Scope)
	}
	h.render(w, r, q.s, http.StatusOK, "fleet", title, &v)
}
