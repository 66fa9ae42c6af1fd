package control

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// HandlerOptions configure Handler.
type HandlerOptions struct {
	// Authorizer decides every request (varplane.AllowAll when nil): reads
	// of documents, changes and policies are audit on their scope, every
	// write is mutate on the scope it changes.
	Authorizer varplane.Authorizer
	// Limits bound request bodies (MaxBodyBytes) and the documents in them.
	Limits varplane.Limits
	// Logger receives failed requests (status >= 500).
	Logger *slog.Logger
	// TrustedOrigins are origins (https://console.example) whose pages may
	// send writes across origins; every other cross-origin write is 403,
	// as on the var API.
	TrustedOrigins []string
}

// Handler serves the control API over svc; mount it with its paths below
// the prefix stripped (http.StripPrefix(base+"/control", h)):
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
//	GET  /policies; PUT|DELETE /policies/{scope}       {approvals, roles?, canary?}
//	PUT  /instances/{id}/status                        a consumer's heartbeat (ingest.go)
//	GET  /windows; GET /windows/{window}/candidate     the open canary windows, a candidate
//	PUT  /windows/{window}/reports/{id}                a consumer's canary report
func Handler(svc *Service, opts HandlerOptions) http.Handler {
	if opts.Authorizer == nil {
		opts.Authorizer = varplane.AllowAll
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Limits = opts.Limits.WithDefaults()
	cross := http.NewCrossOriginProtection()
	for _, o := range opts.TrustedOrigins {
		if err := cross.AddTrustedOrigin(o); err != nil {
			opts.Logger.Warn("trusted origin ignored", "origin", o, "error", err)
		}
	}
	h := &handler{svc: svc, opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("/documents/{scope}", h.methods(map[string]http.HandlerFunc{"GET": h.handleHead, "POST": h.handleRollback}))
	mux.HandleFunc("/documents/{scope}/revisions", h.methods(map[string]http.HandlerFunc{"GET": h.handleRevisions}))
	mux.HandleFunc("/documents/{scope}/revisions/{n}", h.methods(map[string]http.HandlerFunc{"GET": h.handleRevision}))
	mux.HandleFunc("/documents/{scope}/revisions/{n}/propagation", h.methods(map[string]http.HandlerFunc{"GET": h.handlePropagation}))
	mux.HandleFunc("/documents/{scope}/diff", h.methods(map[string]http.HandlerFunc{"GET": h.handleDiff}))
	mux.HandleFunc("/changes", h.methods(map[string]http.HandlerFunc{"GET": h.handleChanges, "POST": h.handlePropose}))
	mux.HandleFunc("/changes/{id}", h.methods(map[string]http.HandlerFunc{"GET": h.handleChange, "POST": h.handleTransition}))
	mux.HandleFunc("/changes/{id}/reports", h.methods(map[string]http.HandlerFunc{"GET": h.handleReports}))
	mux.HandleFunc("/policies", h.methods(map[string]http.HandlerFunc{"GET": h.handlePolicies}))
	mux.HandleFunc("/policies/{scope}", h.methods(map[string]http.HandlerFunc{"PUT": h.handlePutPolicy, "DELETE": h.handleDeletePolicy}))
	mux.HandleFunc("/instances/{id}/status", h.methods(map[string]http.HandlerFunc{"PUT": h.handleFileStatus}))
	mux.HandleFunc("/windows", h.methods(map[string]http.HandlerFunc{"GET": h.handleWindows}))
	mux.HandleFunc("/windows/{window}/candidate", h.methods(map[string]http.HandlerFunc{"GET": h.handleCandidate}))
	mux.HandleFunc("/windows/{window}/reports/{id}", h.methods(map[string]http.HandlerFunc{"PUT": h.handleFileReport}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, varplane.Errorf(varplane.CodeNotFound, "no control route %s", r.URL.Path))
	})
	// Cross-origin writes are refused before anything of them is read
	// (safe methods pass the check).
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := cross.Check(r); err != nil {
			h.fail(w, r, varplane.Errorf(varplane.CodeForbidden, "cross-origin writes are refused"))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

type handler struct {
	svc  *Service
	opts HandlerOptions
}

// methods routes by method, answering 405 method-not-allowed in the one
// error shape for any other.
func (h *handler) methods(m map[string]http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if f, ok := m[r.Method]; ok {
			f(w, r)
			return
		}
		allow := make([]string, 0, len(m))
		for k := range m {
			allow = append(allow, k)
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		h.fail(w, r, varplane.Errorf(varplane.CodeMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path))
	}
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	wire.WriteError(w, r, h.opts.Logger, err)
}

func (h *handler) authorize(r *http.Request, kind varplane.Kind, scope varplane.Scope, subtree bool) (varplane.Identity, error) {
	return varplane.Authorize(r.Context(), h.opts.Authorizer, varplane.Access{Kind: kind, Scope: scope, Subtree: subtree, Token: wire.RequestBearer(r)})
}

// scopeParam reads the {scope} path value (unescaped: a scope holding "/"
// is sent as %2F), less suffix when given.
func scopeParam(r *http.Request, suffix string) (varplane.Scope, error) {
	s := r.PathValue("scope")
	if suffix != "" {
		var ok bool
		if s, ok = strings.CutSuffix(s, suffix); !ok {
			return "", varplane.Errorf(varplane.CodeNotFound, "no control route %s", r.URL.Path)
		}
	}
	return wire.ScopeField("scope", s)
}

// readDocument authorizes an audit read of the {scope} route.
func (h *handler) readScope(w http.ResponseWriter, r *http.Request) (varplane.Scope, bool) {
	scope, err := scopeParam(r, "")
	if err == nil {
		_, err = h.authorize(r, varplane.KindAudit, scope, false)
	}
	if err != nil {
		h.fail(w, r, err)
		return "", false
	}
	return scope, true
}

func (h *handler) handleHead(w http.ResponseWriter, r *http.Request) {
	scope, ok := h.readScope(w, r)
	if !ok {
		return
	}
	head, err := h.svc.Head(r.Context(), scope)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, head)
}

func (h *handler) handleRevisions(w http.ResponseWriter, r *http.Request) {
	scope, ok := h.readScope(w, r)
	if !ok {
		return
	}
	q, err := wire.SingleParams(r.URL.RawQuery, "before", "limit")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var before varplane.Generation
	if s, ok := q["before"]; ok {
		if before, err = wire.GenerationText("before", s); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	limit := 0
	if s, ok := q["limit"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			h.fail(w, r, wire.BadRequest("limit must be a positive integer"))
			return
		}
		limit = n
	}
	page, err := h.svc.Revisions(r.Context(), scope, before, limit)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, page)
}

func generationParam(r *http.Request) (varplane.Generation, error) {
	return wire.GenerationText("generation", r.PathValue("n"))
}

// readGeneration is readScope plus the {n} path parameter.
func (h *handler) readGeneration(w http.ResponseWriter, r *http.Request) (varplane.Scope, varplane.Generation, bool) {
	scope, ok := h.readScope(w, r)
	if !ok {
		return "", 0, false
	}
	n, err := generationParam(r)
	if err != nil {
		h.fail(w, r, err)
		return "", 0, false
	}
	return scope, n, true
}

func (h *handler) handleRevision(w http.ResponseWriter, r *http.Request) {
	scope, n, ok := h.readGeneration(w, r)
	if !ok {
		return
	}
	e, err := h.svc.Revision(r.Context(), scope, n)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, e)
}

func (h *handler) handlePropagation(w http.ResponseWriter, r *http.Request) {
	scope, n, ok := h.readGeneration(w, r)
	if !ok {
		return
	}
	p, err := h.svc.Propagation(r.Context(), scope, n)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, p)
}

func (h *handler) handleDiff(w http.ResponseWriter, r *http.Request) {
	scope, ok := h.readScope(w, r)
	if !ok {
		return
	}
	q, err := wire.SingleParams(r.URL.RawQuery, "from", "to", "format")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	from, err := wire.GenerationText("from", q["from"])
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var to varplane.Generation
	if s, ok := q["to"]; ok {
		if to, err = wire.GenerationText("to", s); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	format := q["format"]
	if format != "" && format != "json-patch" && format != "text" {
		h.fail(w, r, wire.BadRequest("format must be json-patch or text"))
		return
	}
	ops, err := h.svc.Diff(r.Context(), scope, from, to)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if format == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(DiffText(ops)))
		return
	}
	w.Header().Set("Content-Type", "application/json-patch+json")
	b, err := json.Marshal(ops)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

// body reads and strictly decodes a JSON request body into dst.
func (h *handler) body(w http.ResponseWriter, r *http.Request, dst any) bool {
	if err := wire.CheckContentType(r, "application/json"); err != nil {
		h.fail(w, r, err)
		return false
	}
	b, err := wire.ReadBody(w, r, h.opts.Limits.MaxBodyBytes)
	if err == nil {
		err = wire.DecodeStrict(b, dst, h.opts.Limits)
	}
	if err != nil {
		h.fail(w, r, err)
		return false
	}
	return true
}

type rollbackBody struct {
	Revision json.RawMessage `json:"revision"`
	Note     *string         `json:"note"`
}

func (h *handler) handleRollback(w http.ResponseWriter, r *http.Request) {
	scope, err := scopeParam(r, ":rollback")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	id, err := h.authorize(r, varplane.KindMutate, scope, false)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var b rollbackBody
	if !h.body(w, r, &b) {
		return
	}
	n, err := wire.RequiredGeneration("revision", b.Revision)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	c, err := h.svc.Rollback(r.Context(), id, scope, n, wire.Optional(b.Note))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusCreated, c)
}

type proposeBody struct {
	Scope    *string         `json:"scope"`
	Base     json.RawMessage `json:"base"`
	Document json.RawMessage `json:"document"`
	SchemaID *string         `json:"schemaId"`
	Note     *string         `json:"note"`
}

func (h *handler) handlePropose(w http.ResponseWriter, r *http.Request) {
	var b proposeBody
	if !h.body(w, r, &b) {
		return
	}
	scope, err := wire.RequiredScope("scope", b.Scope)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	base, err := wire.RequiredGeneration("base", b.Base)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if wire.IsNull(b.Document) {
		h.fail(w, r, wire.BadRequest("document is required"))
		return
	}
	id, err := h.authorize(r, varplane.KindMutate, scope, false)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	c, err := h.svc.Propose(r.Context(), id, ProposeRequest{Scope: scope, Base: base, Document: b.Document, SchemaID: wire.Optional(b.SchemaID), Note: wire.Optional(b.Note)})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusCreated, c)
}

// identify authenticates a caller of a list route before anything is
// read, so an empty list is never an answer to an unauthenticated request.
func (h *handler) identify(w http.ResponseWriter, r *http.Request) bool {
	if _, err := h.authorize(r, varplane.KindIdentify, "", false); err != nil {
		h.fail(w, r, err)
		return false
	}
	return true
}

func (h *handler) handleChanges(w http.ResponseWriter, r *http.Request) {
	if !h.identify(w, r) {
		return
	}
	q, err := wire.SingleParams(r.URL.RawQuery, "scope", "state")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var req ListRequest
	if s, ok := q["scope"]; ok {
		if req.Scope, err = wire.ScopeField("scope", s); err != nil {
			h.fail(w, r, err)
			return
		}
		if _, err := h.authorize(r, varplane.KindAudit, req.Scope, false); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	req.State = q["state"]
	list, err := h.svc.List(r.Context(), req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// Without a scope, each change is shown only to who may audit its
	// scope.
	out := list[:0]
	for _, c := range list {
		if req.Scope == "" {
			if _, err := h.authorize(r, varplane.KindAudit, c.Scope, false); err != nil {
				if varplane.ErrorCode(err) == varplane.CodeForbidden {
					continue
				}
				h.fail(w, r, err)
				return
			}
		}
		out = append(out, c)
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"changes": out})
}

func (h *handler) handleChange(w http.ResponseWriter, r *http.Request) {
	c, err := h.svc.Get(r.Context(), r.PathValue("id"))
	if err == nil {
		_, err = h.authorize(r, varplane.KindAudit, c.Scope, false)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, c)
}

type transitionBody struct {
	Note         *string         `json:"note"`
	Base         json.RawMessage `json:"base"`
	Duration     *string         `json:"duration"`
	MinInstances *int            `json:"minInstances"`
}

// handleTransition serves POST /changes/{id}:{op}: it authorizes mutate on
// the change's scope, as the identity that makes the transition.
func (h *handler) handleTransition(w http.ResponseWriter, r *http.Request) {
	idop := r.PathValue("id")
	i := strings.LastIndexByte(idop, ':')
	if i < 0 {
		h.fail(w, r, varplane.Errorf(varplane.CodeMethodNotAllowed, "POST a transition: /changes/{id}:approve, :reject, :withdraw, :publish, :rebase or :canary"))
		return
	}
	changeID, op := idop[:i], idop[i+1:]
	ctx := r.Context()
	c, err := h.svc.Get(ctx, changeID)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	by, err := h.authorize(r, varplane.KindMutate, c.Scope, false)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var b transitionBody
	if r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
		if !h.body(w, r, &b) {
			return
		}
	}
	note := wire.Optional(b.Note)
	switch op {
	case "approve":
		c, err = h.svc.Approve(ctx, by, changeID, note)
	case "reject":
		c, err = h.svc.Reject(ctx, by, changeID, note)
	case "withdraw":
		c, err = h.svc.Withdraw(ctx, by, changeID, note)
	case "publish":
		c, err = h.svc.Publish(ctx, by, changeID)
	case "rebase":
		var base varplane.Generation
		if base, err = wire.RequiredGeneration("base", b.Base); err == nil {
			c, err = h.svc.Rebase(ctx, by, changeID, base)
		}
	case "canary":
		var d time.Duration
		if b.Duration == nil || b.MinInstances == nil {
			err = wire.BadRequest("a canary window needs duration and minInstances")
		} else if d, err = time.ParseDuration(*b.Duration); err != nil {
			err = wire.BadRequest("duration must be a Go duration such as 10m")
		} else {
			c, err = h.svc.OpenCanary(ctx, by, changeID, d, *b.MinInstances)
		}
	default:
		err = varplane.Errorf(varplane.CodeNotFound, "no transition %q (approve, reject, withdraw, publish, rebase, canary)", op)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, c)
}

func (h *handler) handlePolicies(w http.ResponseWriter, r *http.Request) {
	if !h.identify(w, r) {
		return
	}
	list, err := h.svc.Policies(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := list[:0]
	for _, p := range list {
		if _, err := h.authorize(r, varplane.KindAudit, p.Scope, true); err != nil {
			if varplane.ErrorCode(err) == varplane.CodeForbidden {
				continue
			}
			h.fail(w, r, err)
			return
		}
		out = append(out, p)
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"policies": out})
}

type policyBody struct {
	Approvals *int     `json:"approvals"`
	Roles     []string `json:"roles"`
	Canary    *bool    `json:"canary"`
}

func (h *handler) handlePutPolicy(w http.ResponseWriter, r *http.Request) {
	scope, err := scopeParam(r, "")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	by, err := h.authorize(r, varplane.KindMutate, scope, true)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var b policyBody
	if !h.body(w, r, &b) {
		return
	}
	if b.Approvals == nil {
		h.fail(w, r, wire.BadRequest("approvals is required"))
		return
	}
	p := Policy{Scope: scope, Approvals: *b.Approvals, Roles: b.Roles, Canary: b.Canary != nil && *b.Canary}
	p, err = h.svc.PutPolicy(r.Context(), by, p)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, p)
}

func (h *handler) handleDeletePolicy(w http.ResponseWriter, r *http.Request) {
	scope, err := scopeParam(r, "")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	by, err := h.authorize(r, varplane.KindMutate, scope, true)
	if err == nil {
		err = h.svc.DeletePolicy(r.Context(), by, scope)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
