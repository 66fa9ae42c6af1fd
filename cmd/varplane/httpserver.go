package main

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/store/file"
)

// newHTTPServer builds the var API handler over rt.Engine, with the live
// stream, the store's readiness and fsync counters, and rt.Mux for extension
// routes outside the base.
func newHTTPServer(cfg serveConfig, base string, rt *serveRuntime, authz httpapi.Authorizer) (*httpapi.Server, *httpapi.Handler) {
	opts := httpapi.Options{
		Base:         base,
		Authorizer:   authz,
		MaxBodyBytes: cfg.maxBodyBytes,
		Logger:       rt.Logger,
		Watch:        pushWatch(rt),
		Subscribers:  func() int { return int(rt.Hub.Stats().Subscribers) },
		// Writes from pages of other origins are refused unless listed.
		TrustedOrigins: splitList(cfg.origins),
	}
	if base == "" {
		opts.Base = "/"
	}
	if r, ok := rt.Store.(interface{ Ready(context.Context) error }); ok {
		opts.Ready = r.Ready
	}
	var rw *wireRedis
	if rs, replica, ok := redisStoreOf(rt.Store); ok {
		rw = &wireRedis{src: rs, flags: cfg.redis, replica: replica}
		opts.Ready = rw.ready
	}
	if fs, ok := rt.Store.(*file.Store); ok {
		opts.StoreStats = func() httpapi.StoreStats {
			st := fs.Stats()
			return httpapi.StoreStats{Fsyncs: st.Fsyncs, FsyncedEvents: st.Commits}
		}
	}
	api := httpapi.NewHandler(rt.Engine, opts)
	registerPushMetrics(api.Registry(), rt.Hub)
	if rw != nil {
		rw.mount(rt.Mux, api)
	}
	mountPostgres(rt.Mux, api, rt.Store)
	// Extensions registered their routes on rt.Mux; the var API takes every
	// other path. The mux's precedence (the most specific pattern wins)
	// keeps the two apart without an ordering rule.
	rt.Mux.Handle("/", api)
	srv := httpapi.NewServer(cfg.addr, rt.Mux)
	srv.Logger = rt.Logger
	srv.AllowedHosts = splitList(cfg.allowedHosts)
	// Live streams never become idle: end them when the drain begins so
	// that in-flight requests, not subscribers, decide how long it takes.
	srv.RegisterOnShutdown(rt.Hub.Close)
	return srv, api
}

// pushWatch serves GET {base}/watch from the hub, after httpapi parsed and
// authorized its targets (which the handler takes instead of parsing the
// query again).
func pushWatch(rt *serveRuntime) http.Handler {
	return push.NewSSEHandler(rt.Hub, push.SSEOptions{Logger: rt.Logger, Targets: httpapi.WatchTargets})
}

// registerPushMetrics exposes the hub's refusals on /metrics:
// varplane_push_subscribers_refused_total by the cap that refused
// (max-subscribers, max-subscribers-per-token), over every transport.
func registerPushMetrics(reg *prometheus.Registry, hub *push.Hub) {
	for limit, count := range map[string]func(push.Stats) uint64{
		push.LimitSubscribers:         func(s push.Stats) uint64 { return s.RefusedFull },
		push.LimitSubscribersPerToken: func(s push.Stats) uint64 { return s.RefusedPerToken },
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "varplane_push_subscribers_refused_total",
			Help:        "Subscriptions refused 503 too-many-subscribers (SSE, Connect, gRPC), by the cap that refused them.",
			ConstLabels: prometheus.Labels{"limit": limit},
		}, func() float64 { return float64(count(hub.Stats())) }))
	}
}
