package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/control/hook"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/instance"
	"github.com/varplane/varplane/internal/gctune"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/retention"
	"github.com/varplane/varplane/rpc"
	"github.com/varplane/varplane/schema"
	"github.com/varplane/varplane/ui"
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
	// consolePath is where serve mounts the console.
	consolePath = "/ui"
	// valuesPagePath is the values service's page: a redirect to the
	// console's Components page with the console on (it has the page's
	// features with sessions, CSRF tokens and post/redirect/get), the
	// service's own page with --ui=false.
	valuesPagePath = "/.configuration"
)

// ServeCommand runs the control plane: one engine over one store, served by
// one HTTP API (and the gRPC transport on the same port).
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
	// The per-address and per-connection caps (0: push's defaults);
	// streamMemory, when set, sizes maxSubs (push.SubscriptionCost each)
	// unless --max-subscribers is given; recheckInterval is the hub's.
	maxSubsPerAddr, maxSubsPerConn int
	streamMemory                   int64
	recheckInterval                time.Duration
	// maxConns and maxConnsPerAddr cap the main listener's connections.
	maxConns        int
	maxConnsPerAddr int
	maxConnAge      time.Duration
	maxConnAgeGrace time.Duration
	pingMinTime     time.Duration
	tls             tlsServeFlags
	tlsConfig       *tls.Config // built from tls after parsing

	ui              bool            // --ui: the console under /ui/
	control         bool            // --control: reviewed changes under {base}/control
	changeExpiry    time.Duration   // --change-expiry
	checks          listFlag        // --check NAME=URL: check webhooks
	hooks           []control.Check // built from checks after parsing
	gateChecks      listFlag        // --gate NAME=URL: rollout gates only
	gates           map[string]control.Gate
	checkTimeout    time.Duration // --check-timeout
	rolloutInterval time.Duration // --rollout-interval
	detectTimeout   time.Duration // --detect-timeout
	accessControl   bool          // --access-control: principals held in the store
	components      string        // --components: the values service's deployment
	rpcAddr         string        // --rpc-addr: an extra gRPC/Connect listener
	grpc            rpc.GRPCOptions
	reclaimInterval time.Duration // --reclaim-interval
	policy          policyFlags   // the retention policy

	// --ui-max-sessions, --ui-max-sessions-per-identity, --ui-session-ttl
	uiSessions, uiSessionsPerIdentity int
	uiSessionTTL                      time.Duration
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
  redis://HOST:PORT  Redis as the shared store of record (rediss:// for TLS; settings as URL parameters)
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
	fs.IntVar(&cfg.maxSubsPerAddr, "max-subscribers-per-addr", 0, "most subscriptions one client IP address may hold at once (0: a quarter of --max-subscribers; -1: no per-address cap)")
	fs.IntVar(&cfg.maxSubsPerConn, "max-subscribers-per-connection", 0, "most subscriptions one connection may hold at once, over all its streams and watches (0: a tenth of --max-subscribers; -1: no cap)")
	fs.Int64Var(&cfg.streamMemory, "stream-memory-bytes", 0, fmt.Sprintf("memory budget of the live streams: sets --max-subscribers to this over %d bytes a subscription, unless --max-subscribers is given (0: --max-subscribers alone)", push.SubscriptionCost))
	fs.DurationVar(&cfg.recheckInterval, "stream-recheck-interval", push.DefaultRecheckInterval, "ask the authorizer again this often whether each live stream's token still allows it (a revocation in the store is also applied as soon as the store has it); a refused stream ends")
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
	fs.BoolVar(&cfg.ui, "ui", true, "serve the operator console at /ui/ (sign in with an API token)")
	fs.IntVar(&cfg.uiSessions, "ui-max-sessions", ui.DefaultMaxSessions, "most console sessions at once; a sign-in to a table full of other identities' sessions is 503 too-many-subscribers")
	fs.IntVar(&cfg.uiSessionsPerIdentity, "ui-max-sessions-per-identity", ui.DefaultMaxSessionsPerIdentity, "most console sessions of one identity; its next sign-in ends its own oldest session")
	fs.DurationVar(&cfg.uiSessionTTL, "ui-session-ttl", ui.DefaultSessionTTL, "how long a console session lasts from its sign-in")
	fs.BoolVar(&cfg.control, "control", true, "serve the control API under {base}/control (reviewed changes, review policies, paged history, diff)")
	fs.DurationVar(&cfg.changeExpiry, "change-expiry", control.DefaultExpireAfter, "how long after it was proposed an open change request expires")
	fs.Var(&cfg.checks, "check", "NAME=URL: a check webhook every proposed change is posted to (repeatable); it answers the issues it finds and the heads it read, which are compared again after each publish (env VARPLANE_CHECK_TOKEN: a bearer token sent to it)")
	fs.Var(&cfg.gateChecks, "gate", "NAME=URL: a check a rollout may name among its gates (repeatable), asked during each bake and never on proposals: a check webhook or a Prometheus query URL (/api/v1/query?query=…: any series is a firing alert); each --check may be named too (env VARPLANE_CHECK_TOKEN: a bearer token sent to it)")
	fs.DurationVar(&cfg.rolloutInterval, "rollout-interval", 5*time.Second, "how often the rollouts in progress are driven: their gates judged, their steps moved on (docs/rollouts.md)")
	fs.DurationVar(&cfg.checkTimeout, "check-timeout", hook.DefaultTimeout, "how long one call of a check webhook may take; past it the proposal fails with check-unavailable")
	fs.DurationVar(&cfg.detectTimeout, "detect-timeout", control.DefaultDetectTimeout, "how long the comparison of the checks' heads after a publish may take; past it the change is marked review-needed (detection-timed-out)")
	fs.BoolVar(&cfg.accessControl, "access-control", false, "authorize by the principals held in the store (varplane token, varplane migrate bootstrap) as well as --tokens: a token is looked up in the tokens file first, then in the store; serves {base}/access/tokens")
	fs.StringVar(&cfg.components, "components", "", "deployment declaration (JSON, from `varplane config deploy`); serves the component configuration values service at /configuration/values/ and its page at /.configuration (with the console on, a redirect to /ui/components)")
	registerRPCFlags(fs, &cfg.rpcAddr, &cfg.grpc)
	fs.DurationVar(&cfg.reclaimInterval, "reclaim-interval", retention.DefaultInterval, "time between reclamation passes, the first one interval after start (0: none); on the file and memory stores no pass runs unless this is given")
	cfg.policy.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(c.m.Stderr, cfg.logFormat, cfg.logLevel)
	if err != nil {
		return err
	}
	// Every line of the server's output follows --log-format: the
	// libraries' fallbacks (slog.Default and the log package) and grpc-go's
	// own logger write through log too, for as long as serve runs.
	prev := slog.Default()
	defer restoreDefaultLog(prev, stdlog.Writer(), stdlog.Flags())
	slog.SetDefault(log)
	rpc.LogTo(log)
	defer rpc.LogTo(prev)
	base, err := cleanBase(cfg.base)
	if err != nil {
		return &usageError{err: err}
	}
	if err := checkStore(fs, c.m.Getenv, cfg.store); err != nil {
		return err
	}
	if cfg.store, err = cfg.redis.apply(fs, cfg.store); err != nil {
		return err
	}
	if err := checkReplicaStore(cfg.store, cfg.redis); err != nil {
		return err
	}
	if err := cfg.retentionDefaults(fs); err != nil {
		return err
	}
	if cfg.streamMemory > 0 && !flagGiven(fs, c.m.Getenv, "max-subscribers") {
		cfg.maxSubs = int(max(1, cfg.streamMemory/push.SubscriptionCost))
	}
	if err := cfg.check(); err != nil {
		return err
	}
	if cfg.hooks, cfg.gates, err = checkHooks(cfg, c.m.Getenv, log); err != nil {
		return err
	}
	return c.serve(ctx, cfg, base, log)
}

// retentionDefaults turns reclamation off on the stores whose log book is
// kept forever (file, and memory) unless --reclaim-interval asks for it:
// the reference's log is appended forever, and a revision staged for review
// must not disappear because an hour went by. Redis and PostgreSQL keep the
// reference's defaults. A retention policy flag given where no pass will
// run is refused, so that nobody believes revisions are being reclaimed.
func (cfg *serveConfig) retentionDefaults(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	kind, _, _ := strings.Cut(cfg.store, ":")
	if kind != "file" && kind != "memory" || set["reclaim-interval"] {
		return nil
	}
	cfg.reclaimInterval = 0
	for _, name := range []string{"retain-count", "retain-min-age", "orphan-age"} {
		if set[name] {
			return usagef("--%s: the %s store reclaims nothing unless --reclaim-interval is given (its log book is kept whole by default; see docs/retention.md)", name, kind)
		}
	}
	return nil
}

// check refuses the values serve cannot run with, as usage errors, before
// anything is opened.
func (cfg *serveConfig) check() (err error) {
	if err := cfg.redis.check(); err != nil {
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
	if cfg.uiSessions <= 0 || cfg.uiSessionsPerIdentity <= 0 || cfg.uiSessionTTL <= 0 {
		return usagef("--ui-max-sessions, --ui-max-sessions-per-identity and --ui-session-ttl must be positive")
	}
	if cfg.streamMemory < 0 || cfg.recheckInterval <= 0 {
		return usagef("--stream-memory-bytes must not be negative, and --stream-recheck-interval must be positive")
	}
	if cfg.limits.MaxDepth <= 0 || cfg.limits.MaxStringBytes <= 0 || cfg.limits.MaxMembers <= 0 {
		return usagef("--max-document-depth, --max-string-bytes and --max-members must be positive")
	}
	cfg.limits.MaxBodyBytes = cfg.maxBodyBytes
	if err := cfg.limits.Validate(); err != nil {
		return usagef("%s", varplane.ErrorMessage(err))
	}
	if cfg.control && cfg.changeExpiry <= 0 {
		return usagef("--change-expiry must be positive")
	}
	if cfg.checkTimeout <= 0 || cfg.detectTimeout <= 0 {
		return usagef("--check-timeout and --detect-timeout must be positive")
	}
	if cfg.rolloutInterval < 100*time.Millisecond || cfg.rolloutInterval > time.Hour {
		return usagef("--rollout-interval must be from 100ms to 1h")
	}
	if (len(cfg.checks) > 0 || len(cfg.gateChecks) > 0) && !cfg.control {
		return usagef("--check and --gate need the control API (--control)")
	}
	if cfg.reclaimInterval < 0 {
		return usagef("--reclaim-interval must not be negative")
	}
	return cfg.policy.check()
}

// serve builds the server by hand, in order: the inputs (schemas, tokens,
// the deployment), the store, the owners of reserved scopes, the engine,
// the push hub, the services (control, access, values, retention), the
// HTTP API, the gRPC transport and the server. It serves until ctx ends,
// then drains the server and closes the rest in the reverse order (the
// deferred calls).
func (c *ServeCommand) serve(ctx context.Context, cfg serveConfig, base string, log *slog.Logger) (err error) {
	// Before the store opens: a replay of the log allocates as much as
	// any load.
	if stopGC, ok := gctune.Start(uint64(cfg.gcHeadroom)); ok {
		defer stopGC()
		log.Debug("garbage collector: heap headroom floor", "bytes", cfg.gcHeadroom)
	}
	openCtx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()

	// The inputs are checked before the store is opened, so that a typo in
	// a flag never leaves a half-started server behind.
	validator, err := loadSchemas(openCtx, cfg.documents, log)
	if err != nil {
		return err
	}
	tokens, err := loadTokens(cfg.tokens, log)
	if err != nil {
		return err
	}
	dep, err := loadDeployment(&cfg, c.m.Getenv)
	if err != nil {
		return err
	}

	// The store. A read replica checks its local copies against the
	// document limits.
	cfg.redis.replica.limits = cfg.limits
	store, collectors, err := openStore(openCtx, cfg.store, cfg.redis, log)
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

	// The owners of reserved scopes: the access control's principals
	// (whether or not it is on, so that nothing but it ever writes what a
	// server may later trust), the control records and the scopes under a
	// review policy, the values service's configurations.
	owners := []varplane.Owner{access.Owner}
	guard := control.NewGuard()
	var binder varplane.Binder // the schema bindings are the control service's records
	if cfg.control {
		owners = append(owners, guard.Owners()...)
		binder = guard
	}
	if dep != nil {
		owners = append(owners, config.Owner)
	}

	// The engine and the push hub every transport shares, so that a
	// commit made through one reaches the subscribers of all.
	engine := varplane.NewEngine(store, varplane.Options{Validator: validator, Logger: log, Limits: cfg.limits, Owners: owners, Binder: binder})
	defer engine.Close()
	// A commit to the access scope (a principal revoked) rechecks every
	// stream at once; the periodic pass catches what changes no scope.
	hub := push.New(engine, push.Options{Logger: log, MaxSubscribers: cfg.maxSubs, MaxSubscribersPerToken: cfg.maxSubsPerToken,
		MaxSubscribersPerAddr: cfg.maxSubsPerAddr, MaxSubscribersPerConn: cfg.maxSubsPerConn,
		RecheckInterval: cfg.recheckInterval, RecheckOn: func(s varplane.Scope) bool { return s == access.Scope }})
	defer hub.Close()

	// The services.
	authz := serveAuthorizer(tokens, cfg.accessControl, store, log)
	if tokens != nil {
		defer watchTokens(ctx, cfg.tokens, tokens, log)()
	}
	var ctl *control.Service
	if cfg.control {
		// Propagation and canary windows read the instances' heartbeats and
		// reports from the store of record; a store without them says so
		// (control.ErrNoHeartbeats) instead of counting 0 of 0. The
		// policies record is written by the first policy, never at start.
		ctl = control.New(engine, guard, control.Options{ExpireAfter: cfg.changeExpiry, Logger: log, Instances: control.StoreInstances(engine),
			Checks: cfg.hooks, DetectTimeout: cfg.detectTimeout, Gates: cfg.gates})
		defer runControlPasses(ctx, ctl, store, cfg.rolloutInterval, log)()
		log.Info("control API served", "path", base+"/control/", "change-expiry", cfg.changeExpiry)
	}
	var principals *access.Service
	if cfg.accessControl {
		principals = access.NewService(engine)
		logPrincipals(ctx, principals, base, log)
	}
	var values *config.Service
	if dep != nil {
		if values, err = config.NewService(engine, dep); err != nil {
			return fmt.Errorf("--components %s: %w", cfg.components, err)
		}
		log.Info("component configuration served", "from", cfg.components, "components", len(dep.Components), "environment", dep.Environment, "path", "/configuration/values/")
	}
	runner, stopRetention, err := startRetention(ctx, cfg, engine, store, log)
	if err != nil {
		return err
	}
	defer stopRetention()

	// The HTTP API: every route behind one chain.
	opts := httpapi.Options{
		Base:         base,
		Authorizer:   authz,
		MaxBodyBytes: cfg.maxBodyBytes,
		Logger:       log,
		Hub:          hub,
		Control:      ctl,
		Access:       principals,
		Values:       values,
		// Writes from pages of other origins are refused unless listed.
		TrustedOrigins: splitList(cfg.origins),
	}
	// An OpenFeature evaluation with a targeting key is served the
	// revision of a running rollout as the embedded instance serves an
	// entity key (a read replica's labels take part, as in GetFor).
	var labels map[string]string
	if base == "" {
		opts.Base = "/"
	}
	if rs, ok := store.(*instance.Store); ok {
		// A read replica counts what it holds: listing the store at each
		// scrape would load every scope. Its store follows what the
		// live streams watch beside what the cache holds.
		opts.ScopesWithHead = rs.Cache().WithHead
		rs.Cache().Follow(hub.Watching)
		labels = rs.Cache().Labels()
	}
	opts.Rollouts = varplane.NewRolloutPicker(engine, labels)
	api := httpapi.NewHandler(engine, opts)
	defer api.Close()
	collectors = append(collectors, hub.Collectors()...)
	if runner != nil {
		collectors = append(collectors, runner.Collector())
	}
	if cfg.ui {
		api.Mount(consolePath+"/", ui.New(ui.Options{API: api, Base: base, Prefix: consolePath, Authorizer: authz, Limits: engine.Limits(), Logger: log,
			MaxSessions: cfg.uiSessions, MaxSessionsPerIdentity: cfg.uiSessionsPerIdentity, SessionTTL: cfg.uiSessionTTL}))
		api.Mount(consolePath, http.RedirectHandler(consolePath+"/", http.StatusMovedPermanently))
		log.Info("operator console served", "path", consolePath+"/")
	}
	if values != nil {
		// The values service publishes a page: the console's Components
		// page when the console is on, its own page otherwise.
		page := ui.ComponentsRedirect(consolePath)
		if !cfg.ui {
			page = ui.ValuesPage(values, ui.ValuesPageOptions{Authorizer: authz, Limits: cfg.limits, Logger: log})
		}
		api.Mount(valuesPagePath, page)
	}

	// The gRPC transport: Connect, gRPC-Web and HTTP/1.1 through the API,
	// gRPC (HTTP/2) beside it on the same port, and --rpc-addr.
	listener := wire.ListenerOptions{MaxConns: cfg.maxConns, MaxConnsPerAddr: cfg.maxConnsPerAddr, MaxConnAge: cfg.maxConnAge,
		MaxConnAgeGrace: cfg.maxConnAgeGrace, Logger: log}
	guard2 := wire.NewHTTP2Guard(wire.HTTP2GuardOptions{PingMinTime: cfg.pingMinTime, MaxConnAge: cfg.maxConnAge})
	rpcPath, connect := rpc.NewHandlerWith(hub, authz, rpc.HandlerOptions{Logger: log, RequestTimeout: cfg.grpc.RequestTimeout})
	api.Mount(rpcPath, connect)
	grpcOpts := cfg.grpc
	grpcOpts.Logger = log
	grpcSrv := rpc.NewGRPCServer(hub, authz, grpcOpts)
	defer closeWithin(ctx, "gRPC server", grpcSrv.Close, log)
	collectors = append(collectors, grpcSrv.Collectors()...)
	if cfg.rpcAddr != "" && cfg.rpcAddr != "off" {
		rs := rpc.NewServer(cfg.rpcAddr, hub, authz)
		rs.GRPC = grpcOpts
		rs.TLS, rs.Listener, rs.HTTP2Guard = cfg.tlsConfig, listener, guard2
		if err := rs.Open(); err != nil {
			return err
		}
		defer closeWithin(ctx, "gRPC listener", rs.Close, log)
		log.Info("gRPC Subscribe listening", "url", rs.URL(), "path", rpcPath)
	}

	// The server: one port for HTTP/1.1, h2c and TLS; gRPC requests go to
	// grpc-go, the rest to the API.
	srv := httpapi.NewServer(cfg.addr, grpcSrv.Route(api))
	srv.Logger = log
	srv.AllowedHosts = splitList(cfg.allowedHosts)
	srv.TLS = cfg.tlsConfig
	srv.Listener = listener
	srv.HTTP2Guard = guard2
	srv.H2C, srv.HTTP2 = true, grpcSrv.HTTP2Config()
	// Live streams never become idle: end them when the drain begins so
	// that in-flight requests, not subscribers, decide how long it takes.
	srv.RegisterOnShutdown(hub.Close)
	srv.RegisterOnShutdown(api.CloseStreams)
	collectors = append(collectors, srv.Collectors()...)
	api.Registry().MustRegister(collectors...)
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

// closeWithin calls close with the shutdown deadline and logs its error.
func closeWithin(ctx context.Context, what string, close func(context.Context) error, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := close(sctx); err != nil {
		log.Error("close "+what, "err", err)
	}
}

// loadSchemas loads the JSON Schemas of --documents (none without it).
func loadSchemas(ctx context.Context, dir string, log *slog.Logger) (varplane.Validator, error) {
	if dir == "" {
		return nil, nil
	}
	reg, err := schema.LoadDir(ctx, dir)
	if err != nil {
		return nil, &usageError{err: fmt.Errorf("--documents: %w", err)}
	}
	log.Info("schemas loaded", "dir", dir, "schemas", len(reg.IDs()))
	return reg, nil
}

// loadTokens loads the tokens file of --tokens (nil without it).
func loadTokens(path string, log *slog.Logger) (*access.ScopedAuthorizer, error) {
	if path == "" {
		return nil, nil
	}
	grants, err := access.LoadTokenFile(path)
	if err != nil {
		return nil, &usageError{err: fmt.Errorf("--tokens: %w", err)}
	}
	if len(grants) == 0 {
		return nil, usagef("--tokens: %s holds no token", path)
	}
	a, err := access.Scoped(grants)
	if err != nil {
		return nil, &usageError{err: fmt.Errorf("--tokens %s: %w", path, err)}
	}
	log.Info("bearer tokens loaded", "file", path, "tokens", len(grants))
	return a, nil
}

// serveAuthorizer is the one authorizer every entrance of serve asks: the
// tokens file, combined with the principals held in the store under
// --access-control (access.Combine), and varplane.AllowAll without either,
// with a warning that points at --tokens.
func serveAuthorizer(tokens *access.ScopedAuthorizer, accessControl bool, store varplane.Store, log *slog.Logger) varplane.Authorizer {
	switch {
	case accessControl:
		return access.Combine(tokens, access.NewAuthorizer(store))
	case tokens != nil:
		return tokens
	}
	log.Warn("no --tokens: every request is allowed, as the anonymous identity; give a tokens file (or --access-control) before this server is reachable by anyone else")
	return varplane.AllowAll
}

// logPrincipals says how many principals the store holds for
// --access-control, and warns when there is none yet.
func logPrincipals(ctx context.Context, svc *access.Service, base string, log *slog.Logger) {
	n := 0
	if list, err := svc.List(ctx); err == nil {
		n = len(list)
	}
	log.Info("access control in the store", "scope", string(access.Scope), "principals", n, "path", base+"/access/tokens")
	if n == 0 {
		log.Warn("access control: the store holds no principal yet; name the first administrator with `varplane migrate bootstrap`")
	}
}

// restoreDefaultLog puts back the process's default loggers as they were
// before serve (an in-process serve, in tests, must leave them): slog's,
// and the log package's output and flags, which slog.SetDefault redirects.
func restoreDefaultLog(l *slog.Logger, w io.Writer, flags int) {
	slog.SetDefault(l)
	stdlog.SetOutput(w)
	stdlog.SetFlags(flags)
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

// checkHooks builds the --check webhooks, in the order given; a name given
// twice is a usage error. Each is logged by name, host and path (never
// with the URL's user information or query, which may hold a secret).
func checkHooks(cfg serveConfig, getenv func(string) string, log *slog.Logger) ([]control.Check, map[string]control.Gate, error) {
	var out []control.Check
	gates := map[string]control.Gate{}
	for _, list := range []struct {
		flag  string
		specs []string
	}{{"--check", cfg.checks}, {"--gate", cfg.gateChecks}} {
		for _, spec := range list.specs {
			name, target, ok := strings.Cut(spec, "=")
			if !ok {
				return nil, nil, usagef("%s: want NAME=URL", list.flag)
			}
			if _, seen := gates[name]; seen {
				return nil, nil, usagef("%s %s: the name is given twice", list.flag, name)
			}
			chk, err := hook.New(name, target, hook.Options{Timeout: cfg.checkTimeout, Token: getenv("VARPLANE_CHECK_TOKEN"), Logger: log})
			if err != nil {
				return nil, nil, usagef("%s: %v", list.flag, err)
			}
			log.Info("check webhook", "check", name, "url", chk.Where(), "timeout", cfg.checkTimeout, "proposals", list.flag == "--check")
			// Every check is a gate a rollout may name; only --check is
			// asked on proposals.
			gates[name] = chk
			if list.flag == "--check" {
				out = append(out, chk)
			}
		}
	}
	return out, gates, nil
}

// loadDeployment reads the values service's deployment declaration: the
// file --components names, or else the variable the reference system
// deploys its values service with (config.ValuesVariables: ours, then
// TOA_CONFIGURATION_VALUES), whose content is the declaration itself. It
// answers nil when none is given; cfg.components then names the source
// for the log and errors.
func loadDeployment(cfg *serveConfig, getenv func(string) string) (*config.Deployment, error) {
	if cfg.components != "" {
		dep, err := config.LoadDeployment(cfg.components)
		if err != nil {
			return nil, &usageError{err: fmt.Errorf("--components: %w", err)}
		}
		return dep, nil
	}
	for _, name := range config.ValuesVariables {
		text := getenv(name)
		if text == "" {
			continue
		}
		cfg.components = "$" + name
		dep, err := config.ParseDeployment(cfg.components+".json", []byte(text))
		if err != nil {
			return nil, &usageError{err: fmt.Errorf("%s: %w", name, err)}
		}
		return dep, nil
	}
	return nil, nil
}

// tokensPollInterval is how often serve looks at the tokens file for a
// change (tokensFileState).
const tokensPollInterval = 2 * time.Second

// watchTokens reloads the tokens file into tokens on SIGHUP and when the
// file changes, until ctx ends or the returned stop is called. A file that
// does not load (unreadable, a bad line, no token) leaves the tokens in
// force and is logged at ERROR; a reload is logged at INFO with how many
// tokens were added and removed (by position, never a token). A removed
// token is refused from the next request on, and its open streams and
// console sessions end at their next authorization check
// (--stream-recheck-interval).
func watchTokens(ctx context.Context, path string, tokens *access.ScopedAuthorizer, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	last := tokensFileState(path)
	go func() {
		defer close(done)
		defer signal.Stop(hup)
		tick := time.NewTicker(tokensPollInterval)
		defer tick.Stop()
		for {
			why := "the file changed"
			select {
			case <-ctx.Done():
				return
			case <-hup:
				why = "SIGHUP"
			case <-tick.C:
				if tokensFileState(path) == last {
					continue
				}
			}
			last = tokensFileState(path)
			before := tokens.Len()
			grants, err := access.LoadTokenFile(path)
			if err == nil && len(grants) == 0 {
				err = fmt.Errorf("%s holds no token", path)
			}
			if err == nil {
				err = tokens.Replace(grants)
			}
			if err != nil {
				log.Error("tokens file not reloaded; the tokens in force stay", "file", path, "trigger", why, "err", err)
				continue
			}
			log.Info("bearer tokens reloaded", "file", path, "trigger", why, "tokens", tokens.Len(), "before", before)
		}
	}()
	return func() { cancel(); <-done }
}

// tokensFileState is what tells a changed tokens file without reading it:
// its file (a rename puts another in place), size and modification time
// ("" when it cannot be looked at). The file is read only to reload it.
func tokensFileState(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	ino := uint64(0)
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = sys.Ino
	}
	return fmt.Sprintf("%d %d %d", ino, st.Size(), st.ModTime().UnixNano())
}
