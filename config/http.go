package config

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/internal/wire/jsontext"
)

// The roles of the values service. Roles are hierarchical (see
// varplane.Identity.Has): "system" and "system:configuration" both hold
// RoleGet and RoleCreate.
const (
	RoleGet    = "system:configuration:get"
	RoleCreate = "system:configuration:create"
)

// HandlerOptions configure Handler. The zero value serves every caller as
// varplane.Anonymous, within the engine's limits.
type HandlerOptions struct {
	// Authorizer tells who a caller is (it is asked with
	// varplane.KindIdentify and the request's bearer token); the handler
	// then checks the route's role with Identity.Has. varplane.AllowAll
	// when nil, with a warning on Logger.
	Authorizer varplane.Authorizer
	// Logger receives internal errors; slog.Default when nil.
	Logger *slog.Logger
	// Limits bound request bodies (MaxBodyBytes, 413 beyond) and the
	// documents in them; the engine's (Engine.Limits) when zero.
	Limits varplane.Limits
	// Heartbeat is the interval of comments on the watch stream; 15 s when 0.
	Heartbeat time.Duration
	// WatchBuffer is how many created events a slow watcher may fall behind
	// before its stream is closed (it reconnects and fetches again); 256
	// when 0.
	WatchBuffer int
}

// The media types of request bodies: JSON, and the YAML spellings in use.
// A body without a Content-Type is JSON.
var (
	jsonTypes = []string{"application/json"}
	yamlTypes = []string{"application/yaml", "application/x-yaml", "text/yaml"}
	bodyTypes = append(append([]string(nil), jsonTypes...), yamlTypes...)
)

// Handler returns the HTTP resources of the values service and its page:
//
//	GET  /configuration/values/              list            system:configuration:get
//	GET  /configuration/values/{component}/  get (?epoch=)   system:configuration:get
//	POST /configuration/values/{component}/  create          system:configuration:create
//	POST /configuration/values:fetch         fetch           system:configuration:get
//	GET  /configuration/values:watch         created events  system:configuration:get
//	GET  /.configuration                     the page        system:configuration:get
//	POST /.configuration                     the page's form system:configuration:create
//
// Bodies are JSON (application/json, or no Content-Type) or YAML
// (application/yaml, application/x-yaml, text/yaml), 415 otherwise. They are
// held to the limits before anything decodes them (413 payload-too-large
// beyond the size, 400 limit-exceeded beyond another limit), and YAML is read
// by the one converter, wire.YAMLToJSON (400 naming the line for what it
// refuses, such as the leading-zero integer 0644). Answers are JSON, or YAML
// when Accept prefers it. Errors are the project's one body {code, error, …}
// with wire.Status's status: 401 without a token, 403 for a token the
// authorizer refuses or one without the role, 404 when a component has no
// configuration, 422 unknown-component and invalid-configuration (with the
// issues).
func Handler(svc *Service, opts HandlerOptions) http.Handler {
	h := &handler{svc: svc, authz: opts.Authorizer, log: opts.Logger, lim: opts.Limits, heartbeat: opts.Heartbeat, buffer: opts.WatchBuffer}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.authz == nil {
		// Passing varplane.AllowAll documents the choice; falling back to
		// it is worth a warning, as every server gives.
		h.log.Warn("values service: no authorizer configured; every caller is anonymous with every role")
		h.authz = varplane.AllowAll
	}
	if h.lim == (varplane.Limits{}) {
		h.lim = svc.Engine().Limits()
	}
	h.lim = h.lim.WithDefaults()
	if h.heartbeat <= 0 {
		h.heartbeat = 15 * time.Second
	}
	if h.buffer <= 0 {
		h.buffer = 256
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /configuration/values/{$}", h.handleList)
	mux.HandleFunc("GET /configuration/values/{component}/{$}", h.handleGet)
	mux.HandleFunc("POST /configuration/values/{component}/{$}", h.handleCreate)
	mux.HandleFunc("POST /configuration/values:fetch", h.handleFetch)
	mux.HandleFunc("GET /configuration/values:watch", h.handleWatch)
	page := http.NewCrossOriginProtection().Handler(http.HandlerFunc(h.handlePage))
	mux.Handle("GET /.configuration", page)
	mux.Handle("POST /.configuration", page)
	return mux
}

type handler struct {
	svc       *Service
	authz     varplane.Authorizer
	log       *slog.Logger
	lim       varplane.Limits
	heartbeat time.Duration
	buffer    int
}

// identify asks the authorizer who the caller is. The token is the
// request's bearer token; for the page (basic), a browser's HTTP Basic
// password too.
func (h *handler) identify(r *http.Request, basic bool) (varplane.Identity, error) {
	token := wire.RequestBearer(r)
	if token == "" && basic {
		token = wire.BasicPassword(r)
	}
	return varplane.Authorize(r.Context(), h.authz, varplane.Access{Kind: varplane.KindIdentify, Token: token})
}

// needRole is forbidden unless id holds role.
func needRole(id varplane.Identity, role string) error {
	if !id.Has(role) {
		return varplane.Errorf(varplane.CodeForbidden, "the role %s is required", role)
	}
	return nil
}

// authorize returns the caller when it holds role.
func (h *handler) authorize(r *http.Request, role string) (varplane.Identity, error) {
	id, err := h.identify(r, false)
	if err != nil {
		return varplane.Identity{}, err
	}
	return id, needRole(id, role)
}

// fail answers err in the one error shape.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	wire.WriteError(w, r, h.log, err)
}

// handleList serves GET /configuration/values/.
func (h *handler) handleList(w http.ResponseWriter, r *http.Request) {
	if _, err := h.authorize(r, RoleGet); err != nil {
		h.fail(w, r, err)
		return
	}
	list, err := h.svc.List(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.answer(w, r, http.StatusOK, list)
}

type getAnswer struct {
	Configuration json.RawMessage `json:"configuration"`
	Schema        json.RawMessage `json:"schema,omitempty"`
	Epoch         string          `json:"epoch"`
}

// handleGet serves GET /configuration/values/{component}/.
func (h *handler) handleGet(w http.ResponseWriter, r *http.Request) {
	if _, err := h.authorize(r, RoleGet); err != nil {
		h.fail(w, r, err)
		return
	}
	component := r.PathValue("component")
	v, ok, err := h.svc.Get(r.Context(), component, r.URL.Query().Get("epoch"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !ok {
		h.fail(w, r, varplane.Errorf(varplane.CodeNotFound, "component %q has no configuration", component))
		return
	}
	h.answer(w, r, http.StatusOK, getAnswer{Configuration: v.Configuration, Schema: v.Schema, Epoch: v.Epoch})
}

// createBody is the body of a create: seed 001's {configuration}.
type createBody struct {
	Configuration json.RawMessage `json:"configuration"`
}

// handleCreate serves POST /configuration/values/{component}/.
func (h *handler) handleCreate(w http.ResponseWriter, r *http.Request) {
	id, err := h.authorize(r, RoleCreate)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// The configuration sits one level down in the body.
	body, err := h.readJSON(w, r, 1)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var req createBody
	if err := wire.DecodeStrict(body, &req, h.lim); err != nil {
		h.fail(w, r, err)
		return
	}
	if len(req.Configuration) == 0 {
		h.fail(w, r, wire.BadRequest("the body must be an object with a configuration"))
		return
	}
	res, err := h.svc.Create(r.Context(), CreateRequest{Component: r.PathValue("component"), Configuration: req.Configuration, Originator: id.ID})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.answer(w, r, http.StatusCreated, struct {
		ID    string `json:"id"`
		Epoch string `json:"epoch"`
	}{res.ID, res.Epoch})
}

// handleFetch serves POST /configuration/values:fetch: the body is a list of
// {component, epoch} (or {"pairs": [...]}), the answer the list of
// {component, epoch, configuration, created} in the same order.
func (h *handler) handleFetch(w http.ResponseWriter, r *http.Request) {
	if _, err := h.authorize(r, RoleGet); err != nil {
		h.fail(w, r, err)
		return
	}
	body, err := h.readJSON(w, r, 0)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	pairs, err := decodePairs(body, h.lim)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	res, err := h.svc.Fetch(r.Context(), pairs)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.answer(w, r, http.StatusOK, res)
}

// decodePairs reads a fetch body, already held to the limits: a list of
// {component, epoch}, or an object {pairs: [...]}. Each pair is decoded
// strictly and needs a component.
func decodePairs(body []byte, lim varplane.Limits) ([]Pair, error) {
	var list []json.RawMessage
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var wrapped struct {
			Pairs []json.RawMessage `json:"pairs"`
		}
		if err := wire.DecodeStrict(body, &wrapped, lim); err != nil {
			return nil, err
		}
		list = wrapped.Pairs
	} else if err := json.Unmarshal(body, &list); err != nil || list == nil {
		return nil, wire.BadRequest("the body must be a list of {component, epoch}")
	}
	pairs := make([]Pair, 0, len(list))
	for i, raw := range list {
		var p Pair
		if err := wire.DecodeStrict(raw, &p, lim); err != nil {
			return nil, wire.BadRequest("pair %d: %s", i, varplane.ErrorMessage(err))
		}
		if p.Component == "" {
			return nil, wire.BadRequest("pair %d has no component", i)
		}
		pairs = append(pairs, p)
	}
	return pairs, nil
}

// readJSON reads a write's body within the limits and returns it as JSON
// text: a JSON body is held to the limits as it is, a YAML body converted by
// the one converter (extraDepth levels of envelope are allowed around a
// document). Nothing is decoded into a tree before the limits hold.
func (h *handler) readJSON(w http.ResponseWriter, r *http.Request, extraDepth int) (json.RawMessage, error) {
	if err := wire.CheckContentType(r, bodyTypes...); err != nil {
		return nil, err
	}
	body, err := wire.ReadBody(w, r, h.lim.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	return ToJSON(body, isYAMLBody(r), h.lim, extraDepth)
}

// isYAMLBody reports whether r's Content-Type is one of the YAML types
// (CheckContentType has refused anything else that is not JSON).
func isYAMLBody(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return false
	}
	for _, t := range yamlTypes {
		if strings.EqualFold(mt, t) {
			return true
		}
	}
	return false
}

// handleWatch serves GET /configuration/values:watch, a Server-Sent Events
// stream: first an event "ready" once the stream is registered (a consumer
// fetches after it, so no create falls between), then one event "created"
// per created object (id: its created order, data: the CreatedEvent), and a
// comment every heartbeat. A watcher that falls behind by more than the
// buffer gets an event "overflow" and is disconnected rather than slowing
// commits.
func (h *handler) handleWatch(w http.ResponseWriter, r *http.Request) {
	if _, err := h.authorize(r, RoleGet); err != nil {
		h.fail(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	events := make(chan CreatedEvent, h.buffer)
	overflow := make(chan struct{})
	var once sync.Once
	unsubscribe := h.svc.OnCreated(func(ev CreatedEvent) {
		select {
		case events <- ev:
		default:
			once.Do(func() { close(overflow) })
		}
	})
	defer unsubscribe()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(frame []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := w.Write(frame); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(wire.AppendEvent(nil, "ready", "", []byte("{}"))) {
		return
	}
	tick := time.NewTicker(h.heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-overflow:
			write(wire.AppendEvent(nil, "overflow", "", []byte("{}")))
			return
		case <-tick.C:
			if !write(wire.AppendComment(nil, "heartbeat")) {
				return
			}
		case ev := <-events:
			data, err := jsontext.Marshal(ev)
			if err != nil {
				h.log.Error("encode created event", "err", err)
				return
			}
			if !write(wire.AppendEvent(nil, "created", strconv.FormatUint(ev.Created, 10), data)) {
				return
			}
		}
	}
}

// wantsYAML reports whether Accept prefers YAML over JSON (JSON wins ties,
// and is the answer when Accept says nothing we make).
func wantsYAML(accept string) bool {
	var jsonQ, yamlQ float64
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if s, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(s, 64); err == nil {
				q = f
			}
		}
		switch {
		case isYAMLType(mt):
			yamlQ = max(yamlQ, q)
		case mt == "application/json" || mt == "application/*" || mt == "*/*":
			jsonQ = max(jsonQ, q)
		}
	}
	return yamlQ > jsonQ
}

func isYAMLType(mt string) bool {
	switch mt {
	case "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml":
		return true
	}
	return strings.HasSuffix(mt, "+yaml")
}

// answer writes v as JSON (wire.WriteJSON), or as YAML when Accept prefers
// it.
func (h *handler) answer(w http.ResponseWriter, r *http.Request, status int, v any) {
	if !wantsYAML(r.Header.Get("Accept")) {
		wire.WriteJSON(w, status, v)
		return
	}
	data, err := jsontext.Marshal(v)
	if err == nil {
		data, err = JSONToYAML(data)
	}
	if err != nil {
		h.fail(w, r, err) // internal: logged, and answered as JSON
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}
