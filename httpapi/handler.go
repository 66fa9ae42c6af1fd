package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
)

// DefaultBase is the base path when Options.Base is empty.
const DefaultBase = "/vars"

// CodeMethodNotAllowed is the code of a 405 answer: the route exists, the
// method does not.
const CodeMethodNotAllowed = varplane.CodeMethodNotAllowed

// Options configure a Handler. The zero value serves the route table under
// /vars, allows every request (with a one-time warning) and bounds bodies at
// 1 MiB.
type Options struct {
	// Base is the path prefix of the route table ("/vars" when empty; "/"
	// serves it at the root). It is the full request path the handler sees,
	// so a handler mounted in another mux without StripPrefix needs the
	// mount point as its base.
	Base string

	// Authorizer decides every request of the route table. Nil means
	// varplane.AllowAll, with a warning through Logger (once a process).
	Authorizer varplane.Authorizer

	// MaxBodyBytes bounds request bodies (the engine's Limits.MaxBodyBytes
	// when 0). Larger bodies are answered 413 payload-too-large. The other
	// document limits are the engine's (varplane.Options.Limits): a body is
	// held to the same numbers at decode time as its document in the engine.
	MaxBodyBytes int64

	// Logger receives request logs and internal errors (slog.Default when
	// nil). Successful reads and probes (the data plane, the values
	// service's reads, the instances' heartbeats and reports, /healthz,
	// /readyz, /metrics) are logged at Debug; writes, refusals, errors and
	// the admin reads of the audit log at Info. Neither bodies nor tokens
	// nor query strings are logged.
	Logger *slog.Logger

	// Ready is an extra readiness check for /readyz. A non-nil error makes
	// /readyz answer 503 with the error's text under checks.ready. A store
	// that is a varplane.Readier is asked the same way without it, and a
	// varplane.ReadyDetailer's details are added to the body under the
	// store's name.
	Ready func(ctx context.Context) error

	// Hub serves GET {base}/watch, the Server-Sent Events stream of the
	// commits of the scopes it names (watch.go); nil answers that route
	// 404. It also feeds varplane_subscribers unless Subscribers is set.
	Hub *push.Hub

	// Stream tunes the long-lived streams (the watch and the values
	// service's created events); the zero value selects the defaults.
	Stream StreamOptions

	// Control serves the control API under {base}/control/ (control.go):
	// reviewed changes, review policies, paged history, diff, and the
	// routes through which instances take part in canary windows. Nil: not
	// served (404).
	Control *control.Service

	// Access serves {base}/access/tokens (access.go): the principals held
	// in the store. Nil: not served.
	Access *access.Service

	// Values serves the values service of component configuration at the
	// server root, whatever the base (values.go): /configuration/values/…
	// Nil: not served.
	Values *config.Service

	// ScopesWithHead, when set, feeds varplane_scopes_with_head; by default
	// the handler lists the store's scopes at each scrape.
	ScopesWithHead func() int

	// Subscribers feeds varplane_subscribers; see also SetSubscribers.
	Subscribers func() int

	// TrustedOrigins are origins ("https://console.example.com") whose pages
	// may send writes across origins. Every other cross-origin write, told
	// by Sec-Fetch-Site or by an Origin that is not the request's host, is
	// refused 403: with no tokens configured, a page on another site must
	// not be able to create or activate.
	TrustedOrigins []string

	// Rollouts, when set, chooses the revision each OpenFeature (OFREP)
	// evaluation serves from its targeting key, for scopes under a
	// progressive rollout (ofrep.go). Nil: every evaluation serves the
	// scope's head, and no evaluation needs a targeting key.
	Rollouts Rollouts

	// DisableOps stops the handler from serving /healthz, /readyz and
	// /metrics (for embedders whose own mux already has them; they can serve
	// OpsHandler themselves).
	DisableOps bool
}

// Handler serves the route table of one plane. Build it with NewHandler.
type Handler struct {
	engine *varplane.Engine
	base   string
	auth   varplane.Authorizer
	limits varplane.Limits
	log    *slog.Logger
	ready  func(ctx context.Context) error
	hub    *push.Hub
	stream StreamOptions
	ctl    *control.Service
	access *access.Service
	values *config.Service
	// rollouts is Options.Rollouts (nil: heads only).
	rollouts Rollouts
	// largeBulks holds a slot per large OFREP bulk answer being built.
	largeBulks chan struct{}

	mux       *http.ServeMux
	ops       *http.ServeMux
	routes    map[string]*route
	readRoute *route
	// ofrepFlagRoute is the OFREP evaluation of one flag, served before
	// the mux for the paths under ofrepFlagPrefix (ofrep.go).
	ofrepFlagRoute  *route
	ofrepFlagPrefix string
	unmatched       *route
	metrics         *metrics

	cross *http.CrossOriginProtection

	// streams is cancelled by CloseStreams: it ends every long-lived
	// request (the watch, the created events, mounted streams).
	streams     context.Context
	endStreams  context.CancelFunc
	closeOnce   sync.Once
	unsubscribe func()
}

// route is one registered pattern with its cached metrics and log level.
type route struct {
	pattern string
	quiet   bool // successful answers are logged at Debug (reads, probes)
	stream  bool // long-lived: ended by CloseStreams
	mounted bool // a handler of another package (Mount): its own cross-origin rules
	m       *routeMetrics
}

// The kinds of a route, for handle.
const (
	loud   = 0
	quiet  = 1 << iota // successful answers at Debug
	stream             // ended by CloseStreams
)

// NewHandler returns the handler of the route table over engine, with the
// routes of the services opts names (the watch, the control API, the access
// API, the values service). Several handlers may share one engine (each
// with its own base and metrics registry). Call Close to stop following the
// engine's commits.
//
// Every route goes through one chain (ServeHTTP): a panic is recovered and
// answered 500 internal, the request is logged and counted by its route
// pattern, a cross-origin write is refused, a known path with another
// method is 405 with Allow, and every error is answered by the wire layer's
// one error table. Each route authorizes through the one authorizer
// (Options.Authorizer) before it acts.
func NewHandler(engine *varplane.Engine, opts Options) *Handler {
	h := &Handler{
		engine:     engine,
		base:       normalizeBase(opts.Base),
		auth:       opts.Authorizer,
		limits:     engine.Limits(),
		log:        opts.Logger,
		ready:      opts.Ready,
		hub:        opts.Hub,
		stream:     opts.Stream.withDefaults(),
		ctl:        opts.Control,
		access:     opts.Access,
		values:     opts.Values,
		rollouts:   opts.Rollouts,
		largeBulks: make(chan struct{}, MaxOFREPLargeBulks),
		mux:        http.NewServeMux(),
		ops:        http.NewServeMux(),
		routes:     map[string]*route{},
	}
	h.streams, h.endStreams = context.WithCancel(context.Background())
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.auth == nil {
		h.auth = defaultAuthorizer(h.log)
	}
	h.cross = http.NewCrossOriginProtection()
	for _, o := range opts.TrustedOrigins {
		if err := h.cross.AddTrustedOrigin(o); err != nil {
			h.log.Warn("trusted origin ignored", "origin", o, "error", err)
		}
	}
	if opts.MaxBodyBytes > 0 {
		h.limits.MaxBodyBytes = opts.MaxBodyBytes
	}
	if opts.Subscribers == nil && h.hub != nil {
		opts.Subscribers = func() int { return int(h.hub.Stats().Subscribers) }
	}
	h.metrics = newMetrics(engine, &opts)
	h.unsubscribe = engine.OnCommit(h.metrics.commit)
	h.unmatched = &route{pattern: unmatchedRoute, m: h.metrics.route(unmatchedRoute)}

	b := h.base
	readPattern := "GET " + b
	if b == "" {
		readPattern = "GET /{$}"
	}
	h.readRoute = h.handle(readPattern, quiet, h.handleRead)
	if b != "" {
		h.handle("GET "+b+"/{$}", quiet, h.handleRead)
	}
	h.handle("GET "+b+"/batch", quiet, h.handleBatch)
	h.handle("GET "+b+"/watch", stream, h.handleWatch)
	h.handle("POST "+b+"/admin/revisions", loud, h.handleCreateRevision)
	h.handle("POST "+b+"/admin/validate", loud, h.handleValidate)
	h.handle("POST "+b+"/admin/activate", loud, h.handleActivate)
	h.handle("POST "+b+"/admin/publish", loud, h.handlePublish)
	h.handle("POST "+b+"/admin/deactivate", loud, h.handleDeactivate)
	h.handle("POST "+b+"/admin/rollback", loud, h.handleRollback)
	h.handle("GET "+b+"/admin/status", loud, h.handleStatus)
	h.handle("GET "+b+"/admin/history", loud, h.handleHistory)
	h.handle("GET "+b+"/admin/replay", loud, h.handleReplay)
	h.handle("GET "+b+"/admin/scopes", loud, h.handleScopes)
	h.handle("GET "+b+"/admin/chain", loud, h.handleChain)
	h.schemaRoutes(b + "/admin/schemas")
	h.ofrepRoutes(b)
	if h.ctl != nil {
		h.controlRoutes(b + "/control")
		h.fleetRoutes(b + "/control")
	}
	if h.access != nil {
		h.accessRoutes(b + "/access")
	}
	if h.values != nil {
		h.valuesRoutes()
	}

	ops := []struct {
		pattern string
		fn      http.HandlerFunc
	}{
		{"GET /healthz", h.handleHealthz},
		{"GET /readyz", h.handleReadyz},
		{"GET /metrics", promhttp.HandlerFor(h.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP},
	}
	for _, op := range ops {
		h.routes[op.pattern] = h.route(op.pattern, quiet)
		h.ops.Handle(op.pattern, op.fn)
		if !opts.DisableOps {
			h.mux.Handle(op.pattern, op.fn)
		}
	}
	return h
}

func normalizeBase(b string) string {
	if b == "" {
		b = DefaultBase
	}
	if !strings.HasPrefix(b, "/") {
		b = "/" + b
	}
	return strings.TrimRight(b, "/")
}

// route returns a new route of pattern with kind's flags (quiet, stream)
// and its metrics.
func (h *Handler) route(pattern string, kind int) *route {
	return &route{pattern: pattern, quiet: kind&quiet != 0, stream: kind&stream != 0, m: h.metrics.route(pattern)}
}

// handle registers fn as the route of pattern on the handler's mux.
func (h *Handler) handle(pattern string, kind int, fn http.HandlerFunc) *route {
	rt := h.route(pattern, kind)
	h.routes[pattern] = rt
	h.mux.Handle(pattern, fn)
	return rt
}

// handleErr registers fn as the route of pattern; the error fn returns is
// answered through the one error writer (nothing of it must have been
// written yet).
func (h *Handler) handleErr(pattern string, kind int, fn func(w http.ResponseWriter, r *http.Request) error) {
	h.handle(pattern, kind, func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			h.writeError(w, r, err)
		}
	})
}

// Mount serves handler, a handler of another package (the console, the
// Connect transport, the values service's page), under pattern behind the
// chain's recovery, request log and metrics; it decides its own
// authorization and cross-origin rules. Its successful answers are logged
// at Debug, and its requests end when CloseStreams is called. Mount must be
// called before the handler serves.
func (h *Handler) Mount(pattern string, handler http.Handler) {
	rt := h.route(pattern, quiet|stream)
	rt.mounted = true
	h.routes[pattern] = rt
	h.mux.Handle(pattern, handler)
}

// Route is one entry of the route table as registered: its method (empty
// for a mounted handler, which takes every method) and its path pattern in
// net/http.ServeMux syntax. Mounted reports a handler of another package
// (Mount), which decides its own authorization.
type Route struct {
	Method  string
	Pattern string
	Mounted bool
}

// Routes lists every route h serves (the route table with the services h
// was built with, the probes, and what was mounted so far), sorted by
// pattern then method. A test that must cover every route (the promises
// of writes: authenticated, authorized, audited, validated) checks its
// cases against this list, so that a route added later without a case
// fails it.
func (h *Handler) Routes() []Route {
	out := make([]Route, 0, len(h.routes))
	for p, rt := range h.routes {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			method, path = "", p
		}
		out = append(out, Route{Method: method, Pattern: path, Mounted: rt.mounted})
	}
	slices.SortFunc(out, func(a, b Route) int {
		return cmp.Or(strings.Compare(a.Pattern, b.Pattern), strings.Compare(a.Method, b.Method))
	})
	return out
}

// CloseStreams ends every long-lived request (the watch streams, the values
// service's created events, mounted handlers' streams) and every later
// one: an HTTP server's graceful shutdown waits for requests in flight,
// which a stream never finishes by itself. Call it when the shutdown
// begins (Server.RegisterOnShutdown).
func (h *Handler) CloseStreams() { h.endStreams() }

// Base returns the normalized base path ("" for the root).
func (h *Handler) Base() string { return h.base }

// Registry returns the handler's own Prometheus registry (never the global
// one), for embedders that add collectors or serve it elsewhere.
func (h *Handler) Registry() *prometheus.Registry { return h.metrics.reg }

// OpsHandler serves /healthz, /readyz and /metrics at those exact paths.
func (h *Handler) OpsHandler() http.Handler { return h.ops }

// SetSubscribers sets the function that feeds varplane_subscribers, for a
// push layer built after the handler. Safe to call at any time.
func (h *Handler) SetSubscribers(fn func() int) {
	if fn == nil {
		h.metrics.subscribers.Store(nil)
		return
	}
	h.metrics.subscribers.Store(&fn)
}

// Close stops following the engine's commits and ends the streams
// (CloseStreams). The handler keeps serving other requests.
func (h *Handler) Close() {
	h.closeOnce.Do(h.unsubscribe)
	h.endStreams()
}

// ServeHTTP routes r through the chain: recovery (a panic in a route,
// never expected, is logged and answered 500 internal if nothing was
// written), the request log and metrics by route pattern, the cross-origin
// refusal of writes (see Options.TrustedOrigins), the method (405 with
// Allow for a known path), then the route, which authorizes and answers its
// errors through the one error writer.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := getStatusWriter(w)
	defer putStatusWriter(sw)
	var rt *route
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			h.log.LogAttrs(r.Context(), slog.LevelError, "handler panicked",
				slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("panic", fmt.Sprint(p)))
			if !sw.wrote {
				h.writeError(sw, r, errors.New("handler panicked"))
			}
		}
		h.finish(r, rt, sw, start)
	}()

	// The data-plane read skips the mux: it is the hot path.
	if r.Method == http.MethodGet && r.URL.Path == h.base && h.base != "" {
		rt = h.readRoute
		h.handleRead(sw, r)
		return
	}
	// So does a flag's evaluation: its key holds a JSON Pointer, whose
	// empty, "." and ".." tokens the mux would clean away with a redirect.
	if r.Method == http.MethodPost && h.ofrepFlagPrefix != "" && strings.HasPrefix(r.URL.Path, h.ofrepFlagPrefix) {
		rt = h.ofrepFlagRoute
		if h.crossOrigin(sw, r) {
			return
		}
		h.handleOFREPFlag(sw, r)
		return
	}
	// The mux is asked for the route first (its pattern names the request
	// in logs and metrics, and decides the steps below); its ServeHTTP then
	// matches again, which sets the request's path values.
	next, pattern := h.mux.Handler(r)
	rt = h.routes[pattern]
	if rt == nil {
		rt = h.unmatched
	}
	if pattern == "" {
		h.answerUnmatched(sw, r, next)
		return
	}
	// Before anything of the request is read (safe methods pass).
	if !rt.mounted && h.crossOrigin(sw, r) {
		return
	}
	if rt.stream {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(h.streams, cancel)
		defer stop()
		r = r.WithContext(ctx)
	}
	h.mux.ServeHTTP(sw, r)
}

// crossOrigin answers 403 to a cross-origin write (Options.TrustedOrigins)
// and reports whether it did.
func (h *Handler) crossOrigin(w http.ResponseWriter, r *http.Request) bool {
	if err := h.cross.Check(r); err != nil {
		h.writeError(w, r, varplane.Errorf(varplane.CodeForbidden, "cross-origin writes are refused"))
		return true
	}
	return false
}

// answerUnmatched turns the mux's plain-text 404 and 405 into JSON errors,
// keeping the Allow header the mux computed.
func (h *Handler) answerUnmatched(w http.ResponseWriter, r *http.Request, next http.Handler) {
	cw := &captureWriter{header: http.Header{}}
	next.ServeHTTP(cw, r)
	if cw.status == http.StatusMethodNotAllowed {
		if allow := cw.header.Values("Allow"); len(allow) > 0 {
			w.Header()["Allow"] = allow
		}
		h.writeError(w, r, &varplane.Error{Code: CodeMethodNotAllowed, Message: "method " + r.Method + " is not allowed on this route"})
		return
	}
	e := varplane.Errorf(varplane.CodeNotFound, "no such route")
	if h.base != "" && r.URL.Path != h.base && !strings.HasPrefix(r.URL.Path, h.base+"/") {
		e.Hint = "the var API is mounted under " + h.base
	}
	h.writeError(w, r, e)
}

func (h *Handler) finish(r *http.Request, rt *route, sw *statusWriter, start time.Time) {
	d := time.Since(start)
	status := sw.status
	if !sw.wrote {
		status = http.StatusOK
	}
	if rt == nil {
		rt = h.unmatched
	}
	rt.m.observe(status, d)
	level := slog.LevelInfo
	if rt.quiet && status < 400 {
		level = slog.LevelDebug
	}
	ctx := r.Context()
	if !h.log.Enabled(ctx, level) {
		return
	}
	h.log.LogAttrs(ctx, level, "http request",
		slog.String("method", r.Method),
		slog.String("route", rt.pattern),
		slog.Int("status", status),
		slog.Duration("duration", d),
		slog.Int64("bytes", sw.bytes))
}

// authorize runs the authorizer for one scope through varplane.Authorize,
// which fails closed: a denial is returned as is, anything else is internal
// and nothing of the cause reaches the client.
func (h *Handler) authorize(r *http.Request, kind varplane.Kind, scope varplane.Scope, subtree bool) (varplane.Identity, error) {
	return varplane.Authorize(r.Context(), h.auth, varplane.Access{
		Kind: kind, Scope: scope, Subtree: subtree, Token: wire.RequestBearer(r),
	})
}

// statusWriter records the status and size of a response. It unwraps to
// the server's writer so http.ResponseController reaches deadlines and
// flushing.
type statusWriter struct {
	w      http.ResponseWriter
	status int
	wrote  bool
	bytes  int64
}

var statusWriters = sync.Pool{New: func() any { return new(statusWriter) }}

func getStatusWriter(w http.ResponseWriter) *statusWriter {
	sw := statusWriters.Get().(*statusWriter)
	*sw = statusWriter{w: w}
	return sw
}

func putStatusWriter(sw *statusWriter) {
	*sw = statusWriter{}
	statusWriters.Put(sw)
}

func (sw *statusWriter) Header() http.Header { return sw.w.Header() }

func (sw *statusWriter) WriteHeader(code int) {
	if !sw.wrote && code >= 200 {
		sw.status, sw.wrote = code, true
	}
	sw.w.WriteHeader(code)
}

func (sw *statusWriter) Write(b []byte) (int, error) {
	if !sw.wrote {
		sw.status, sw.wrote = http.StatusOK, true
	}
	n, err := sw.w.Write(b)
	sw.bytes += int64(n)
	return n, err
}

// Flush flushes the underlying writer when it can.
func (sw *statusWriter) Flush() {
	if !sw.wrote {
		sw.status, sw.wrote = http.StatusOK, true
	}
	_ = http.NewResponseController(sw.w).Flush()
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (sw *statusWriter) Unwrap() http.ResponseWriter { return sw.w }

type captureWriter struct {
	header http.Header
	status int
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return len(b), nil
}
