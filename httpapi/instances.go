package httpapi

import (
	"net/http"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// The routes through which a consumer that does not reach the store of
// record (the Go SDK) takes part in canary windows (docs/control.md,
// "Instances over HTTP"), under {base}/control:
//
//	PUT /instances/{id}/status               varplane.InstanceStatus → 204
//	GET /windows                             {windows: [varplane.StagedWindow]}
//	GET /windows/{window}/candidate          varplane.CanaryCandidate
//	PUT /windows/{window}/reports/{id}       varplane.CanaryReport → 204
//
// Only an instance identity files (the two PUTs): one holding
// varplane.InstanceRole by name, which an operator gives per instance; any
// other token, read-only or administrator, is 403 forbidden. {id} is never
// taken on trust: it must be the caller's authenticated identity, or that
// identity followed by ':' and a name of the process (several processes
// sharing one token, at most varplane.MaxInstanceNames at a time), so that
// no token files under another identity's id. Bodies are bounded by
// varplane.MaxStatusBytes and varplane.MaxReportBytes (413).

// ownInstance authenticates the caller, checks that it is an instance
// identity and that it may file under id (its identity, or its identity
// followed by ':' and a name), and returns it.
func (h *Handler) ownInstance(r *http.Request, id string) (varplane.Identity, error) {
	who, err := h.identify(r)
	if err != nil {
		return who, err
	}
	if !who.Holds(varplane.InstanceRole) {
		return who, varplane.Errorf(varplane.CodeForbidden, "statuses and reports are filed by instance identities only: a token given the %s role", varplane.InstanceRole)
	}
	if len(id) > varplane.MaxInstanceID || strings.ContainsFunc(id, func(c rune) bool { return c <= ' ' || c == 0x7f || c == '{' || c == '}' }) {
		return who, wire.BadRequest("an instance id is 1 to %d printable characters without braces or spaces", varplane.MaxInstanceID)
	}
	if name, ok := strings.CutPrefix(id, who.ID); !ok || (name != "" && (len(name) < 2 || name[0] != ':')) {
		return who, varplane.Errorf(varplane.CodeForbidden, "this identity files only under its own id: %q or %q", who.ID, who.ID+":<name>")
	}
	return who, nil
}

// filer checks who files under id before its body is read: an instance
// identity owning id, on a store that keeps filings, within its bound of
// names.
func (h *Handler) filer(r *http.Request, id string) (varplane.Identity, error) {
	who, err := h.ownInstance(r, id)
	if err != nil {
		return who, err
	}
	if err := h.ctl.CheckHeartbeats(); err != nil {
		return who, err
	}
	return who, h.ctl.CheckName(who.ID, id)
}

// handleFileStatus serves PUT {base}/control/instances/{id}/status. Each
// listed document's scope must be one the caller may read: no token claims
// a generation of a scope it cannot see (propagation counts these).
func (h *Handler) handleFileStatus(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	who, err := h.filer(r, id)
	if err != nil {
		return err
	}
	var st varplane.InstanceStatus
	if err := h.readBodyMax(w, r, &st, varplane.MaxStatusBytes); err != nil {
		return err
	}
	st.Identity = who.ID
	// The count bounds the authorizer calls below.
	if len(st.Documents) > varplane.MaxStatusDocuments {
		return varplane.Errorf(varplane.CodeLimitExceeded, "a status lists at most %d documents", varplane.MaxStatusDocuments)
	}
	for _, d := range st.Documents {
		scope, err := wire.ScopeField("documents[].scope", string(d.Scope))
		if err == nil {
			_, err = h.authorize(r, varplane.KindRead, scope, false)
		}
		if err != nil {
			return err
		}
	}
	if err := h.ctl.FileStatus(r.Context(), id, st); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// handleWindows serves GET {base}/control/windows: every open window, so
// that each consumer reports on each (a window closes only once every
// fresh instance reported). A window whose scope the caller may not read
// is listed by its id and closing time alone: the caller cannot hold that
// scope, and its report is the empty one.
func (h *Handler) handleWindows(w http.ResponseWriter, r *http.Request) error {
	if _, err := h.identify(r); err != nil {
		return err
	}
	list, err := h.ctl.StagedWindows(r.Context())
	if err != nil {
		return err
	}
	out := make([]varplane.StagedWindow, 0, len(list))
	for _, sw := range list {
		ok, err := allowed(h.authorize(r, varplane.KindRead, sw.Scope, false))
		if err != nil {
			return err
		}
		if !ok {
			sw = varplane.StagedWindow{Window: sw.Window, ClosesAt: sw.ClosesAt}
		}
		out = append(out, sw)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"windows": out})
	return nil
}

// stagedWindow authenticates the caller and finds the open window of the
// {window} path value; not-found once it closed (or never opened).
func (h *Handler) stagedWindow(r *http.Request) (varplane.StagedWindow, error) {
	if _, err := h.identify(r); err != nil {
		return varplane.StagedWindow{}, err
	}
	return h.ctl.StagedWindow(r.Context(), r.PathValue("window"))
}

// handleCandidate serves GET {base}/control/windows/{window}/candidate: the
// window's candidate, to a caller that may read its scope, as the instance
// caches read it from the store.
func (h *Handler) handleCandidate(w http.ResponseWriter, r *http.Request) error {
	sw, err := h.stagedWindow(r)
	if err == nil {
		_, err = h.authorize(r, varplane.KindRead, sw.Scope, false)
	}
	var c *varplane.CanaryCandidate
	if err == nil {
		c, err = h.ctl.Candidate(r.Context(), sw)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, c)
	return nil
}

// handleFileReport serves PUT {base}/control/windows/{window}/reports/{id}:
// the caller's cumulative report of an open window, under its own id. A
// report that counts anything needs read on the window's scope (a consumer
// holding only that may report); a caller that may not read it cannot hold
// the scope, and may file only the empty report, which says "the candidate
// does not concern me".
func (h *Handler) handleFileReport(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	who, err := h.filer(r, id)
	if err != nil {
		return err
	}
	sw, err := h.stagedWindow(r)
	if err != nil {
		return err
	}
	var rep varplane.CanaryReport
	if err := h.readBodyMax(w, r, &rep, varplane.MaxReportBytes); err != nil {
		return err
	}
	mayRead, err := allowed(h.authorize(r, varplane.KindRead, sw.Scope, false))
	if err != nil {
		return err
	}
	if !mayRead && (rep.Decoded != 0 || rep.Errors != 0 || rep.CandidateError != "") {
		return varplane.Errorf(varplane.CodeForbidden, "a report that counts anything needs read on the window's scope")
	}
	rep.Identity, rep.MayRead = who.ID, mayRead
	if err := h.ctl.FileReport(r.Context(), sw, id, rep); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
