package httpapi

import (
	"net/http"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// StatusCode returns the HTTP status of an error code: the wire layer's one
// table, which every server of the project answers through.
func StatusCode(code varplane.Code) int { return wire.Status(code) }

// ErrorBody is the JSON shape of every error answer: {code, error} and the
// details of conflicts, invalid documents and limits.
type ErrorBody = wire.ErrorBody

// writeError answers err. Internal errors are logged with their cause; the
// client only ever sees "internal error".
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	wire.WriteError(w, r, h.log, err)
}

// writeJSON answers v with status, as every JSON answer of the project is
// written.
func writeJSON(w http.ResponseWriter, status int, v any) { wire.WriteJSON(w, status, v) }
