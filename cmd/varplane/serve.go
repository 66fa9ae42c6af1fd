package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/gctune"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/rpc"
	"github.com/varplane/varplane/schema"
)

// Defaults of serve.
const (
	defaultAddr     = "127.0.0.1:8790"
	openTimeout     = 30 * time.Second
	shutdownTimeout = 15 * time.Second
	// defaultGCHeadroom: 64 MiB of garbage at most beyond the collector's
	// default, for about a fifth of the server's CPU on the publish path
	// (internal/gctune; bench/notes.md, item 8 of the PostgreSQL row).
	defaultGCHeadroom = 64 << 20
)

// ServeCommand runs the control plane: one engine over one store, served by
// the HTTP API (and whatever serveExtensions add).
type ServeCommand struct {
	m *Main
}

// serveConfig is what the serve flags ask for.
type serveConfig struct {
	addr         string
	base         string
	store        string
	documents    string
	tokens       string
	maxBodyBytes int64
	gcHeadroom   int64 // --gc-headroom-bytes (internal/gctune)
	limits       varplane.Limits
	allowedHosts string
	maxSubs      int
	// maxSubsPerToken: 0 takes push's default (a tenth of maxSubs).
	maxSubsPerToken int
	origins         string
	logFormat       string
	logLevel        string
	redis           redisFlags
	// maxConns and maxConnsPerAddr cap the main listener's connections.
	maxConns        int
	maxConnsPerAddr int
	maxConnAge      time.Duration
	maxConnAgeGrace time.Duration
	pingMinTime     time.Duration
	tls             tlsServeFlags
	tlsConfig       *tls.Config // built from tls after parsing
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// serveRuntime is what an extension can build on: the one engine every
// transport shares (so that an HTTP mutation reaches the subscribers of every
// transport), its store, the push hub, the logger, and the services and
// handlers it gives the HTTP API.
type serveRuntime struct {
	Engine *varplane.Engine
	Store  varplane.Store
	Hub    *push.Hub
	Logger *slog.Logger
	Base   string
	// Control, Access and Values are the services the HTTP API serves
	// (httpapi.Options), set by their extensions.
	Control *control.Service
	Access  *access.Service
	Values  *config.Service
	// mounts are handlers of other packages the HTTP API serves behind its
	// chain (httpapi.Handler.Mount), each built once the API exists.
	mounts []func(api http.Handler) (pattern string, h http.Handler)
	// Authorizer is the one --tokens builds, combined with the store's
	// principals under --access-control (an authorizing extension), and
	// varplane.AllowAll without either, so that every transport authorizes
	// exactly as the HTTP API does.
	Authorizer varplane.Authorizer
	// metrics register an extension's collectors on /metrics once the
	// HTTP API exists.
	metrics []func(*prometheus.Registry)
	// GRPC, when an extension sets it, serves the main port's gRPC
	// requests (HTTP/2: h2c, or TLS) next to the mux.
	GRPC *rpc.GRPCServer
	// TLS is the listeners' TLS configuration (--tls-cert), nil without.
	TLS *tls.Config
	// Listener holds every listener's connection caps (--max-connections…).
	Listener wire.ListenerOptions
	// HTTP2Guard holds every listener's HTTP/2 connections to the ping
	// policy and the maximum age (--http2-ping-min-time,
	// --max-connection-age).
	HTTP2Guard *wire.HTTP2Guard
}

// serveExtension is the place to add a transport or a feature to serve
// without touching this file: a file of this package appends a constructor
// to serveExtensions in its init function (the gRPC Subscribe listener with
// --rpc-addr, component configuration with --components, …).
type serveExtension interface {
	// RegisterFlags adds the extension's flags to serve's FlagSet.
	RegisterFlags(fs *flag.FlagSet)
	// Start runs after the engine is built and before the HTTP server
	// listens. It may give services and handlers to the HTTP API (rt) and
	// start listeners of its own; stop is called (with a deadline) during shutdown, before the
	// engine and the store are closed. A nil stop is allowed.
	Start(ctx context.Context, rt *serveRuntime) (stop func(context.Context) error, err error)
}

// scopeOwner is an extension that owns scopes (the values service its
// "<component>@<epoch>" scopes): serve reserves them in the engine it
// builds (varplane.Options.Owners), after the flags are parsed.
type scopeOwner interface {
	Owners() []varplane.Owner
}

// serveExtensions holds one constructor per extension; see serveExtension.
var serveExtensions []func() serveExtension

// Run parses args, opens the store and serves until ctx ends (SIGINT or
// SIGTERM), then drains requests and closes the engine and the store.
func (c *ServeCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("serve", "[flags]", `
Run the varplane control plane: the HTTP API for reads ({base}?key=… and
{base}?group=…), the admin routes ({base}/admin/…), the live stream
({base}/watch), /healthz, /readyz and /metrics.

With no flags it listens on 127.0.0.1:8790 and keeps everything in an
append-only log file under ./.varplane/, so that a restart resumes from the
last activation. It stops cleanly on SIGINT or SIGTERM.

Stores (--store):
  file:PATH          append-only JSONL log, fsync before acknowledging (default)
  memory:            ephemeral: empty on every start; no replay
  redis://HOST:PORT  Redis as the shared store of record (rediss:// for TLS)
  postgres://HOST/DB PostgreSQL as the shared store of record (settings as URL parameters)`)
	var cfg serveConfig
	fs.StringVar(&cfg.addr, "addr", envOr(c.m.Getenv, "VARPLANE_ADDR", defaultAddr), "address to listen on; port 0 picks a free port (env VARPLANE_ADDR)")
	fs.StringVar(&cfg.base, "base", envOr(c.m.Getenv, "VARPLANE_BASE", defaultBase), "path to mount the var API under (env VARPLANE_BASE)")
	fs.StringVar(&cfg.store, "store", envOr(c.m.Getenv, "VARPLANE_STORE", defaultStore), "store URL: file:PATH, memory:, redis://… or postgres://… (env VARPLANE_STORE)")
	fs.StringVar(&cfg.documents, "documents", "", "directory of JSON Schemas (.json/.yaml); a file's path without extension is its schemaId")
	fs.StringVar(&cfg.tokens, "tokens", envOr(c.m.Getenv, "VARPLANE_TOKENS_FILE", ""), "file of accepted bearer tokens, one a line, # comments (env VARPLANE_TOKENS_FILE); without it every request is allowed")
	fs.Int64Var(&cfg.maxBodyBytes, "max-body-bytes", httpapi.DefaultMaxBodyBytes, "largest request body accepted; larger ones are 413")
	fs.IntVar(&cfg.limits.MaxDepth, "max-document-depth", varplane.DefaultMaxDepth, fmt.Sprintf("deepest nesting of objects and arrays in a document (at most %d)", varplane.MaxDepthCeiling))
	fs.IntVar(&cfg.limits.MaxStringBytes, "max-string-bytes", varplane.DefaultMaxStringBytes, "longest string or member name in a document, in bytes")
	fs.IntVar(&cfg.limits.MaxMembers, "max-members", varplane.DefaultMaxMembers, "most members of one object or elements of one array in a document")
	fs.IntVar(&cfg.maxSubs, "max-subscribers", push.DefaultMaxSubscribers, "most live-stream subscriptions (SSE, Connect, gRPC) at once")
	fs.IntVar(&cfg.maxSubsPerToken, "max-subscribers-per-token", 0, "most subscriptions one bearer token may hold at once (0: a tenth of --max-subscribers; -1: no per-token cap)")
	fs.StringVar(&cfg.allowedHosts, "allowed-hosts", envOr(c.m.Getenv, "VARPLANE_ALLOWED_HOSTS", ""), "comma-separated Host names answered besides loopback and the listen address (.example.com for subdomains, * for any) (env VARPLANE_ALLOWED_HOSTS)")
	fs.IntVar(&cfg.maxConns, "max-connections", wire.DefaultMaxConns, "most connections the listener holds open at once (HTTP and gRPC); past it new ones are closed at once")
	fs.IntVar(&cfg.maxConnsPerAddr, "max-connections-per-addr", wire.DefaultMaxConnsPerAddr, "most connections one client IP address holds open at once")
	fs.DurationVar(&cfg.maxConnAge, "max-connection-age", 0, "send HTTP/2 connections this old GOAWAY (their clients move to a new connection), and close every connection this old plus --max-connection-age-grace; 0: never")
	fs.DurationVar(&cfg.maxConnAgeGrace, "max-connection-age-grace", wire.DefaultMaxConnAgeGrace, "how long a connection at --max-connection-age has before it is closed")
	fs.DurationVar(&cfg.pingMinTime, "http2-ping-min-time", wire.DefaultPingMinTime, "an HTTP/2 client pinging more often than this (three times without data in between) is sent GOAWAY ENHANCE_YOUR_CALM and closed; negative: no limit")
	fs.StringVar(&cfg.origins, "trusted-origins", "", "comma-separated origins (https://console.example) whose pages may send writes across origins")
	fs.Int64Var(&cfg.gcHeadroom, "gc-headroom-bytes", defaultGCHeadroom, "let the heap grow at least this much between garbage collections (the collector's default once the live heap is larger); 0, or GOGC in the environment: the runtime's own setting")
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log format on stderr: text or json")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cfg.redis.register(fs)
	cfg.tls.register(fs, c.m.Getenv)
	exts := make([]serveExtension, 0, len(serveExtensions))
	for _, newExt := range serveExtensions {
		ext := newExt()
		ext.RegisterFlags(fs)
		exts = append(exts, ext)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(c.m.Stderr, cfg.logFormat, cfg.logLevel)
	if err != nil {
		return err
	}
	base, err := cleanBase(cfg.base)
	if err != nil {
		return &usageError{err: err}
	}
	if err := checkStore(fs, c.m.Getenv, cfg.store); err != nil {
		return err
	}
	if err := cfg.redis.check(); err != nil {
		return err
	}
	if err := checkReplicaStore(cfg.store, cfg.redis); err != nil {
		return err
	}
	if cfg.maxBodyBytes <= 0 {
		return usagef("--max-body-bytes must be positive")
	}
	if cfg.gcHeadroom < 0 {
		return usagef("--gc-headroom-bytes must not be negative")
	}
	if cfg.tlsConfig, err = cfg.tls.config(); err != nil {
		return err
	}
	if cfg.maxConns <= 0 || cfg.maxConnsPerAddr <= 0 {
		return usagef("--max-connections and --max-connections-per-addr must be positive")
	}
	if cfg.maxSubs <= 0 {
		return usagef("--max-subscribers must be positive")
	}
	if cfg.limits.MaxDepth <= 0 || cfg.limits.MaxStringBytes <= 0 || cfg.limits.MaxMembers <= 0 {
		return usagef("--max-document-depth, --max-string-bytes and --max-members must be positive")
	}
	cfg.limits.MaxBodyBytes = cfg.maxBodyBytes
	if err := cfg.limits.Validate(); err != nil {
		return usagef("%s", varplane.ErrorMessage(err))
	}
	return c.serve(ctx, cfg, base, log, exts)
}

func (c *ServeCommand) serve(ctx context.Context, cfg serveConfig, base string, log *slog.Logger, exts []serveExtension) (err error) {
	// Before the store opens: a replay of the log allocates as much as
	// any load.
	if stopGC, ok := gctune.Start(uint64(cfg.gcHeadroom)); ok {
		defer stopGC()
		log.Debug("garbage collector: heap headroom floor", "bytes", cfg.gcHeadroom)
	}
	openCtx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()

	// Inputs are checked before the store is opened, so that a typo in a
	// flag never leaves a half-started server behind.
	var validator varplane.Validator
	if cfg.documents != "" {
		reg, err := schema.LoadDir(openCtx, cfg.documents)
		if err != nil {
			return &usageError{err: fmt.Errorf("--documents: %w", err)}
		}
		validator = reg
		log.Info("schemas loaded", "dir", cfg.documents, "schemas", len(reg.IDs()))
	}
	var authz varplane.Authorizer
	if cfg.tokens != "" {
		grants, err := access.LoadTokenFile(cfg.tokens)
		if err != nil {
			return &usageError{err: fmt.Errorf("--tokens: %w", err)}
		}
		if len(grants) == 0 {
			return usagef("--tokens: %s holds no token", cfg.tokens)
		}
		a, err := access.Scoped(grants)
		if err != nil {
			return &usageError{err: fmt.Errorf("--tokens %s: %w", cfg.tokens, err)}
		}
		authz = a
		log.Info("bearer tokens loaded", "file", cfg.tokens, "tokens", len(grants))
	}

	store, err := openStore(openCtx, cfg.store, cfg.redis, log)
	if err != nil {
		// A URL or option the store refuses is the caller's mistake.
		if varplane.ErrorCode(err) == varplane.CodeBadRequest {
			return &usageError{err: err}
		}
		return err
	}
	defer func() {
		if cerr := store.Close(); cerr != nil {
			log.Error("close store", "err", cerr)
			err = errors.Join(err, fmt.Errorf("close store: %w", cerr))
		}
	}()
	var owners []varplane.Owner
	for _, ext := range exts {
		if o, ok := ext.(scopeOwner); ok {
			owners = append(owners, o.Owners()...)
		}
	}
	engine := varplane.NewEngine(store, varplane.Options{Validator: validator, Logger: log, Limits: cfg.limits, Owners: owners})
	defer engine.Close()
	hub := push.New(engine, push.Options{Logger: log, MaxSubscribers: cfg.maxSubs, MaxSubscribersPerToken: cfg.maxSubsPerToken})
	defer hub.Close()
	for _, ext := range exts {
		if a, ok := ext.(authorizing); ok {
			authz = a.Authorizer(engine, authz)
		}
	}

	rt := &serveRuntime{Engine: engine, Store: store, Hub: hub, Logger: log, Base: base, Authorizer: authz, TLS: cfg.tlsConfig,
		Listener: wire.ListenerOptions{MaxConns: cfg.maxConns, MaxConnsPerAddr: cfg.maxConnsPerAddr, MaxConnAge: cfg.maxConnAge,
			MaxConnAgeGrace: cfg.maxConnAgeGrace, Logger: log},
		HTTP2Guard: wire.NewHTTP2Guard(wire.HTTP2GuardOptions{PingMinTime: cfg.pingMinTime, MaxConnAge: cfg.maxConnAge})}
	if rt.Authorizer == nil {
		rt.Authorizer = varplane.AllowAll
	}
	var stops []func(context.Context) error
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		for i := len(stops) - 1; i >= 0; i-- {
			if serr := stops[i](sctx); serr != nil {
				log.Error("stop extension", "err", serr)
			}
		}
	}()
	for _, ext := range exts {
		stop, err := ext.Start(ctx, rt)
		if err != nil {
			return err
		}
		if stop != nil {
			stops = append(stops, stop)
		}
	}

	srv, api := newHTTPServer(cfg, base, rt, authz)
	defer api.Close()
	for _, register := range rt.metrics {
		register(api.Registry())
	}
	if err := srv.Open(); err != nil {
		return err
	}
	log.Info("varplane listening", "url", srv.URL(), "base", base, "store", redactURL(cfg.store), "source", store.Name())

	select {
	case <-ctx.Done():
		log.Info("shutting down: draining requests")
	case <-srv.Done():
		log.Error("the HTTP server stopped serving")
	}
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer scancel()
	if err := srv.Close(sctx); err != nil {
		log.Error("shutdown", "err", err)
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// newLogger returns the slog logger serve writes to w.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}
