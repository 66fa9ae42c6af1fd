package ui

import (
	"encoding/json"
	"net/http"

	"github.com/varplane/varplane"
)

// readOnlyNote is what the scope page of a scope the session may read but
// not audit says in place of its history.
const readOnlyNote = "Your token may read this scope but not audit it: the history, who published the head and the diffs need audit on it. Sign in with a token that has audit on this scope, or ask whoever manages the tokens to grant it."

// readerScope renders the scope page of a scope the session may read but
// not audit (its status was refused): the head as a read answers it, and
// readOnlyNote in place of the history. It reports false, having written
// nothing, when the session may not read the scope either.
func (h *Handler) readerScope(w http.ResponseWriter, r *http.Request, q *request, scope varplane.Scope) bool {
	ctx := r.Context()
	if !h.may(ctx, q.s, varplane.KindRead, scope) {
		return false
	}
	v := scopeView{Scope: scope, ReadOnly: readOnlyNote}
	v.Status.Scope = scope
	res, err := q.api.Read(ctx, scope, "")
	switch {
	case varplane.ErrorCode(err) == varplane.CodeNoHead:
	case err != nil:
		return false
	default:
		v.Status.Active, v.Status.Generation, v.Status.Revision = true, res.Generation, res.Revision
		doc := res.Values
		if !scope.IsGroup() {
			var values map[string]json.RawMessage
			if json.Unmarshal(res.Values, &values) == nil {
				doc = values[string(scope)]
			}
		}
		v.HeadDoc = pretty(doc)
	}
	h.render(w, r, q.s, http.StatusOK, "scope", string(scope), &v)
	return true
}
