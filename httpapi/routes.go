package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/internal/wire"
)

// handleRead serves GET {base}?key=<scope> | ?group=<scope>: the head's
// precomputed body with its revision as ETag, or 304 when If-None-Match
// names the current revision (or is *).
func (h *Handler) handleRead(w http.ResponseWriter, r *http.Request) {
	scope, err := wire.ParseReadScope(r.URL.RawQuery)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if _, err := h.authorize(r, varplane.KindRead, scope, false); err != nil {
		h.writeError(w, r, err)
		return
	}
	head, err := h.engine.Head(r.Context(), scope)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	// Canonical keys assigned directly: Header.Set would re-validate them
	// on every read.
	hdr := w.Header()
	hdr["Etag"] = []string{head.ETag()}
	if ETagMatches(r.Header["If-None-Match"], head.Revision) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hdr["Content-Type"] = jsonContentType
	_, _ = w.Write(head.ReadBody())
}

// jsonContentType is shared by every read response; net/http only reads it.
var jsonContentType = []string{"application/json"}

// ETagMatches reports whether If-None-Match header values name revision:
// each value may be a comma-separated list of entity tags, quoted or bare,
// strong or weak (W/, compared weakly as RFC 9110 requires for
// If-None-Match), or "*", which matches any current head.
func ETagMatches(values []string, revision varplane.Revision) bool {
	return etagMatches(values, string(revision))
}

// etagMatches reports whether If-None-Match header values name the entity
// tag whose opaque text (without quotes) is tag, or are "*".
func etagMatches(values []string, tag string) bool {
	for _, v := range values {
		for v != "" {
			var tok string
			if i := strings.IndexByte(v, ','); i >= 0 {
				tok, v = v[:i], v[i+1:]
			} else {
				tok, v = v, ""
			}
			tok = strings.TrimSpace(tok)
			if tok == "*" {
				return true
			}
			tok = strings.TrimPrefix(tok, "W/")
			if len(tok) >= 2 && tok[0] == '"' && tok[len(tok)-1] == '"' {
				tok = tok[1 : len(tok)-1]
			}
			if tok != "" && tok == tag {
				return true
			}
		}
	}
	return false
}

// handleBatch serves GET {base}/batch?key=…&group=… (each repeatable, at
// most MaxBatchScopes): one item per requested scope in request order,
// status "ok" with the read fields or "no-head". Any other per-scope error
// fails the whole request with its code.
func (h *Handler) handleBatch(w http.ResponseWriter, r *http.Request) {
	targets, err := wire.Targets(r.URL.RawQuery, false)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	for _, t := range targets {
		if _, err := h.authorize(r, varplane.KindRead, t.Scope, false); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	// One view for the whole request: a scope named twice is one revision.
	scopes := make([]varplane.Scope, len(targets))
	for i, t := range targets {
		scopes[i] = t.Scope
	}
	heads, err := h.engine.Heads(r.Context(), scopes)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	size := 16
	for i, t := range targets {
		if heads[i] != nil {
			size += len(heads[i].ReadBody()) + len(t.Scope) + 32
		} else {
			size += len(t.Scope) + 40
		}
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-cache")
	// The answer is written in pieces of about batchChunk bytes, the
	// heads' read bodies straight from where they are held: 256 scopes of
	// 1 MiB once cost a copy of 256 MiB per request. A small answer is
	// still one write.
	b := make([]byte, 0, min(size, 2*batchChunk))
	flush := func() {
		_, _ = w.Write(b)
		b = b[:0]
	}
	b = append(b, `{"items":[`...)
	for i, t := range targets {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"scope":`...)
		b = jsontext.AppendString(b, string(t.Scope))
		if heads[i] == nil {
			b = append(b, `,"status":"no-head"}`...)
			continue
		}
		// The head's read body is an object; splice its fields in after ours.
		b = append(b, `,"status":"ok",`...)
		if body := heads[i].ReadBody()[1:]; len(body) > batchChunk {
			flush()
			_, _ = w.Write(body)
		} else {
			b = append(b, body...)
		}
		if len(b) >= batchChunk {
			flush()
		}
	}
	b = append(b, "]}\n"...)
	flush()
}

// batchChunk is the size of the pieces a batch answer is written in.
const batchChunk = 32 << 10

// mutation checks the media type, reads and decodes a bounded body, then
// authorizes it as mutate on the scope the body names and records the
// authenticated identity as the request's actor (target returns the scope
// and where the actor goes, nil for a request that records none). It answers
// the error itself and reports false when the request must stop.
func mutation[T any](h *Handler, w http.ResponseWriter, r *http.Request, decode func([]byte, varplane.Limits) (T, error), target func(*T) (varplane.Scope, *string)) (T, bool) {
	var zero T
	if err := wire.CheckContentType(r, "application/json"); err != nil {
		h.writeError(w, r, err)
		return zero, false
	}
	body, err := wire.ReadBody(w, r, h.limits.MaxBodyBytes)
	if err != nil {
		h.writeError(w, r, err)
		return zero, false
	}
	req, err := decode(body, h.limits)
	if err != nil {
		h.writeError(w, r, err)
		return zero, false
	}
	scope, actor := target(&req)
	id, err := h.authorize(r, varplane.KindMutate, scope, false)
	if err != nil {
		h.writeError(w, r, err)
		return zero, false
	}
	if actor != nil {
		*actor = id.ID
	}
	return req, true
}

// handleCreateRevision serves POST {base}/admin/revisions: 201 with
// {scope, revision, generation, created}, or 200 when the content-addressed
// revision already existed; 422 revision-invalid with issues.
func (h *Handler) handleCreateRevision(w http.ResponseWriter, r *http.Request) {
	req, ok := mutation(h, w, r, DecodeCreateRevision, func(q *varplane.CreateRevisionRequest) (varplane.Scope, *string) { return q.Scope, &q.Actor })
	if !ok {
		return
	}
	start := time.Now()
	res, err := h.engine.CreateRevision(r.Context(), req)
	h.metrics.timeCommit("create", start)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	status := http.StatusCreated
	if !res.Created {
		status = http.StatusOK
	}
	writeJSON(w, status, res)
}

// handleValidate serves POST {base}/admin/validate: 200 {valid, issues}.
func (h *Handler) handleValidate(w http.ResponseWriter, r *http.Request) {
	req, ok := mutation(h, w, r, DecodeValidate, func(q *varplane.ValidateRequest) (varplane.Scope, *string) { return q.Scope, nil })
	if !ok {
		return
	}
	res, err := h.engine.Validate(r.Context(), req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// handleActivate serves POST {base}/admin/activate: 200 {scope, generation,
// revision, effectiveAt}; 409 revision-conflict; 404 not-found.
func (h *Handler) handleActivate(w http.ResponseWriter, r *http.Request) {
	req, ok := mutation(h, w, r, DecodeActivate, func(q *varplane.ActivateRequest) (varplane.Scope, *string) { return q.Scope, &q.Actor })
	if !ok {
		return
	}
	if req.DryRun, ok = h.dryRun(w, r); !ok {
		return
	}
	start := time.Now()
	res, err := h.engine.Activate(r.Context(), req)
	h.metrics.timeCommit("activate", start)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// handleDeactivate serves POST {base}/admin/deactivate: 200 {scope,
// generation, active: false, cascade?}; 409 revision-conflict; with the
// control API, 409 confirmation-required naming the instances that held
// the scope or a scope below it in the last hour, unless the body says
// force: true (deletion protection, docs/rollouts.md).
func (h *Handler) handleDeactivate(w http.ResponseWriter, r *http.Request) {
	req, ok := mutation(h, w, r, DecodeDeactivate, func(q *varplane.DeactivateRequest) (varplane.Scope, *string) { return q.Scope, &q.Actor })
	if !ok {
		return
	}
	if req.DryRun, ok = h.dryRun(w, r); !ok {
		return
	}
	// Deletion protection before the engine, for a dry run too: it tells
	// the truth about the write, which would meet it.
	if h.ctl != nil && !req.Force {
		if err := h.ctl.ProtectDeactivation(r.Context(), req.Scope); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	start := time.Now()
	res, err := h.engine.Deactivate(r.Context(), req)
	h.metrics.timeCommit("deactivate", start)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// handleRollback serves POST {base}/admin/rollback: 200 {scope, generation,
// revision, effectiveAt}; 409 revision-conflict; 404 not-found.
func (h *Handler) handleRollback(w http.ResponseWriter, r *http.Request) {
	req, ok := mutation(h, w, r, DecodeRollback, func(q *varplane.RollbackRequest) (varplane.Scope, *string) { return q.Scope, &q.Actor })
	if !ok {
		return
	}
	if req.DryRun, ok = h.dryRun(w, r); !ok {
		return
	}
	start := time.Now()
	res, err := h.engine.Rollback(r.Context(), req)
	h.metrics.timeCommit("rollback", start)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// auditScope reads the required, single scope parameter of an audit route
// (and any other named ones) and authorizes the request as audit.
func (h *Handler) auditScope(r *http.Request, extra ...string) (varplane.Scope, map[string]string, error) {
	params, err := wire.SingleParams(r.URL.RawQuery, append([]string{"scope"}, extra...)...)
	if err != nil {
		return "", nil, err
	}
	raw, ok := params["scope"]
	if !ok {
		return "", nil, wire.BadRequest("scope is required")
	}
	scope, err := wire.ScopeField("scope", raw)
	if err != nil {
		return "", nil, err
	}
	for _, name := range extra {
		if _, ok := params[name]; !ok {
			return "", nil, wire.BadRequest("%s is required", name)
		}
	}
	if _, err := h.authorize(r, varplane.KindAudit, scope, false); err != nil {
		return "", nil, err
	}
	return scope, params, nil
}

// handleStatus serves GET {base}/admin/status?scope=: 200 {scope, active,
// generation, revision?, source, lastRejected?}.
func (h *Handler) handleStatus(w http.ResponseWriter, r *http.Request) {
	scope, _, err := h.auditScope(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	st, err := h.engine.Status(r.Context(), scope)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// HistoryResponse is the body of GET {base}/admin/history.
type HistoryResponse struct {
	Scope  varplane.Scope   `json:"scope"`
	Events []varplane.Event `json:"events"`
}

// handleHistory serves GET {base}/admin/history?scope=: 200 {scope, events}
// in log order. The answer is written as it is read, one revision body at
// a time (Engine.HistoryEach), so that a scope of many large revisions
// costs the server one body per request, not all of them twice (once
// read, once encoded). An error before the first event is answered as
// usual; one after it cuts the connection, so the client sees a truncated
// body rather than a history with a hole.
func (h *Handler) handleHistory(w http.ResponseWriter, r *http.Request) {
	scope, _, err := h.auditScope(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	err = wire.StreamJSON(w, historyOpen(scope), "]}", func(emit func(any) error) error {
		return h.engine.HistoryEach(r.Context(), scope, func(ev *varplane.Event) error { return emit(ev) })
	})
	if err != nil {
		h.writeError(w, r, err)
	}
}

// historyOpen is what a history answer holds before its first event: the
// members of HistoryResponse up to the events array's bracket.
func historyOpen(scope varplane.Scope) []byte {
	b := append([]byte(`{"scope":`), jsontext.AppendString(nil, string(scope))...)
	return append(b, `,"events":[`...)
}

// handleReplay serves GET {base}/admin/replay?scope=&toGeneration=: 200 the
// scope's head as of that generation; 404 not-found; 400 store-unsupported on
// a store without a log.
func (h *Handler) handleReplay(w http.ResponseWriter, r *http.Request) {
	params, err := wire.SingleParams(r.URL.RawQuery, "scope", "toGeneration")
	if err == nil {
		// Check the generation before authorizing, like a body is parsed first.
		if raw, ok := params["toGeneration"]; ok {
			_, err = wire.GenerationText("toGeneration", raw)
		}
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	scope, params, err := h.auditScope(r, "toGeneration")
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	gen, _ := wire.GenerationText("toGeneration", params["toGeneration"])
	res, err := h.engine.Replay(r.Context(), scope, gen)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// handleHealthz serves GET /healthz: 200 while the process serves HTTP.
func (h *Handler) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// ReadyResponse is the body of GET /readyz. Status is "ready" or
// "unavailable"; Checks maps each check ("store", "writes", "ready") to "ok" or the
// reason it failed. A store that describes itself (varplane.ReadyDetailer)
// adds its details to the body under its name ("redis": {…}).
type ReadyResponse struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// handleReadyz serves GET /readyz: 200 when the store answers a read,
// accepts writes (varplane.WriteReady; a store opened read-only is not
// asked), and its own readiness rule (varplane.Readier) and Options.Ready
// (if any) pass; 503 otherwise.
func (h *Handler) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	res := ReadyResponse{Status: "ready", Checks: map[string]string{}}
	st := h.engine.Store()
	// A store with a readiness rule of its own (a read replica's cache)
	// answers for itself: reading a scope through it would load one.
	probe := func(ctx context.Context) error { _, err := st.State(ctx, "varplane.readyz"); return err }
	if rd, ok := st.(varplane.Readier); ok {
		probe = rd.Ready
	}
	if err := probe(ctx); err != nil {
		res.Checks["store"] = varplane.ErrorMessage(err)
		h.log.LogAttrs(ctx, slog.LevelWarn, "readiness: store check failed", slog.String("error", err.Error()))
	} else {
		res.Checks["store"] = "ok"
	}
	// A store that refuses writes (a full disk, a failed fdatasync, a
	// database gone read-only) is not ready, although it still reads: a
	// balancer should send writers elsewhere. A store opened read-only
	// (store-unsupported) never writes and is ready as a replica.
	switch err := varplane.WriteReady(ctx, st); {
	case err == nil:
		res.Checks["writes"] = "ok"
	case varplane.ErrorCode(err) != varplane.CodeStoreUnsupported:
		res.Checks["writes"] = varplane.ErrorMessage(err)
		h.log.LogAttrs(ctx, slog.LevelWarn, "readiness: the store refuses writes", slog.String("error", err.Error()))
	}
	var checks []func(context.Context) error
	if rd, ok := st.(varplane.Readier); ok {
		checks = append(checks, rd.Ready)
	}
	if h.ready != nil {
		checks = append(checks, h.ready)
	}
	for _, check := range checks {
		if err := check(ctx); err != nil {
			// The rule's author chose the message; operators need it.
			res.Checks["ready"] = err.Error()
			break
		}
		res.Checks["ready"] = "ok"
	}
	status := http.StatusOK
	for _, v := range res.Checks {
		if v != "ok" {
			res.Status, status = "unavailable", http.StatusServiceUnavailable
		}
	}
	var details any
	if d, ok := st.(varplane.ReadyDetailer); ok {
		details = d.ReadyDetails()
	}
	if details == nil {
		writeJSON(w, status, res)
		return
	}
	writeJSON(w, status, map[string]any{"status": res.Status, "checks": res.Checks, st.Name(): details})
}
