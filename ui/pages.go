package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/internal/wire"
)

type scopesView struct {
	Query  string
	Status string
	Items  []varplane.ScopeSummary
	Total  int
	// Internal is varplane.InternalRoots, space-separated, for the script:
	// their commits make no banner on the list.
	Internal string
}

// handleScopes lists the scopes the token may audit (the API filters, and
// leaves out the project's own records), searched by substring and by
// status.
func (h *Handler) handleScopes(w http.ResponseWriter, r *http.Request, q *request) {
	all, err := q.api.AllScopes(r.Context(), "")
	if err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	v := scopesView{Query: strings.TrimSpace(r.URL.Query().Get("q")), Status: r.URL.Query().Get("status"), Total: len(all), Internal: internalRoots}
	for _, it := range all {
		if v.Query != "" && !strings.Contains(string(it.Scope), v.Query) {
			continue
		}
		if (v.Status == "active" && !it.Active) || (v.Status == "inactive" && it.Active) {
			continue
		}
		v.Items = append(v.Items, it)
	}
	h.render(w, r, q.s, http.StatusOK, "scopes", "Scopes", v)
}

// internalRoots is varplane.InternalRoots as the scopes page hands them to
// its script.
var internalRoots = func() string {
	roots := make([]string, len(varplane.InternalRoots))
	for i, r := range varplane.InternalRoots {
		roots[i] = string(r)
	}
	return strings.Join(roots, " ")
}()

type scopeView struct {
	Scope     varplane.Scope
	Status    varplane.Status
	Head      *control.DocumentHead
	HeadDoc   string
	Revisions []control.RevisionEntry
	Older     varplane.Generation
	Diff      *sideBySide
	From, To  varplane.Generation
	CanWrite  bool
	Policy    *control.Policy
	Draft     string
	Reason    string
	// ReadOnly, for a scope the session may read but not audit, says so
	// in place of the history (readerScope).
	ReadOnly string
}

func scopeParam(r *http.Request) (varplane.Scope, error) {
	s := r.URL.Query().Get("s")
	if r.Method == http.MethodPost {
		s = r.PostForm.Get("s")
	}
	return varplane.ParseScope(s)
}

// docPath is the control API's path of a scope's documents.
func docPath(scope varplane.Scope, rest string) string {
	return "/control/documents/" + url.PathEscape(string(scope)) + rest
}

// handleScope shows one scope: its head (who published it, who approved),
// the history as a timeline, the form that compares two generations (the
// side-by-side diff once asked for), and, for a token that may write it,
// the publish (or propose) form and the rollback and deactivate links.
func (h *Handler) handleScope(w http.ResponseWriter, r *http.Request, q *request) {
	scope, err := scopeParam(r)
	if err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	ctx := r.Context()
	v := scopeView{Scope: scope}
	if v.Status, err = q.api.Status(ctx, scope); err != nil {
		if varplane.ErrorCode(err) == varplane.CodeForbidden && h.readerScope(w, r, q, scope) {
			return
		}
		h.renderError(w, r, q.s, err)
		return
	}
	var head control.DocumentHead
	switch err := q.api.Call(ctx, http.MethodGet, docPath(scope, ""), nil, nil, &head); {
	case err == nil:
		v.Head, v.HeadDoc = &head, pretty(head.Document)
	case varplane.ErrorCode(err) != varplane.CodeNoHead:
		h.renderError(w, r, q.s, err)
		return
	}
	var page control.RevisionsPage
	rq := url.Values{"limit": {"50"}}
	if b := r.URL.Query().Get("before"); b != "" {
		rq.Set("before", b)
	}
	if err := q.api.Call(ctx, http.MethodGet, docPath(scope, "/revisions"), rq, nil, &page); err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	v.Revisions, v.Older = page.Revisions, page.Next
	v.From, v.To = genParam(r, "from"), genParam(r, "to")
	// The page computes no diff unless asked (the compare form): a diff
	// loads two documents and aligns their lines, which a page view,
	// however many, should not cost. The form offers the last two.
	asked := v.From != 0 || v.To != 0
	if v.To == 0 {
		v.To = v.Status.Generation
	}
	if v.From == 0 && v.To > 1 {
		v.From = previousActivation(v.Revisions, v.To)
	}
	if asked && v.From > 0 && v.To > 0 && v.From != v.To {
		d, err := h.diff(ctx, q.api, scope, v.From, v.To)
		if err != nil {
			h.renderError(w, r, q.s, err)
			return
		}
		v.Diff = d
	}
	v.CanWrite = h.may(ctx, q.s, varplane.KindMutate, scope)
	v.Policy = policyFor(ctx, q.api, scope)
	v.Draft = v.HeadDoc
	if v.Draft == "" {
		v.Draft = "{}"
	}
	h.render(w, r, q.s, http.StatusOK, "scope", string(scope), &v)
}

// previousActivation returns the activation before generation to in the
// page, or 0.
func previousActivation(revs []control.RevisionEntry, to varplane.Generation) varplane.Generation {
	for _, e := range revs {
		if e.Generation < to && e.Kind == varplane.EventActivated {
			return e.Generation
		}
	}
	return 0
}

func genParam(r *http.Request, name string) varplane.Generation {
	s := r.URL.Query().Get(name)
	if r.Method == http.MethodPost {
		s = r.PostForm.Get(name)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return varplane.Generation(n)
}

// revisionDoc returns generation n's document, pretty-printed ("" for a
// deactivation, which has none).
func revisionDoc(ctx context.Context, api *client.Admin, scope varplane.Scope, n varplane.Generation) (string, error) {
	var e control.RevisionEntry
	if err := api.Call(ctx, http.MethodGet, docPath(scope, "/revisions/"+strconv.FormatUint(uint64(n), 10)), nil, nil, &e); err != nil {
		return "", err
	}
	return pretty(e.Document), nil
}

// diff builds the side-by-side view of generations from and to, with the
// API's JSON Patch between them as the summary.
func (h *Handler) diff(ctx context.Context, api *client.Admin, scope varplane.Scope, from, to varplane.Generation) (*sideBySide, error) {
	left, err := revisionDoc(ctx, api, scope, from)
	if err != nil {
		return nil, err
	}
	right, err := revisionDoc(ctx, api, scope, to)
	if err != nil {
		return nil, err
	}
	var ops []control.PatchOp
	q := url.Values{"from": {strconv.FormatUint(uint64(from), 10)}, "to": {strconv.FormatUint(uint64(to), 10)}}
	if err := api.Call(ctx, http.MethodGet, docPath(scope, "/diff"), q, nil, &ops); err != nil {
		return nil, err
	}
	d := sideBySideOf(left, right)
	d.From, d.To, d.Summary = from, to, control.DiffText(ops)
	return d, nil
}

// policyFor returns the review policy covering scope (the longest), or
// nil; a failure to read the policies shows none (the API still refuses a
// direct write with change-required).
func policyFor(ctx context.Context, api *client.Admin, scope varplane.Scope) *control.Policy {
	var out struct {
		Policies []control.Policy `json:"policies"`
	}
	if err := api.Call(ctx, http.MethodGet, "/control/policies", nil, nil, &out); err != nil {
		return nil
	}
	var best *control.Policy
	for i, p := range out.Policies {
		s, ps := string(scope), string(p.Scope)
		if s == ps || strings.HasPrefix(s, ps+".") || ps == "" {
			if best == nil || len(ps) > len(best.Scope) {
				best = &out.Policies[i]
			}
		}
	}
	return best
}

// handlePublish validates, publishes (with the expected generation) or
// proposes a change, then redirects back to the scope.
func (h *Handler) handlePublish(w http.ResponseWriter, r *http.Request, q *request) {
	scope, err := scopeParam(r)
	if err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	back := h.prefix + "/scope?s=" + url.QueryEscape(string(scope))
	text, reason := r.PostForm.Get("document"), r.PostForm.Get("reason")
	keep := func(f *flash) *flash { f.Draft, f.Reason = text, reason; return f }
	expected, err := wire.GenerationText("expected", r.PostForm.Get("expected"))
	if err != nil {
		f := keep(h.failFlash(err))
		f.Field = "expected"
		h.redirect(w, r, q.s, back+"#publish", f)
		return
	}
	doc, err := wire.YAMLToJSON([]byte(text), h.opts.Limits)
	if err != nil {
		f := keep(h.failFlash(err))
		f.Field, f.Message = "document", "The document does not decode as JSON or YAML: "+varplane.ErrorMessage(err)+"."
		h.redirect(w, r, q.s, back+"#publish", f)
		return
	}
	ctx := r.Context()
	switch r.PostForm.Get("action") {
	case "validate":
		res, err := q.api.Validate(ctx, varplane.ValidateRequest{Scope: scope, Document: doc})
		if err != nil {
			h.redirect(w, r, q.s, back+"#publish", keep(h.failFlash(err)))
			return
		}
		if !res.Valid {
			h.redirect(w, r, q.s, back+"#publish", keep(&flash{Field: "document", Issues: res.Issues, Message: "The document does not pass validation; the issues are listed on the document."}))
			return
		}
		h.redirect(w, r, q.s, back+"#publish", keep(&flash{OK: true, Message: validatedMessage(res)}))
	case "propose":
		var c control.Change
		body := map[string]any{"scope": scope, "base": expected, "document": doc}
		if reason != "" {
			body["note"] = reason
		}
		if err := q.api.Call(ctx, http.MethodPost, "/control/changes", nil, body, &c); err != nil {
			h.redirect(w, r, q.s, back+"#publish", keep(h.failFlash(err)))
			return
		}
		h.redirect(w, r, q.s, h.prefix+"/change?id="+url.QueryEscape(c.ID), &flash{OK: true, Message: "Change " + c.ID + " proposed: it is " + string(c.State) + "."})
	default:
		res, err := q.api.Publish(ctx, varplane.PublishRequest{Scope: scope, Document: doc, ExpectedGeneration: expected, Reason: reason})
		if err != nil {
			h.redirect(w, r, q.s, back+"#publish", keep(h.failFlash(err)))
			return
		}
		h.redirect(w, r, q.s, back, &flash{OK: true, Message: "Published generation " + strconv.FormatUint(uint64(res.Generation), 10) + "."})
	}
}

type confirmView struct {
	Scope   varplane.Scope
	Status  varplane.Status
	To      varplane.Generation
	Diff    *sideBySide
	Cascade []varplane.CascadeEntry
	// WasActive: the deactivation would clear the scope's own head.
	WasActive bool
	Policy    *control.Policy
	// Refusal says, when the server's dry run of the write refuses it,
	// what would be refused and what to do; the page then offers no
	// button that would meet that refusal.
	Refusal string
	// Propose: the write is refused because the scope is under a review
	// policy, and the page offers to propose it as a change instead.
	Propose bool
}

// handleRollbackConfirm shows what a rollback to generation to would do:
// the diff from the head to it, and a form to confirm when the server's
// dry run of it passes (a form to propose it when the scope is under a
// review policy; what refuses it otherwise).
func (h *Handler) handleRollbackConfirm(w http.ResponseWriter, r *http.Request, q *request) {
	scope, err := scopeParam(r)
	if err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	ctx := r.Context()
	v := confirmView{Scope: scope, To: genParam(r, "to")}
	if v.Status, err = q.api.Status(ctx, scope); err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	if v.To == 0 {
		h.renderError(w, r, q.s, wire.BadRequest("choose the generation to roll back to"))
		return
	}
	if v.Status.Active {
		if v.Diff, err = h.diff(ctx, q.api, scope, v.Status.Generation, v.To); err != nil {
			h.renderError(w, r, q.s, err)
			return
		}
	} else {
		doc, err := revisionDoc(ctx, q.api, scope, v.To)
		if err != nil {
			h.renderError(w, r, q.s, err)
			return
		}
		v.Diff = sideBySideOf("", doc)
		v.Diff.To = v.To
	}
	v.Policy = policyFor(ctx, q.api, scope)
	// The server's dry run of the very rollback the form sends: the
	// button is offered only when the write would pass.
	_, err = q.api.Rollback(ctx, varplane.RollbackRequest{Scope: scope, ExpectedGeneration: v.Status.Generation, ToGeneration: &v.To, DryRun: true})
	v.Propose = varplane.ErrorCode(err) == varplane.CodeChangeRequired
	if err != nil && !v.Propose {
		v.Refusal = refusal(err, scope)
	}
	h.render(w, r, q.s, http.StatusOK, "rollback", "Roll back "+string(scope), &v)
}

// handleRollback rolls back with the var API (expected generation from the
// confirmation); under a review policy it proposes the rollback as a
// change instead.
func (h *Handler) handleRollback(w http.ResponseWriter, r *http.Request, q *request) {
	scope, err := scopeParam(r)
	if err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	back := h.prefix + "/scope?s=" + url.QueryEscape(string(scope))
	to := genParam(r, "to")
	expected, err := wire.GenerationText("expected", r.PostForm.Get("expected"))
	if err != nil {
		h.redirect(w, r, q.s, back, h.pageFlash(err))
		return
	}
	ctx := r.Context()
	reason := r.PostForm.Get("reason")
	if r.PostForm.Get("action") == "propose" {
		var c control.Change
		body := map[string]any{"revision": to}
		if reason != "" {
			body["note"] = reason
		}
		if err := q.api.Call(ctx, http.MethodPost, docPath(scope, ":rollback"), nil, body, &c); err != nil {
			h.redirect(w, r, q.s, back, h.pageFlash(err))
			return
		}
		h.redirect(w, r, q.s, h.prefix+"/change?id="+url.QueryEscape(c.ID), &flash{OK: true, Message: "Rollback proposed as change " + c.ID + "."})
		return
	}
	res, err := q.api.Rollback(ctx, varplane.RollbackRequest{Scope: scope, ExpectedGeneration: expected, ToGeneration: &to, Reason: reason})
	if err != nil {
		h.redirect(w, r, q.s, back, h.pageFlash(err))
		return
	}
	h.redirect(w, r, q.s, back, &flash{OK: true, Message: "Rolled back to generation " + strconv.FormatUint(uint64(to), 10) + ": the head is now generation " + strconv.FormatUint(uint64(res.Generation), 10) + "."})
}

// handleDeactivateConfirm lists every active scope the cascade would
// clear (the scope and its active descendants), as the server's dry run of
// the deactivation finds them, before the confirmation; or what would
// refuse it, and then no button.
func (h *Handler) handleDeactivateConfirm(w http.ResponseWriter, r *http.Request, q *request) {
	scope, err := scopeParam(r)
	if err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	ctx := r.Context()
	v := confirmView{Scope: scope}
	if v.Status, err = q.api.Status(ctx, scope); err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	// The server's dry run of the very deactivation the form sends: what
	// it would clear, or what refuses it (a scope of the cascade under a
	// review policy or owned, the token's rights).
	plan, err := q.api.Deactivate(ctx, varplane.DeactivateRequest{Scope: scope, ExpectedGeneration: v.Status.Generation, DryRun: true})
	if err != nil {
		v.Refusal = refusal(err, scope)
	}
	v.Cascade, v.WasActive = plan.Cascade, plan.WasActive
	h.render(w, r, q.s, http.StatusOK, "deactivate", "Deactivate "+string(scope), &v)
}

func (h *Handler) handleDeactivate(w http.ResponseWriter, r *http.Request, q *request) {
	scope, err := scopeParam(r)
	if err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	back := h.prefix + "/scope?s=" + url.QueryEscape(string(scope))
	expected, err := wire.GenerationText("expected", r.PostForm.Get("expected"))
	if err != nil {
		h.redirect(w, r, q.s, back, h.pageFlash(err))
		return
	}
	res, err := q.api.Deactivate(r.Context(), varplane.DeactivateRequest{Scope: scope, ExpectedGeneration: expected, Reason: r.PostForm.Get("reason")})
	if err != nil {
		h.redirect(w, r, q.s, back, h.pageFlash(err))
		return
	}
	h.redirect(w, r, q.s, back, &flash{OK: true, Message: "Deactivated at generation " + strconv.FormatUint(uint64(res.Generation), 10) + " (" + strconv.Itoa(len(res.Cascade)) + " descendants with it)."})
}

type changesView struct {
	State   string
	Scope   string
	Changes []control.Change
}

func (h *Handler) handleChanges(w http.ResponseWriter, r *http.Request, q *request) {
	v := changesView{State: r.URL.Query().Get("state"), Scope: r.URL.Query().Get("scope")}
	if v.State == "" {
		v.State = "open"
	}
	cq := url.Values{}
	if v.State != "all" {
		cq.Set("state", v.State)
	}
	if v.Scope != "" {
		cq.Set("scope", v.Scope)
	}
	var out struct {
		Changes []control.Change `json:"changes"`
	}
	if err := q.api.Call(r.Context(), http.MethodGet, "/control/changes", cq, nil, &out); err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	v.Changes = out.Changes
	h.render(w, r, q.s, http.StatusOK, "changes", "Changes", v)
}

type changeView struct {
	C        control.Change
	Doc      string
	Diff     *sideBySide
	CanWrite bool
	// Reports are the canary window's reports (nil without a window);
	// ReportsError says in words why they could not be read.
	Reports      *client.ChangeReports
	ReportsError string
	// Poll is how often (milliseconds) the script refreshes the page's
	// live regions while the change is open: reports and transitions are
	// not on the watch stream. 0 for a closed change.
	Poll int64
}

func (h *Handler) handleChange(w http.ResponseWriter, r *http.Request, q *request) {
	id := r.URL.Query().Get("id")
	var v changeView
	if err := q.api.Call(r.Context(), http.MethodGet, "/control/changes/"+url.PathEscape(id), nil, nil, &v.C); err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	v.Doc = pretty(v.C.Document)
	if v.C.Base > 0 {
		if left, err := revisionDoc(r.Context(), q.api, v.C.Scope, v.C.Base); err == nil {
			v.Diff = sideBySideOf(left, v.Doc)
			v.Diff.From = v.C.Base
		}
	}
	if v.Diff == nil {
		v.Diff = sideBySideOf("", v.Doc)
	}
	v.CanWrite = h.may(r.Context(), q.s, varplane.KindMutate, v.C.Scope)
	if v.C.Canary != nil {
		if rep, err := q.api.ChangeReports(r.Context(), v.C.ID); err != nil {
			v.ReportsError = Sentence(err)
		} else {
			v.Reports = &rep
		}
	}
	if v.C.State.Open() {
		v.Poll = h.opts.PollInterval.Milliseconds()
	}
	h.render(w, r, q.s, http.StatusOK, "change", "Change "+id, &v)
}

// handleTransition approves, rejects, withdraws or publishes a change.
func (h *Handler) handleTransition(w http.ResponseWriter, r *http.Request, q *request) {
	id, action := r.PostForm.Get("id"), r.PostForm.Get("action")
	back := h.prefix + "/change?id=" + url.QueryEscape(id)
	switch action {
	case "approve", "reject", "withdraw", "publish":
	default:
		h.redirect(w, r, q.s, back, &flash{Message: "Unknown action."})
		return
	}
	body := map[string]any{}
	if n := r.PostForm.Get("note"); n != "" && action != "publish" {
		body["note"] = n
	}
	var c control.Change
	if err := q.api.Call(r.Context(), http.MethodPost, "/control/changes/"+url.PathEscape(id)+":"+action, nil, body, &c); err != nil {
		h.redirect(w, r, q.s, back, h.pageFlash(err))
		return
	}
	h.redirect(w, r, q.s, back, &flash{OK: true, Message: "Change " + id + " is " + string(c.State) + "."})
}

// handleLive hands the browser's live request to the API's watch route
// with the session's token as its bearer: the stream, its authorization
// and its caps are the API's own. Without a scope it watches everything
// (all=1), which a token narrowed to prefixes is refused.
func (h *Handler) handleLive(w http.ResponseWriter, r *http.Request, q *request) {
	target := q.api.URL("/watch")
	switch scope := varplane.Scope(r.URL.Query().Get("s")); {
	case scope == "":
		query, ok := h.liveEverything(r.Context(), q)
		if !ok {
			// Nothing the token may follow: the script stops asking.
			w.WriteHeader(http.StatusNoContent)
			return
		}
		target += "?" + query
	case scope.IsGroup():
		target += "?group=" + url.QueryEscape(string(scope))
	default:
		target += "?key=" + url.QueryEscape(string(scope))
	}
	u, err := url.Parse(target)
	if err != nil {
		h.renderError(w, r, q.s, err)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL = &url.URL{Path: u.Path, RawQuery: u.RawQuery}
	r2.RequestURI = u.RequestURI()
	r2.Header = http.Header{"Accept": {"text/event-stream"}}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		r2.Header.Set("Last-Event-ID", id)
	}
	wire.SetBearer(r2.Header, q.s.token)
	h.opts.API.ServeHTTP(w, r2)
}

// pretty indents a JSON document for reading ("" for none).
func pretty(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	return string(jsontext.Indent(raw))
}
