package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/varplane/varplane"
)

// DefaultMaxBodyBytes bounds request bodies unless HandlerOptions says
// otherwise.
const DefaultMaxBodyBytes = 1 << 20

// HandlerOptions configure Handler. The zero value serves every caller as
// Anonymous.
type HandlerOptions struct {
	// Identity resolves callers; AllowAll when nil.
	Identity IdentityResolver
	// Logger receives internal errors; slog.Default when nil.
	Logger *slog.Logger
	// MaxBodyBytes bounds request bodies (413 beyond); DefaultMaxBodyBytes
	// when 0.
	MaxBodyBytes int64
	// Heartbeat is the interval of comments on the watch stream; 15 s when 0.
	Heartbeat time.Duration
	// WatchBuffer is how many created events a slow watcher may fall behind
	// before its stream is closed (it reconnects and fetches again); 256
	// when 0.
	WatchBuffer int
}

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
// Bodies are JSON or YAML by Content-Type (415 otherwise, 400 when they do
// not decode, 413 beyond the size limit); answers are JSON, or YAML when
// Accept prefers it. Errors are {code, error, issues?}: 401 without an
// identity, 403 without the role, 404 when a component has no
// configuration, 422 for UNKNOWN_COMPONENT and INVALID_CONFIGURATION.
func Handler(svc *Service, opts HandlerOptions) http.Handler {
	h := &handler{svc: svc, resolve: opts.Identity, log: opts.Logger, max: opts.MaxBodyBytes, heartbeat: opts.Heartbeat, buffer: opts.WatchBuffer}
	if h.resolve == nil {
		h.resolve = AllowAll()
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.max <= 0 {
		h.max = DefaultMaxBodyBytes
	}
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
	resolve   IdentityResolver
	log       *slog.Logger
	max       int64
	heartbeat time.Duration
	buffer    int
}

// handleList serves GET /configuration/values/.
func (h *handler) handleList(w http.ResponseWriter, r *http.Request) {
	if _, err := authorize(h.resolve, r, RoleGet); err != nil {
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
	if _, err := authorize(h.resolve, r, RoleGet); err != nil {
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
		h.fail(w, r, &errorAnswer{status: http.StatusNotFound, code: string(varplane.CodeNotFound), msg: fmt.Sprintf("component %q has no configuration", component)})
		return
	}
	h.answer(w, r, http.StatusOK, getAnswer{Configuration: v.Configuration, Schema: v.Schema, Epoch: v.Epoch})
}

// handleCreate serves POST /configuration/values/{component}/.
func (h *handler) handleCreate(w http.ResponseWriter, r *http.Request) {
	id, err := authorize(h.resolve, r, RoleCreate)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	body, err := h.decodeBody(w, r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	obj, ok := body.(map[string]any)
	conf, present := obj["configuration"]
	if !ok || !present {
		h.fail(w, r, varplane.Errorf(varplane.CodeBadRequest, "the body must be an object with a configuration"))
		return
	}
	doc, err := marshalJSON(conf)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	res, err := h.svc.Create(r.Context(), CreateRequest{Component: r.PathValue("component"), Configuration: doc, Originator: id.ID})
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
	if _, err := authorize(h.resolve, r, RoleGet); err != nil {
		h.fail(w, r, err)
		return
	}
	body, err := h.decodeBody(w, r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if m, ok := body.(map[string]any); ok {
		body = m["pairs"]
	}
	list, ok := body.([]any)
	if !ok {
		h.fail(w, r, varplane.Errorf(varplane.CodeBadRequest, "the body must be a list of {component, epoch}"))
		return
	}
	pairs := make([]Pair, 0, len(list))
	for i, x := range list {
		m, _ := x.(map[string]any)
		c, _ := m["component"].(string)
		e, _ := m["epoch"].(string)
		if c == "" {
			h.fail(w, r, varplane.Errorf(varplane.CodeBadRequest, "pair %d has no component", i))
			return
		}
		pairs = append(pairs, Pair{Component: c, Epoch: e})
	}
	res, err := h.svc.Fetch(r.Context(), pairs)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.answer(w, r, http.StatusOK, res)
}

// handleWatch serves GET /configuration/values:watch, a Server-Sent Events
// stream: first an event "ready" once the stream is registered (a consumer
// fetches after it, so no create falls between), then one event "created"
// per created object (id: its created order, data: the CreatedEvent), and a
// comment every heartbeat. A watcher that falls behind by more than the
// buffer is disconnected rather than slowing commits.
func (h *handler) handleWatch(w http.ResponseWriter, r *http.Request) {
	if _, err := authorize(h.resolve, r, RoleGet); err != nil {
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
	write := func(s string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(w, s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write("event: ready\ndata: {}\n\n") {
		return
	}
	tick := time.NewTicker(h.heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-overflow:
			write("event: overflow\ndata: {}\n\n")
			return
		case <-tick.C:
			if !write(": heartbeat\n\n") {
				return
			}
		case ev := <-events:
			data, err := json.Marshal(ev)
			if err != nil {
				h.log.Error("encode created event", "err", err)
				return
			}
			if !write("event: created\nid: " + strconv.FormatUint(ev.Created, 10) + "\ndata: " + string(data) + "\n\n") {
				return
			}
		}
	}
}

// decodeBody reads a JSON or YAML body into the package's decoded form.
func (h *handler) decodeBody(w http.ResponseWriter, r *http.Request) (any, error) {
	kind := bodyKind(r.Header.Get("Content-Type"))
	if kind == "" {
		return nil, &errorAnswer{status: http.StatusUnsupportedMediaType, code: "unsupported-media-type", msg: "the body must be application/json or application/yaml"}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, varplane.Errorf(varplane.CodePayloadTooLarge, "the body is larger than %d bytes", h.max)
		}
		return nil, varplane.Errorf(varplane.CodeBadRequest, "the body could not be read")
	}
	var v any
	if kind == "json" {
		v, err = DecodeJSON(data)
	} else {
		v, err = DecodeYAML(data)
	}
	if err != nil {
		return nil, &varplane.Error{Code: varplane.CodeBadRequest, Message: "the body does not decode: " + err.Error()}
	}
	return v, nil
}

// bodyKind returns "json", "yaml" or "" for a Content-Type.
func bodyKind(contentType string) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return ""
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return "json"
	case isYAMLType(mt):
		return "yaml"
	}
	return ""
}

func isYAMLType(mt string) bool {
	switch mt {
	case "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml":
		return true
	}
	return strings.HasSuffix(mt, "+yaml")
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

// answer writes v as JSON or YAML by Accept.
func (h *handler) answer(w http.ResponseWriter, r *http.Request, status int, v any) {
	data, err := marshalJSON(v)
	if err != nil {
		h.log.Error("encode answer", "err", err)
		http.Error(w, `{"code":"internal","error":"internal error"}`, http.StatusInternalServerError)
		return
	}
	ct := "application/json"
	if wantsYAML(r.Header.Get("Accept")) {
		if y, err := JSONToYAML(data); err == nil {
			data, ct = y, "application/yaml"
		}
	} else {
		data = append(data, '\n')
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

type errorBody struct {
	Code   string           `json:"code"`
	Error  string           `json:"error"`
	Issues []varplane.Issue `json:"issues,omitempty"`
}

// statusOf maps an error to its HTTP status and wire body; it is the one
// place where the values service's errors meet HTTP.
func statusOf(err error) (int, errorBody) {
	var ea *errorAnswer
	if errors.As(err, &ea) {
		return ea.status, errorBody{Code: ea.code, Error: ea.msg}
	}
	var ve *varplane.Error
	if !errors.As(err, &ve) {
		return http.StatusInternalServerError, errorBody{Code: string(varplane.CodeInternal), Error: "internal error"}
	}
	body := errorBody{Code: string(ve.Code), Error: varplane.ErrorMessage(ve), Issues: ve.Issues}
	switch ve.Code {
	case CodeUnknownComponent, CodeInvalidConfiguration:
		return http.StatusUnprocessableEntity, body
	case varplane.CodeBadRequest:
		return http.StatusBadRequest, body
	case varplane.CodeNotFound, varplane.CodeNoHead:
		return http.StatusNotFound, body
	case varplane.CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge, body
	case varplane.CodeRevisionConflict:
		return http.StatusConflict, body
	case varplane.CodeUnauthorized:
		return http.StatusUnauthorized, body
	case varplane.CodeForbidden:
		return http.StatusForbidden, body
	case varplane.CodeStoreUnavailable:
		return http.StatusServiceUnavailable, body
	}
	return http.StatusInternalServerError, errorBody{Code: string(varplane.CodeInternal), Error: "internal error"}
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, body := statusOf(err)
	if status >= 500 {
		h.log.Error("configuration request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if status == http.StatusUnauthorized && r.URL.Path == pagePath {
		// Browsers open the page: let them ask for a token (the password).
		w.Header().Set("WWW-Authenticate", `Basic realm="varplane configuration", charset="UTF-8"`)
	}
	h.answer(w, r, status, body)
}
