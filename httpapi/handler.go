package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
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
	// varplane.AllowAll, with a one-time warning on stderr.
	Authorizer varplane.Authorizer

	// MaxBodyBytes bounds request bodies (the engine's Limits.MaxBodyBytes
	// when 0). Larger bodies are answered 413 payload-too-large. The other
	// document limits are the engine's (varplane.Options.Limits): a body is
	// held to the same numbers at decode time as its document in the engine.
	MaxBodyBytes int64

	// Logger receives request logs and internal errors (slog.Default when
	// nil). Successful reads, probes and writes are logged at Debug, other
	// requests (refusals, errors, the admin reads of the audit log) at
	// Info; neither bodies nor tokens nor query strings are logged. A
	// successful write's record is its event in the audit log (kind,
	// scope, revision, generation, actor, reason, timestamp); a request
	// line at Info would repeat it at a cost on every commit.
	Logger *slog.Logger

	// Ready is an extra readiness check for /readyz (for example a Redis
	// store reporting its eviction policy). A non-nil error makes /readyz
	// answer 503 with the error's text under checks.ready.
	Ready func(ctx context.Context) error

	// Watch serves GET {base}/watch after the handler has authorized every
	// requested scope (see WatchTargets). Nil answers that route 404.
	Watch http.Handler

	// StoreStats, when set, feeds the store fsync metrics.
	StoreStats func() StoreStats

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
	watch  http.Handler

	mux       *http.ServeMux
	ops       *http.ServeMux
	routes    map[string]*route
	readRoute *route
	unmatched *route
	metrics   *metrics

	cross *http.CrossOriginProtection

	closeOnce   sync.Once
	unsubscribe func()
}

// route is one registered pattern with its cached metrics and log level.
type route struct {
	pattern string
	quiet   bool // successful answers are logged at Debug (reads, probes, writes)
	m       *routeMetrics
}

// NewHandler returns the handler of the route table over engine. Several
// handlers may share one engine (each with its own base and metrics
// registry). Call Close to stop following the engine's commits.
func NewHandler(engine *varplane.Engine, opts Options) *Handler {
	h := &Handler{
		engine: engine,
		base:   normalizeBase(opts.Base),
		auth:   opts.Authorizer,
		limits: engine.Limits(),
		log:    opts.Logger,
		ready:  opts.Ready,
		watch:  opts.Watch,
		mux:    http.NewServeMux(),
		ops:    http.NewServeMux(),
		routes: map[string]*route{},
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.auth == nil {
		h.auth = defaultAuthorizer()
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
	h.metrics = newMetrics(engine, &opts)
	h.unsubscribe = engine.OnCommit(h.metrics.commit)
	h.unmatched = &route{pattern: unmatchedRoute, m: h.metrics.route(unmatchedRoute)}

	b := h.base
	readPattern := "GET " + b
	if b == "" {
		readPattern = "GET /{$}"
	}
	h.readRoute = h.handle(h.mux, readPattern, true, h.handleRead)
	if b != "" {
		h.handle(h.mux, "GET "+b+"/{$}", true, h.handleRead)
	}
	h.handle(h.mux, "GET "+b+"/batch", true, h.handleBatch)
	h.handle(h.mux, "GET "+b+"/watch", false, h.handleWatch)
	h.handle(h.mux, "POST "+b+"/admin/revisions", true, h.sameOrigin(h.handleCreateRevision))
	h.handle(h.mux, "POST "+b+"/admin/validate", true, h.sameOrigin(h.handleValidate))
	h.handle(h.mux, "POST "+b+"/admin/activate", true, h.sameOrigin(h.handleActivate))
	h.handle(h.mux, "POST "+b+"/admin/publish", true, h.sameOrigin(h.handlePublish))
	h.handle(h.mux, "POST "+b+"/admin/deactivate", true, h.sameOrigin(h.handleDeactivate))
	h.handle(h.mux, "POST "+b+"/admin/rollback", true, h.sameOrigin(h.handleRollback))
	h.handle(h.mux, "GET "+b+"/admin/status", false, h.handleStatus)
	h.handle(h.mux, "GET "+b+"/admin/history", false, h.handleHistory)
	h.handle(h.mux, "GET "+b+"/admin/replay", false, h.handleReplay)
	h.handle(h.mux, "GET "+b+"/admin/scopes", false, h.handleScopes)

	ops := []struct {
		pattern string
		fn      http.HandlerFunc
	}{
		{"GET /healthz", h.handleHealthz},
		{"GET /readyz", h.handleReadyz},
		{"GET /metrics", promhttp.HandlerFor(h.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP},
	}
	for _, op := range ops {
		h.handle(h.ops, op.pattern, true, op.fn)
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

func (h *Handler) handle(mux *http.ServeMux, pattern string, quiet bool, fn http.HandlerFunc) *route {
	rt := &route{pattern: pattern, quiet: quiet, m: h.metrics.route(pattern)}
	h.routes[pattern] = rt
	mux.Handle(pattern, fn)
	return rt
}

// sameOrigin refuses a cross-origin write (see Options.TrustedOrigins)
// before anything of it is read.
func (h *Handler) sameOrigin(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h.cross.Check(r); err != nil {
			h.writeError(w, r, varplane.Errorf(varplane.CodeForbidden, "cross-origin writes are refused"))
			return
		}
		fn(w, r)
	}
}

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

// Close stops following the engine's commits. The handler keeps serving.
func (h *Handler) Close() { h.closeOnce.Do(h.unsubscribe) }

// ServeHTTP routes r, recording metrics and a log line for it. A panic in a
// route (never expected) is answered 500 internal if nothing was written.
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
	next, pattern := h.mux.Handler(r)
	rt = h.routes[pattern]
	if rt == nil {
		rt = h.unmatched
	}
	if pattern == "" {
		h.answerUnmatched(sw, r, next)
		return
	}
	next.ServeHTTP(sw, r)
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
