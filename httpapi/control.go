package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/internal/wire"
)

// controlRoutes registers the control API (Options.Control) under prefix
// ({base}/control); docs/api.md has the table. Reads of documents, changes
// and policies are authorized as audit on their scope, writes as mutate on
// the scope they change; the routes of the instances (instances.go) as
// identify plus read on the scopes they concern.
//
//	GET  /documents/{scope}                            the head, who published and approved it
//	GET  /documents/{scope}/revisions?before=&limit=   newest first (20, at most 200)
//	GET  /documents/{scope}/revisions/{n}              410 revision-reclaimed, 404 never existed
//	GET  /documents/{scope}/revisions/{n}/propagation  {generation, installed, live}
//	GET  /documents/{scope}/diff?from=&to=&format=     RFC 6902 patch, or text
//	POST /documents/{scope}:rollback                   {revision, note} → 201 a change
//	POST /changes                                      {scope, base, document, schemaId?, note?} → 201
//	GET  /changes?scope=&state=                        newest first; state "open" for every open one
//	GET  /changes/{id}
//	GET  /changes/{id}/reports                         the canary window's reports, doubts, silent instances
//	POST /changes/{id}:approve|:reject|:withdraw|:publish   {note?}
//	POST /changes/{id}:rebase                          {base}
//	POST /changes/{id}:canary                          {duration, minInstances}
//	POST /changes/{id}:rollout                         {strategy, gates?, note?}: rollout.go
//	GET  /policies; PUT|DELETE /policies/{scope}       {approvals, roles?, canary?}
//	PUT  /instances/{id}/status                        a consumer's heartbeat
//	GET  /windows; GET /windows/{window}/candidate     the open canary windows, a candidate
//	PUT  /windows/{window}/reports/{id}                a consumer's canary report
func (h *Handler) controlRoutes(prefix string) {
	h.handleErr("GET "+prefix+"/documents/{scope}", loud, h.handleControlHead)
	h.handleErr("POST "+prefix+"/documents/{scope}", loud, h.handleControlRollback)
	h.handleErr("GET "+prefix+"/documents/{scope}/revisions", loud, h.handleControlRevisions)
	h.handleErr("GET "+prefix+"/documents/{scope}/revisions/{n}", loud, h.handleControlRevision)
	h.handleErr("GET "+prefix+"/documents/{scope}/revisions/{n}/propagation", loud, h.handleControlPropagation)
	h.handleErr("GET "+prefix+"/documents/{scope}/diff", loud, h.handleControlDiff)
	h.handleErr("GET "+prefix+"/changes", loud, h.handleControlChanges)
	h.handleErr("POST "+prefix+"/changes", loud, h.handleControlPropose)
	h.handleErr("GET "+prefix+"/changes/{id}", loud, h.handleControlChange)
	h.handleErr("POST "+prefix+"/changes/{id}", loud, h.handleControlTransition)
	h.handleErr("GET "+prefix+"/changes/{id}/reports", loud, h.handleControlReports)
	h.handleErr("GET "+prefix+"/policies", loud, h.handleControlPolicies)
	h.handleErr("PUT "+prefix+"/policies/{scope}", loud, h.handleControlPutPolicy)
	h.handleErr("DELETE "+prefix+"/policies/{scope}", loud, h.handleControlDeletePolicy)
	h.handleErr("PUT "+prefix+"/instances/{id}/status", quiet, h.handleFileStatus)
	h.handleErr("GET "+prefix+"/windows", quiet, h.handleWindows)
	h.handleErr("GET "+prefix+"/windows/{window}/candidate", quiet, h.handleCandidate)
	h.handleErr("PUT "+prefix+"/windows/{window}/reports/{id}", quiet, h.handleFileReport)
	h.rolloutRoutes(prefix)
}

// identify authenticates the caller (kind identify, no scope): a list
// route asks it before anything is read, so that an empty list is never
// the answer to an unauthenticated request.
func (h *Handler) identify(r *http.Request) (varplane.Identity, error) {
	return h.authorize(r, varplane.KindIdentify, "", false)
}

// mayAudit reports whether the caller may audit scope (its subtree with
// subtree): a denial is false, an authorizer that fails is an error, so
// that a filtered list fails closed.
func (h *Handler) mayAudit(r *http.Request, scope varplane.Scope, subtree bool) (bool, error) {
	return allowed(h.authorize(r, varplane.KindAudit, scope, subtree))
}

// allowed turns an authorization into a filter's verdict: a denial
// (forbidden) is false, any other failure an error.
func allowed(_ varplane.Identity, err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case varplane.ErrorCode(err) == varplane.CodeForbidden:
		return false, nil
	}
	return false, err
}

// readBody checks the media type, reads a bounded body and strictly decodes
// it into dst.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, dst any) error {
	return h.readBodyMax(w, r, dst, h.limits.MaxBodyBytes)
}

// readBodyMax is readBody with a body of at most max bytes (and never more
// than the handler's limit).
func (h *Handler) readBodyMax(w http.ResponseWriter, r *http.Request, dst any, max int64) error {
	if err := wire.CheckContentType(r, "application/json"); err != nil {
		return err
	}
	b, err := wire.ReadBody(w, r, min(h.limits.MaxBodyBytes, max))
	if err != nil {
		return err
	}
	return wire.DecodeStrict(b, dst, h.limits)
}

// auditedScopeParam reads a list's optional scope parameter from q and
// authorizes audit on it ("" when absent: the list is filtered by what the
// caller may audit instead).
func (h *Handler) auditedScopeParam(r *http.Request, q map[string]string) (varplane.Scope, error) {
	s, ok := q["scope"]
	if !ok {
		return "", nil
	}
	scope, err := wire.ScopeField("scope", s)
	if err != nil {
		return "", err
	}
	if _, err := h.authorize(r, varplane.KindAudit, scope, false); err != nil {
		return "", err
	}
	return scope, nil
}

// pathScope reads the {scope} path value (unescaped: a scope holding "/"
// is sent as %2F), less suffix when given.
func pathScope(r *http.Request, suffix string) (varplane.Scope, error) {
	s := r.PathValue("scope")
	if suffix != "" {
		var ok bool
		if s, ok = strings.CutSuffix(s, suffix); !ok {
			return "", varplane.Errorf(varplane.CodeNotFound, "no control route %s", r.URL.Path)
		}
	}
	return wire.ScopeField("scope", s)
}

// auditPathScope reads the {scope} path value and authorizes an audit of it.
func (h *Handler) auditPathScope(r *http.Request) (varplane.Scope, error) {
	scope, err := pathScope(r, "")
	if err == nil {
		_, err = h.authorize(r, varplane.KindAudit, scope, false)
	}
	return scope, err
}

// auditGeneration is auditPathScope plus the {n} path value.
func (h *Handler) auditGeneration(r *http.Request) (varplane.Scope, varplane.Generation, error) {
	scope, err := h.auditPathScope(r)
	if err != nil {
		return "", 0, err
	}
	n, err := wire.GenerationText("generation", r.PathValue("n"))
	return scope, n, err
}

// handleControlHead serves GET {base}/control/documents/{scope}.
func (h *Handler) handleControlHead(w http.ResponseWriter, r *http.Request) error {
	scope, err := h.auditPathScope(r)
	if err != nil {
		return err
	}
	head, err := h.ctl.Head(r.Context(), scope)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, head)
	return nil
}

// handleControlRevisions serves GET
// {base}/control/documents/{scope}/revisions?before=&limit=.
func (h *Handler) handleControlRevisions(w http.ResponseWriter, r *http.Request) error {
	scope, err := h.auditPathScope(r)
	if err != nil {
		return err
	}
	q, err := wire.SingleParams(r.URL.RawQuery, "before", "limit")
	if err != nil {
		return err
	}
	var before varplane.Generation
	if s, ok := q["before"]; ok {
		if before, err = wire.GenerationText("before", s); err != nil {
			return err
		}
	}
	limit := 0
	if s, ok := q["limit"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return wire.BadRequest("limit must be a positive integer")
		}
		limit = n
	}
	page, err := h.ctl.Revisions(r.Context(), scope, before, limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// handleControlRevision serves GET
// {base}/control/documents/{scope}/revisions/{n}.
func (h *Handler) handleControlRevision(w http.ResponseWriter, r *http.Request) error {
	scope, n, err := h.auditGeneration(r)
	if err != nil {
		return err
	}
	e, err := h.ctl.Revision(r.Context(), scope, n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}

// handleControlPropagation serves GET
// {base}/control/documents/{scope}/revisions/{n}/propagation.
func (h *Handler) handleControlPropagation(w http.ResponseWriter, r *http.Request) error {
	scope, n, err := h.auditGeneration(r)
	if err != nil {
		return err
	}
	p, err := h.ctl.Propagation(r.Context(), scope, n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// handleControlDiff serves GET
// {base}/control/documents/{scope}/diff?from=&to=&format=: an RFC 6902
// patch, or its text form with format=text.
func (h *Handler) handleControlDiff(w http.ResponseWriter, r *http.Request) error {
	scope, err := h.auditPathScope(r)
	if err != nil {
		return err
	}
	q, err := wire.SingleParams(r.URL.RawQuery, "from", "to", "format")
	if err != nil {
		return err
	}
	from, err := wire.GenerationText("from", q["from"])
	if err != nil {
		return err
	}
	var to varplane.Generation
	if s, ok := q["to"]; ok {
		if to, err = wire.GenerationText("to", s); err != nil {
			return err
		}
	}
	format := q["format"]
	if format != "" && format != "json-patch" && format != "text" {
		return wire.BadRequest("format must be json-patch or text")
	}
	ops, err := h.ctl.Diff(r.Context(), scope, from, to, format == "text")
	if err != nil && r.Context().Err() != nil {
		return nil // the client left: nobody to answer
	}
	if err != nil {
		return err
	}
	if format == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(control.DiffText(ops)))
		return nil
	}
	b, err := jsontext.Marshal(ops)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json-patch+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
	return nil
}

type controlRollbackBody struct {
	Revision json.RawMessage `json:"revision"`
	Note     *string         `json:"note"`
}

// handleControlRollback serves POST {base}/control/documents/{scope}:rollback.
// It proposes a change (mutate) whose document is a past generation's and
// answers it, so it also needs audit on the scope: a token that may only
// mutate never reads a past body through it.
func (h *Handler) handleControlRollback(w http.ResponseWriter, r *http.Request) error {
	scope, err := pathScope(r, ":rollback")
	if err != nil {
		return err
	}
	id, err := h.authorize(r, varplane.KindMutate, scope, false)
	if err != nil {
		return err
	}
	if _, err := h.authorize(r, varplane.KindAudit, scope, false); err != nil {
		return err
	}
	var b controlRollbackBody
	if err := h.readBody(w, r, &b); err != nil {
		return err
	}
	n, err := wire.RequiredGeneration("revision", b.Revision)
	if err != nil {
		return err
	}
	c, err := h.ctl.Rollback(r.Context(), id, scope, n, wire.Optional(b.Note))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, c)
	return nil
}

type proposeBody struct {
	Scope    *string         `json:"scope"`
	Base     json.RawMessage `json:"base"`
	Document json.RawMessage `json:"document"`
	SchemaID *string         `json:"schemaId"`
	Note     *string         `json:"note"`
}

// handleControlPropose serves POST {base}/control/changes.
func (h *Handler) handleControlPropose(w http.ResponseWriter, r *http.Request) error {
	var b proposeBody
	if err := h.readBody(w, r, &b); err != nil {
		return err
	}
	scope, err := wire.RequiredScope("scope", b.Scope)
	if err != nil {
		return err
	}
	base, err := wire.RequiredGeneration("base", b.Base)
	if err != nil {
		return err
	}
	if wire.IsNull(b.Document) {
		return wire.BadRequest("document is required")
	}
	id, err := h.authorize(r, varplane.KindMutate, scope, false)
	if err != nil {
		return err
	}
	c, err := h.ctl.Propose(r.Context(), id, control.ProposeRequest{Scope: scope, Base: base, Document: b.Document, SchemaID: wire.Optional(b.SchemaID), Note: wire.Optional(b.Note)})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, c)
	return nil
}

// handleControlChanges serves GET {base}/control/changes?scope=&state=.
// Without a scope, each change is shown only to who may audit its scope.
func (h *Handler) handleControlChanges(w http.ResponseWriter, r *http.Request) error {
	if _, err := h.identify(r); err != nil {
		return err
	}
	q, err := wire.SingleParams(r.URL.RawQuery, "scope", "state")
	if err != nil {
		return err
	}
	var req control.ListRequest
	if req.Scope, err = h.auditedScopeParam(r, q); err != nil {
		return err
	}
	req.State = q["state"]
	if req.Scope == "" {
		// Asked before the service reads a change's candidate: a change
		// the caller may not see costs its record only.
		req.Visible = func(scope varplane.Scope) (bool, error) { return h.mayAudit(r, scope, false) }
	}
	// Streamed one candidate at a time (a caller who may audit many open
	// changes of large documents once had them all held twice).
	return wire.StreamJSON(w, []byte(`{"changes":[`), "]}", func(emit func(any) error) error {
		return h.ctl.ListEach(r.Context(), req, func(c *control.Change) error { return emit(c) })
	})
}

// handleControlChange serves GET {base}/control/changes/{id}.
func (h *Handler) handleControlChange(w http.ResponseWriter, r *http.Request) error {
	c, err := h.change(r)
	if err == nil {
		_, err = h.authorize(r, varplane.KindAudit, c.Scope, false)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

// change loads the change the path's {id} names, once the caller is
// authenticated: an anonymous or forged request is refused before it can
// learn whether a change exists (the route then authorizes on its scope).
func (h *Handler) change(r *http.Request) (*control.Change, error) {
	if _, err := h.identify(r); err != nil {
		return nil, err
	}
	return h.ctl.Get(r.Context(), r.PathValue("id"))
}

// handleControlReports serves GET {base}/control/changes/{id}/reports.
func (h *Handler) handleControlReports(w http.ResponseWriter, r *http.Request) error {
	c, err := h.change(r)
	if err == nil {
		_, err = h.authorize(r, varplane.KindAudit, c.Scope, false)
	}
	var out *control.WindowReports
	if err == nil {
		out, err = h.ctl.WindowReports(r.Context(), c)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

type transitionBody struct {
	Note         *string         `json:"note"`
	Base         json.RawMessage `json:"base"`
	Duration     *string         `json:"duration"`
	MinInstances *int            `json:"minInstances"`
}

// handleControlTransition serves POST {base}/control/changes/{id}:{op}: it
// authorizes mutate on the change's scope, as the identity that makes the
// transition. The change is answered without its document to a caller that
// may not audit the scope: the candidate (a past body, for a rollback) is
// shown only to who may read the scope's history.
func (h *Handler) handleControlTransition(w http.ResponseWriter, r *http.Request) error {
	idop := r.PathValue("id")
	i := strings.LastIndexByte(idop, ':')
	if i < 0 {
		return varplane.Errorf(varplane.CodeMethodNotAllowed, "POST a transition: /changes/{id}:approve, :reject, :withdraw, :publish, :rebase or :canary")
	}
	changeID, op := idop[:i], idop[i+1:]
	ctx := r.Context()
	if _, err := h.identify(r); err != nil {
		return err
	}
	c, err := h.ctl.Get(ctx, changeID)
	if err != nil {
		return err
	}
	by, err := h.authorize(r, varplane.KindMutate, c.Scope, false)
	if err != nil {
		return err
	}
	if op == "rollout" {
		return h.startRollout(w, r, by, changeID)
	}
	var b transitionBody
	if r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
		if err := h.readBody(w, r, &b); err != nil {
			return err
		}
	}
	note := wire.Optional(b.Note)
	switch op {
	case "approve":
		c, err = h.ctl.Approve(ctx, by, changeID, note)
	case "reject":
		c, err = h.ctl.Reject(ctx, by, changeID, note)
	case "withdraw":
		c, err = h.ctl.Withdraw(ctx, by, changeID, note)
	case "publish":
		c, err = h.ctl.Publish(ctx, by, changeID)
	case "rebase":
		var base varplane.Generation
		if base, err = wire.RequiredGeneration("base", b.Base); err == nil {
			c, err = h.ctl.Rebase(ctx, by, changeID, base)
		}
	case "canary":
		var d time.Duration
		if b.Duration == nil || b.MinInstances == nil {
			err = wire.BadRequest("a canary window needs duration and minInstances")
		} else if d, err = time.ParseDuration(*b.Duration); err != nil {
			err = wire.BadRequest("duration must be a Go duration such as 10m")
		} else {
			c, err = h.ctl.OpenCanary(ctx, by, changeID, d, *b.MinInstances)
		}
	default:
		err = varplane.Errorf(varplane.CodeNotFound, "no transition %q (approve, reject, withdraw, publish, rebase, canary, rollout)", op)
	}
	if err != nil {
		return err
	}
	audit, err := h.mayAudit(r, c.Scope, false)
	if err != nil {
		return err
	}
	if !audit {
		shown := *c
		shown.Document = nil
		c = &shown
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

// handleControlPolicies serves GET {base}/control/policies: the policies
// whose subtree the caller may audit.
func (h *Handler) handleControlPolicies(w http.ResponseWriter, r *http.Request) error {
	if _, err := h.identify(r); err != nil {
		return err
	}
	list, err := h.ctl.Policies(r.Context())
	if err != nil {
		return err
	}
	out := list[:0]
	for _, p := range list {
		ok, err := h.mayAudit(r, p.Scope, true)
		if err != nil {
			return err
		}
		if ok {
			out = append(out, p)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"policies": out})
	return nil
}

type policyBody struct {
	Approvals *int     `json:"approvals"`
	Roles     []string `json:"roles"`
	Canary    *bool    `json:"canary"`
}

// handleControlPutPolicy serves PUT {base}/control/policies/{scope}.
func (h *Handler) handleControlPutPolicy(w http.ResponseWriter, r *http.Request) error {
	scope, err := pathScope(r, "")
	if err != nil {
		return err
	}
	by, err := h.authorize(r, varplane.KindMutate, scope, true)
	if err != nil {
		return err
	}
	var b policyBody
	if err := h.readBody(w, r, &b); err != nil {
		return err
	}
	if b.Approvals == nil {
		return wire.BadRequest("approvals is required")
	}
	p := control.Policy{Scope: scope, Approvals: *b.Approvals, Roles: b.Roles, Canary: b.Canary != nil && *b.Canary}
	p, err = h.ctl.PutPolicy(r.Context(), by, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// handleControlDeletePolicy serves DELETE {base}/control/policies/{scope}.
func (h *Handler) handleControlDeletePolicy(w http.ResponseWriter, r *http.Request) error {
	scope, err := pathScope(r, "")
	if err != nil {
		return err
	}
	by, err := h.authorize(r, varplane.KindMutate, scope, true)
	if err == nil {
		err = h.ctl.DeletePolicy(r.Context(), by, scope)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
