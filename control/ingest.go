package control

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// The routes through which a consumer that does not reach the store of
// record (the Go SDK, over HTTP) takes part in canary windows, as an
// instance cache does through the store (docs/control.md, "Instances over
// HTTP"):
//
//	PUT /instances/{id}/status               varplane.InstanceStatus → 204
//	GET /windows                             {windows: [varplane.StagedWindow]}
//	GET /windows/{window}/candidate          the window and its candidate document
//	PUT /windows/{window}/reports/{id}       varplane.CanaryReport → 204
//
// {id} is never taken on trust: it must be the caller's authenticated
// identity, or that identity followed by ':' and a name of the process
// (several processes sharing one token), so that no token files under
// another identity's id. What the body says is stored as is: a report
// naming another instance or window than where it was filed is doubtful
// (Evaluate keeps the window open).

// beatStores finds what the store of record writes statuses and reports
// with, unwrapping wrappers as StoreInstances does.
func (h *handler) beatStores() (varplane.StatusWriter, varplane.ReportWriter, error) {
	hs, ok1 := varplane.StoreAs[varplane.StatusWriter](h.svc.store)
	rs, ok2 := varplane.StoreAs[varplane.ReportWriter](h.svc.store)
	if !ok1 || !ok2 {
		return nil, nil, ErrNoHeartbeats
	}
	return hs, rs, nil
}

// ownInstance authenticates the caller and checks that it may file under
// id: its identity, or its identity followed by ':' and a name.
func (h *handler) ownInstance(r *http.Request, id string) (varplane.Identity, error) {
	who, err := h.authorize(r, varplane.KindIdentify, "", false)
	if err != nil {
		return who, err
	}
	if len(id) > varplane.MaxInstanceID || strings.ContainsFunc(id, func(c rune) bool { return c <= ' ' || c == 0x7f || c == '{' || c == '}' }) {
		return who, wire.BadRequest("an instance id is 1 to %d printable characters without braces or spaces", varplane.MaxInstanceID)
	}
	if name, ok := strings.CutPrefix(id, who.ID); !ok || (name != "" && (len(name) < 2 || name[0] != ':')) {
		return who, varplane.Errorf(varplane.CodeForbidden, "this identity files only under its own id: %q or %q", who.ID, who.ID+":<name>")
	}
	return who, nil
}

func (h *handler) handleFileStatus(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := h.ownInstance(r, id); err != nil {
		h.fail(w, r, err)
		return
	}
	hs, _, err := h.beatStores()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var st varplane.InstanceStatus
	if !h.body(w, r, &st) {
		return
	}
	if len(st.Documents) > varplane.MaxStatusDocuments {
		h.fail(w, r, varplane.Errorf(varplane.CodeLimitExceeded, "a status lists at most %d documents", varplane.MaxStatusDocuments))
		return
	}
	// Each installed scope is one the caller may read: no token claims a
	// generation of a scope it cannot see (propagation counts these).
	for _, d := range st.Documents {
		scope, err := wire.ScopeField("documents[].scope", string(d.Scope))
		if err == nil {
			_, err = h.authorize(r, varplane.KindRead, scope, false)
		}
		if err != nil {
			h.fail(w, r, err)
			return
		}
	}
	if st.Documents == nil {
		st.Documents = []varplane.InstanceDocument{}
	}
	// Freshness is judged by the server's clock: a consumer whose clock is
	// off would otherwise count as no instance, or as one long gone.
	now := h.svc.now()
	st.WrittenAt = now.UTC()
	b, err := json.Marshal(st)
	if err == nil && h.shouldList(id, now) {
		if err = hs.ListInstance(r.Context(), id, now); err != nil {
			h.forgetListed(id)
		}
	}
	if err == nil {
		err = hs.WriteStatus(r.Context(), id, b)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listed remembers when each handler last listed each instance that files
// over HTTP, so that a heartbeat lists it once every varplane.ListInterval
// as an instance cache does (on Redis a listing is a script over the whole
// list). It is bounded: past maxListed entries it is cleared, which only
// lists instances again.
var listed = struct {
	sync.Mutex
	at map[listedKey]time.Time
}{at: map[listedKey]time.Time{}}

type listedKey struct {
	h  *handler
	id string
}

const maxListed = 1 << 16

// shouldList reports whether id is due for a listing, and records it as
// listed at now.
func (h *handler) shouldList(id string, now time.Time) bool {
	listed.Lock()
	defer listed.Unlock()
	k := listedKey{h, id}
	if t, ok := listed.at[k]; ok && now.Sub(t) < varplane.ListInterval && !now.Before(t) {
		return false
	}
	if len(listed.at) >= maxListed {
		clear(listed.at)
	}
	listed.at[k] = now
	return true
}

// forgetListed makes the next heartbeat of id list it again.
func (h *handler) forgetListed(id string) {
	listed.Lock()
	delete(listed.at, listedKey{h, id})
	listed.Unlock()
}

// stagedWindows reads the open windows from the staged record.
func (h *handler) stagedWindows(ctx context.Context) ([]varplane.StagedWindow, error) {
	var st varplane.StagedWindows
	if _, _, err := readRecord(ctx, h.svc.store, varplane.StagedScope, &st); err != nil {
		return nil, err
	}
	return st.Windows, nil
}

// mayRead reports whether the caller may read scope: a denial is false, an
// authorizer that fails is an error (closed).
func (h *handler) mayRead(r *http.Request, scope varplane.Scope) (bool, error) {
	_, err := h.authorize(r, varplane.KindRead, scope, false)
	switch {
	case err == nil:
		return true, nil
	case varplane.ErrorCode(err) == varplane.CodeForbidden:
		return false, nil
	}
	return false, err
}

// handleWindows lists every open window, so that each consumer reports on
// each (a window closes only once every fresh instance reported). A window
// whose scope the caller may not read is listed by its id and closing time
// alone: the caller cannot hold that scope, and its report is the empty
// one.
func (h *handler) handleWindows(w http.ResponseWriter, r *http.Request) {
	if !h.identify(w, r) {
		return
	}
	list, err := h.stagedWindows(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]varplane.StagedWindow, 0, len(list))
	for _, sw := range list {
		ok, err := h.mayRead(r, sw.Scope)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if !ok {
			sw = varplane.StagedWindow{Window: sw.Window, ClosesAt: sw.ClosesAt}
		}
		out = append(out, sw)
	}
	w.Header().Set("Cache-Control", "no-store")
	wire.WriteJSON(w, http.StatusOK, map[string]any{"windows": out})
}

// findWindow authenticates the caller and finds the open window of the
// {window} path value; not-found once it closed (or never opened).
func (h *handler) findWindow(r *http.Request) (varplane.StagedWindow, error) {
	if _, err := h.authorize(r, varplane.KindIdentify, "", false); err != nil {
		return varplane.StagedWindow{}, err
	}
	id := r.PathValue("window")
	list, err := h.stagedWindows(r.Context())
	if err != nil {
		return varplane.StagedWindow{}, err
	}
	for _, sw := range list {
		if sw.Window == id {
			return sw, nil
		}
	}
	return varplane.StagedWindow{}, varplane.Errorf(varplane.CodeNotFound, "no open canary window %q", id)
}

// handleCandidate answers a window's candidate to a caller that may read
// its scope, as the instance caches read it from the store.
func (h *handler) handleCandidate(w http.ResponseWriter, r *http.Request) {
	sw, err := h.findWindow(r)
	if err == nil {
		_, err = h.authorize(r, varplane.KindRead, sw.Scope, false)
	}
	var rec *varplane.RevisionRecord
	if err == nil {
		rec, err = h.svc.store.Revision(r.Context(), sw.Scope, sw.Revision)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	wire.WriteJSON(w, http.StatusOK, varplane.CanaryCandidate{StagedWindow: sw, Document: rec.Document})
}

// handleFileReport files the caller's cumulative report of an open window
// under its own id. A report that counts anything needs read on the
// window's scope (a consumer holding only that may report); a caller that
// may not read it cannot hold the scope, and may file only the empty
// report, which says "the candidate does not concern me".
func (h *handler) handleFileReport(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := h.ownInstance(r, id); err != nil {
		h.fail(w, r, err)
		return
	}
	_, rs, err := h.beatStores()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	sw, err := h.findWindow(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var rep varplane.CanaryReport
	if !h.body(w, r, &rep) {
		return
	}
	if rep.Decoded != 0 || rep.Errors != 0 || rep.CandidateError != "" {
		if _, err := h.authorize(r, varplane.KindRead, sw.Scope, false); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	b, err := json.Marshal(rep)
	if err == nil {
		err = rs.WriteCanaryReport(r.Context(), sw.Window, id, b)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
