package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// ChainAnchor is the body of GET {base}/admin/chain: one value that anchors
// every scope's event chain (varplane.ChainDigest), with what it covers. A
// scope's own chain head is in its status (GET {base}/admin/status).
type ChainAnchor struct {
	// Digest is varplane.ChainDigest of every scope's chain head.
	Digest string `json:"digest"`
	// Scopes counts the scopes with a chained event; Events the chained
	// events their heads cover.
	Scopes int    `json:"scopes"`
	Events uint64 `json:"events"`
	// At is when the walk of the scopes began. The walk reads each scope's
	// head in turn, not one instant of the whole store: a commit made
	// meanwhile may or may not be in it, so anchor a quiet store, or each
	// scope's head from its status.
	At time.Time `json:"at"`
}

// handleChain serves GET {base}/admin/chain: 200 ChainAnchor. It covers
// every scope, so it needs audit on the whole tree (a grant without
// prefixes, or "*"); a caller limited to some scopes reads their heads from
// their status instead.
func (h *Handler) handleChain(w http.ResponseWriter, r *http.Request) {
	// Other admin routes ignore parameters they do not know; this one
	// refuses them, so that ?scope= is not mistaken for a scope's anchor.
	if err := wire.QueryParams(r.URL.RawQuery, func(name, _ string) error {
		return wire.BadRequest("%s takes no parameters (%s): a scope's chain head is in its status, GET %s/admin/status?scope=", r.URL.Path, name, strings.TrimSuffix(r.URL.Path, "/admin/chain"))
	}); err != nil {
		h.writeError(w, r, err)
		return
	}
	if _, err := h.authorize(r, varplane.KindAudit, "", true); err != nil {
		h.writeError(w, r, err)
		return
	}
	ctx := r.Context()
	st := h.engine.Store()
	res := ChainAnchor{At: time.Now().UTC()}
	scopes, err := st.Scopes(ctx)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	d := varplane.NewChainDigester()
	for _, sc := range scopes {
		s, err := st.State(ctx, sc)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		d.Add(sc, s.Chain)
	}
	res.Digest, res.Scopes, res.Events = d.Sum(), d.Scopes(), d.Events()
	writeJSON(w, http.StatusOK, res)
}
