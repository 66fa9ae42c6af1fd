package httpapi

import (
	"net/http"

	"github.com/varplane/varplane/internal/wire"
)

// dryRun reads the optional dryRun query parameter of a write route
// (POST {base}/admin/publish, activate, rollback, deactivate): "true" asks
// the engine for every check of the write and no commit (varplane's
// DryRun fields), after the same authorization as the write; "false" or
// absent is the write itself. Anything else is bad-request, answered here;
// it reports false when the request must stop.
func (h *Handler) dryRun(w http.ResponseWriter, r *http.Request) (dry, ok bool) {
	params, err := wire.SingleParams(r.URL.RawQuery, "dryRun")
	if err == nil {
		switch params["dryRun"] {
		case "", "false":
		case "true":
			dry = true
		default:
			err = wire.BadRequest("dryRun must be true or false")
		}
	}
	if err != nil {
		h.writeError(w, r, err)
		return false, false
	}
	return dry, true
}
