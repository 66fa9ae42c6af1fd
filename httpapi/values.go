package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
)

// valuesRoutes registers the values service of component configuration
// (Options.Values) at the server root, whatever the base: the paths every
// consumer and the config/consumer package expect.
//
//	GET  /configuration/values/              list            system:configuration:get
//	GET  /configuration/values/{component}/  get (?epoch=)   system:configuration:get
//	POST /configuration/values/{component}/  create          system:configuration:create
//	POST /configuration/values:fetch         fetch           system:configuration:get
//	GET  /configuration/values:watch         created events  system:configuration:get
//
// The caller is identified (kind identify, its bearer token) and must hold
// the route's role (varplane.Identity.Has). Bodies are JSON
// (application/json, or no Content-Type) or YAML (application/yaml,
// application/x-yaml, text/yaml), 415 otherwise. They are held to the
// limits before anything decodes them (413 payload-too-large beyond the
// size, 400 limit-exceeded beyond another limit), and YAML is read by the
// one converter (400 naming the line for what it refuses, such as the
// leading-zero integer 0644). Answers are JSON, or YAML when Accept prefers
// it. 404 when a component has no configuration, 422 unknown-component and
// invalid-configuration (with the issues). The service's page
// (/.configuration) is the console's (package ui).
func (h *Handler) valuesRoutes() {
	h.handleErr("GET /configuration/values/{$}", quiet, h.handleValuesList)
	h.handleErr("GET /configuration/values/{component}/{$}", quiet, h.handleValuesGet)
	h.handleErr("POST /configuration/values/{component}/{$}", loud, h.handleValuesCreate)
	h.handleErr("POST /configuration/values:fetch", quiet, h.handleValuesFetch)
	h.handleErr("GET /configuration/values:watch", stream, h.handleValuesWatch)
}

// The media types of the values service's request bodies: JSON, and the
// YAML spellings in use. A body without a Content-Type is JSON.
var (
	yamlBodyTypes  = []string{"application/yaml", "application/x-yaml", "text/yaml"}
	valueBodyTypes = append([]string{"application/json"}, yamlBodyTypes...)
)

// needRole authenticates the caller and returns its identity when it holds
// role (forbidden otherwise).
func (h *Handler) needRole(r *http.Request, role string) (varplane.Identity, error) {
	return h.tokenRole(r.Context(), wire.RequestBearer(r), role)
}

// tokenRole is needRole for a token: the identity it authenticates as, or
// forbidden when that identity lacks role.
func (h *Handler) tokenRole(ctx context.Context, token, role string) (varplane.Identity, error) {
	id, err := varplane.Authorize(ctx, h.auth, varplane.Access{Kind: varplane.KindIdentify, Token: token})
	if err != nil {
		return varplane.Identity{}, err
	}
	if !id.Has(role) {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "the role %s is required", role)
	}
	return id, nil
}

// handleValuesList serves GET /configuration/values/.
func (h *Handler) handleValuesList(w http.ResponseWriter, r *http.Request) error {
	if _, err := h.needRole(r, config.RoleGet); err != nil {
		return err
	}
	list, err := h.values.List(r.Context())
	if err != nil {
		return err
	}
	return answerValues(w, r, http.StatusOK, list)
}

type valuesGetAnswer struct {
	Configuration json.RawMessage `json:"configuration"`
	Schema        json.RawMessage `json:"schema,omitempty"`
	Epoch         string          `json:"epoch"`
}

// handleValuesGet serves GET /configuration/values/{component}/?epoch=.
func (h *Handler) handleValuesGet(w http.ResponseWriter, r *http.Request) error {
	if _, err := h.needRole(r, config.RoleGet); err != nil {
		return err
	}
	component := r.PathValue("component")
	v, ok, err := h.values.Get(r.Context(), component, r.URL.Query().Get("epoch"))
	if err != nil {
		return err
	}
	if !ok {
		return varplane.Errorf(varplane.CodeNotFound, "component %q has no configuration", component)
	}
	return answerValues(w, r, http.StatusOK, valuesGetAnswer{Configuration: v.Configuration, Schema: v.Schema, Epoch: v.Epoch})
}

// valuesCreateBody is the body of a create: seed 001's {configuration}.
type valuesCreateBody struct {
	Configuration json.RawMessage `json:"configuration"`
}

// handleValuesCreate serves POST /configuration/values/{component}/.
func (h *Handler) handleValuesCreate(w http.ResponseWriter, r *http.Request) error {
	id, err := h.needRole(r, config.RoleCreate)
	if err != nil {
		return err
	}
	// The configuration sits one level down in the body.
	body, err := h.readValuesBody(w, r, 1)
	if err != nil {
		return err
	}
	var req valuesCreateBody
	if err := wire.DecodeStrict(body, &req, h.limits); err != nil {
		return err
	}
	if len(req.Configuration) == 0 {
		return wire.BadRequest("the body must be an object with a configuration")
	}
	res, err := h.values.Create(r.Context(), config.CreateRequest{Component: r.PathValue("component"), Configuration: req.Configuration, Originator: id.ID})
	if err != nil {
		return err
	}
	return answerValues(w, r, http.StatusCreated, struct {
		ID    string `json:"id"`
		Epoch string `json:"epoch"`
	}{res.ID, res.Epoch})
}

// handleValuesFetch serves POST /configuration/values:fetch: the body is a
// list of {component, epoch} (or {"pairs": [...]}), the answer the list of
// {component, epoch, configuration, created} in the same order.
func (h *Handler) handleValuesFetch(w http.ResponseWriter, r *http.Request) error {
	if _, err := h.needRole(r, config.RoleGet); err != nil {
		return err
	}
	body, err := h.readValuesBody(w, r, 0)
	if err != nil {
		return err
	}
	pairs, err := decodePairs(body, h.limits)
	if err != nil {
		return err
	}
	res, err := h.values.Fetch(r.Context(), pairs)
	if err != nil {
		return err
	}
	return answerValues(w, r, http.StatusOK, res)
}

// decodePairs reads a fetch body, already held to the limits: a list of
// {component, epoch}, or an object {pairs: [...]}. Each pair is decoded
// strictly and needs a component.
func decodePairs(body []byte, lim varplane.Limits) ([]config.Pair, error) {
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
	pairs := make([]config.Pair, 0, len(list))
	for i, raw := range list {
		var p config.Pair
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

// readValuesBody reads a write's body within the limits and returns it as
// JSON text: a JSON body is held to the limits as it is, a YAML body
// converted by the one converter (extraDepth levels of envelope are allowed
// around a document). Nothing is decoded into a tree before the limits
// hold.
func (h *Handler) readValuesBody(w http.ResponseWriter, r *http.Request, extraDepth int) (json.RawMessage, error) {
	if err := wire.CheckContentType(r, valueBodyTypes...); err != nil {
		return nil, err
	}
	body, err := wire.ReadBody(w, r, h.limits.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	return config.ToJSON(body, isYAMLBody(r), h.limits, extraDepth)
}

// isYAMLBody reports whether r's Content-Type is one of the YAML types
// (CheckContentType has refused anything else that is not JSON).
func isYAMLBody(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return false
	}
	for _, t := range yamlBodyTypes {
		if strings.EqualFold(mt, t) {
			return true
		}
	}
	return false
}

// handleValuesWatch serves GET /configuration/values:watch, a Server-Sent
// Events stream: first an event "ready" once the stream is registered (a
// consumer fetches after it, so no create falls between), then one event
// "created" per created object (id: its created order, data: the
// config.CreatedEvent), and a comment every heartbeat. A watcher that falls
// behind by more than StreamOptions.WatchBuffer gets an event "overflow"
// and is disconnected rather than slowing commits. With a hub, the stream
// is counted by its caps (503 too-many-subscribers past one) and ends with
// an event "close" ({"reason":"revoked"}) once its token no longer holds
// the role.
func (h *Handler) handleValuesWatch(w http.ResponseWriter, r *http.Request) error {
	if _, err := h.needRole(r, config.RoleGet); err != nil {
		return err
	}
	var slot *push.Subscription // the stream's place under the hub's caps
	var ended <-chan struct{}   // closed when the hub ends it
	if h.hub != nil {
		token := wire.RequestBearer(r)
		var err error
		slot, err = h.hub.Reserve(push.SubscribeOptions{Owner: push.TokenKey(token), Addr: wire.AddrHost(r.RemoteAddr), Conn: r.RemoteAddr,
			Recheck: func(ctx context.Context) error {
				_, err := h.tokenRole(ctx, token, config.RoleGet)
				return err
			}})
		if err != nil {
			return err
		}
		defer slot.Close()
		ended = slot.Done()
	}
	rc := http.NewResponseController(w)
	events := make(chan config.CreatedEvent, h.stream.WatchBuffer)
	overflow := make(chan struct{})
	var once sync.Once
	unsubscribe := h.values.OnCreated(func(ev config.CreatedEvent) {
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
		return nil
	}
	tick := time.NewTicker(h.stream.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-ended:
			write(push.CloseFrame(slot.Err()))
			return nil
		case <-overflow:
			write(wire.AppendEvent(nil, "overflow", "", []byte("{}")))
			return nil
		case <-tick.C:
			if !write(wire.AppendComment(nil, "heartbeat")) {
				return nil
			}
		case ev := <-events:
			data, err := jsontext.Marshal(ev)
			if err != nil {
				h.log.Error("encode created event", "err", err)
				return nil
			}
			if !write(wire.AppendEvent(nil, "created", strconv.FormatUint(ev.Created, 10), data)) {
				return nil
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

// answerValues writes v as JSON (wire.WriteJSON), or as YAML when Accept
// prefers it. An error is returned before anything is written (and is
// answered as JSON).
func answerValues(w http.ResponseWriter, r *http.Request, status int, v any) error {
	if !wantsYAML(r.Header.Get("Accept")) {
		writeJSON(w, status, v)
		return nil
	}
	data, err := jsontext.Marshal(v)
	if err == nil {
		data, err = config.JSONToYAML(data)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(data)
	return nil
}
