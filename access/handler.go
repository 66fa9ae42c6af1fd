package access

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// HandlerOptions configure Handler.
type HandlerOptions struct {
	// Authorizer authorizes every request (serve passes the one it uses
	// everywhere: the tokens file combined with the store).
	Authorizer varplane.Authorizer
	// Base is the var API's base path ("/vars"); the routes are under
	// {Base}/access/.
	Base string
	// Limits bound request bodies (MaxBodyBytes, strict decoding).
	Limits varplane.Limits
	// Logger receives failures of 500 and above.
	Logger *slog.Logger
}

// maxRequestBytes bounds a create request: an id, a few lists.
const maxRequestBytes = 64 << 10

// Handler serves the access API:
//
//	GET    {base}/access/tokens       list the principals (audit)
//	POST   {base}/access/tokens       create one; the answer holds its token, once (mutate)
//	DELETE {base}/access/tokens/{id}  revoke one (mutate)
//
// A request is allowed when the caller holds AdminRole, or when its token
// allows the route's kind on Scope. Every write is recorded in Scope's
// history with the caller's identity as actor.
func Handler(svc *Service, opts HandlerOptions) http.Handler {
	h := &handler{svc: svc, opts: opts}
	if h.opts.Logger == nil {
		h.opts.Logger = slog.Default()
	}
	h.opts.Limits = h.opts.Limits.WithDefaults()
	base := strings.TrimRight(opts.Base, "/")
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+base+"/access/tokens", h.list)
	mux.HandleFunc("POST "+base+"/access/tokens", h.create)
	mux.HandleFunc("DELETE "+base+"/access/tokens/{id}", h.revoke)
	mux.HandleFunc(base+"/access/", func(w http.ResponseWriter, r *http.Request) {
		allow := ""
		switch p := r.URL.Path; {
		case p == base+"/access/tokens":
			allow = "GET, POST"
		case strings.HasPrefix(p, base+"/access/tokens/") && !strings.Contains(p[len(base+"/access/tokens/"):], "/"):
			allow = "DELETE"
		}
		if allow == "" {
			wire.WriteError(w, r, nil, varplane.Errorf(varplane.CodeNotFound, "no such access route"))
			return
		}
		w.Header().Set("Allow", allow)
		wire.WriteError(w, r, nil, varplane.Errorf(varplane.CodeMethodNotAllowed, "%s is not allowed here (allowed: %s)", r.Method, allow))
	})
	return mux
}

type handler struct {
	svc  *Service
	opts HandlerOptions
}

// authorize allows an administrator, or a token allowing kind on Scope.
func (h *handler) authorize(ctx context.Context, r *http.Request, kind varplane.Kind) (varplane.Identity, error) {
	token := wire.RequestBearer(r)
	id, err := varplane.Authorize(ctx, h.opts.Authorizer, varplane.Access{Kind: varplane.KindIdentify, Token: token})
	if err != nil || id.Has(AdminRole) {
		return id, err
	}
	return varplane.Authorize(ctx, h.opts.Authorizer, varplane.Access{Kind: kind, Scope: Scope, Token: token})
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	wire.WriteError(w, r, h.opts.Logger, err)
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	if _, err := h.authorize(r.Context(), r, varplane.KindAudit); err != nil {
		h.fail(w, r, err)
		return
	}
	ps, err := h.svc.List(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, struct {
		Principals []Info `json:"principals"`
	}{ps})
}

// createRequest is the body of POST {base}/access/tokens.
type createRequest struct {
	ID       string          `json:"id"`
	Kinds    []varplane.Kind `json:"kinds"`
	Prefixes []string        `json:"prefixes"`
	Roles    []string        `json:"roles"`
	Reason   string          `json:"reason"`
}

func (h *handler) create(w http.ResponseWriter, r *http.Request) {
	id, err := h.authorize(r.Context(), r, varplane.KindMutate)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if err := wire.CheckContentType(r, "application/json"); err != nil {
		h.fail(w, r, err)
		return
	}
	body, err := wire.ReadBody(w, r, min(h.opts.Limits.MaxBodyBytes, maxRequestBytes))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var req createRequest
	if err := wire.DecodeStrict(body, &req, h.opts.Limits); err != nil {
		h.fail(w, r, err)
		return
	}
	created, err := h.svc.Create(r.Context(), req.ID, Binding{Kinds: req.Kinds, Prefixes: req.Prefixes, Roles: req.Roles}, id.ID, req.Reason)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusCreated, created)
}

func (h *handler) revoke(w http.ResponseWriter, r *http.Request) {
	id, err := h.authorize(r.Context(), r, varplane.KindMutate)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	name := r.PathValue("id")
	res, err := h.svc.Revoke(r.Context(), name, id.ID, r.URL.Query().Get("reason"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, struct {
		ID         string              `json:"id"`
		Revoked    bool                `json:"revoked"`
		Generation varplane.Generation `json:"generation"`
		Revision   varplane.Revision   `json:"revision"`
	}{name, true, res.Generation, res.Revision})
}
