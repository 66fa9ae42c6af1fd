package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/rpc"
	"github.com/varplane/varplane/store/file"
)

// newHTTPServer builds the var API handler over rt.Engine, with the live
// stream, the store's readiness and fsync counters, and rt.Mux for extension
// routes outside the base.
func newHTTPServer(cfg serveConfig, base string, rt *serveRuntime, authz varplane.Authorizer) (*httpapi.Server, *httpapi.Handler) {
	opts := httpapi.Options{
		Base:         base,
		Authorizer:   authz,
		MaxBodyBytes: cfg.maxBodyBytes,
		Logger:       rt.Logger,
		Hub:          rt.Hub,
		Control:      rt.Control,
		Access:       rt.Access,
		Values:       rt.Values,
		// Writes from pages of other origins are refused unless listed.
		TrustedOrigins: splitList(cfg.origins),
	}
	if base == "" {
		opts.Base = "/"
	}
	if r, ok := rt.Store.(varplane.Readier); ok {
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
	for _, mount := range rt.mounts {
		api.Mount(mount(api))
	}
	var handler http.Handler = api
	if rw != nil {
		handler = rw.mount(handler, api)
	}
	handler = mountPostgres(handler, api, rt.Store)
	if rt.GRPC != nil {
		// One port: gRPC requests (h2c) go to grpc-go, the rest to the API.
		handler = rt.GRPC.Route(handler)
	}
	srv := httpapi.NewServer(cfg.addr, handler)
	srv.Logger = rt.Logger
	srv.AllowedHosts = splitList(cfg.allowedHosts)
	srv.TLS = rt.TLS
	srv.Listener = rt.Listener
	srv.HTTP2Guard = rt.HTTP2Guard
	registerHTTP2GuardMetrics(api.Registry(), rt.HTTP2Guard)
	if rt.GRPC != nil {
		srv.H2C, srv.HTTP2 = true, rt.GRPC.HTTP2Config()
		registerGRPCMetrics(api.Registry(), rt.GRPC)
	}
	registerListenerMetrics(api.Registry(), srv.ListenerStats)
	// Live streams never become idle: end them when the drain begins so
	// that in-flight requests, not subscribers, decide how long it takes.
	srv.RegisterOnShutdown(rt.Hub.Close)
	srv.RegisterOnShutdown(api.CloseStreams)
	return srv, api
}

// registerPushMetrics exposes the hub's refusals on /metrics:
// varplane_push_subscribers_refused_total by the cap that refused
// (max-subscribers, max-subscribers-per-token), over every transport.
func registerPushMetrics(reg *prometheus.Registry, hub *push.Hub) {
	registerCounters(reg, "varplane_push_subscribers_refused_total",
		"Subscriptions refused 503 too-many-subscribers (SSE, Connect, gRPC), by the cap that refused them.", "limit",
		map[string]func() uint64{
			push.LimitSubscribers:         func() uint64 { return hub.Stats().RefusedFull },
			push.LimitSubscribersPerToken: func() uint64 { return hub.Stats().RefusedPerToken },
		})
}

// registerGRPCMetrics exposes the gRPC server's gauges and refusals:
// varplane_grpc_streams (Subscribe and Watch streams open),
// varplane_grpc_watches (watches open over every Watch stream) and
// varplane_grpc_refused_total by reason (request-timeout: a stream whose
// request did not come in time) and varplane_grpc_streams_reset_total by
// reason (write-timeout: a peer that stopped reading).
func registerGRPCMetrics(reg *prometheus.Registry, g *rpc.GRPCServer) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "varplane_grpc_streams", Help: "gRPC streams (Subscribe and Watch) open now."},
			func() float64 { return float64(g.Stats().Streams) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "varplane_grpc_watches", Help: "Watches open now over every gRPC Watch stream."},
			func() float64 { return float64(g.Stats().Watches) }))
	registerCounters(reg, "varplane_grpc_refused_total", "gRPC streams refused before any subscription, by reason.", "reason",
		map[string]func() uint64{"request-timeout": func() uint64 { return g.Stats().RequestTimeouts }})
	registerCounters(reg, "varplane_grpc_streams_reset_total",
		"gRPC streams the server reset, by reason (write-timeout: a message write waited --grpc-write-timeout on a peer that stopped reading).", "reason",
		map[string]func() uint64{"write-timeout": func() uint64 { return g.Stats().WriteTimeouts }})
}

// registerListenerMetrics exposes the main listener's connection caps:
// varplane_connections (open now), varplane_connections_refused_total by
// the cap (max-connections, max-connections-per-addr) and
// varplane_accept_errors_total (failed accepts retried after a pause:
// EMFILE and the like) and varplane_connections_expired_total
// (--max-connection-age).
func registerListenerMetrics(reg *prometheus.Registry, stats func() wire.ListenerStats) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "varplane_connections", Help: "Connections open on the main listener (HTTP and gRPC)."},
			func() float64 { return float64(stats().Open) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "varplane_accept_errors_total", Help: "Failed accepts on the main listener, retried after a pause (EMFILE, ENFILE…)."},
			func() float64 { return float64(stats().AcceptErrors) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "varplane_connections_expired_total", Help: "Connections closed at --max-connection-age."},
			func() float64 { return float64(stats().Expired) }))
	registerCounters(reg, "varplane_connections_refused_total", "Connections closed as soon as accepted, by the cap that refused them.", "limit",
		map[string]func() uint64{
			"max-connections":          func() uint64 { return stats().RefusedTotal },
			"max-connections-per-addr": func() uint64 { return stats().RefusedPerAddr },
		})
}

// registerHTTP2GuardMetrics exposes the HTTP/2 connection policies:
// varplane_http2_goaway_total by reason (too-many-pings: GOAWAY
// ENHANCE_YOUR_CALM to a client pinging faster than --http2-ping-min-time;
// max-connection-age: the graceful GOAWAY at --max-connection-age), over
// every listener.
func registerHTTP2GuardMetrics(reg *prometheus.Registry, g *wire.HTTP2Guard) {
	if g == nil {
		return
	}
	registerCounters(reg, "varplane_http2_goaway_total", "GOAWAY frames the server sent to end HTTP/2 connections, by reason.", "reason",
		map[string]func() uint64{
			"too-many-pings":     func() uint64 { return g.Stats().TooManyPings },
			"max-connection-age": func() uint64 { return g.Stats().AgedGoAways },
		})
}

// registerCounters registers one counter of name per entry of counts,
// labeled label=key, each read from its function at scrape time.
func registerCounters(reg *prometheus.Registry, name, help, label string, counts map[string]func() uint64) {
	for value, count := range counts {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: name, Help: help, ConstLabels: prometheus.Labels{label: value},
		}, func() float64 { return float64(count()) }))
	}
}
