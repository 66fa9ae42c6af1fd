package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collectors returns the server's Prometheus collectors: the main
// listener's connections (varplane_connections open now,
// varplane_connections_refused_total by the cap, max-connections or
// max-connections-per-addr, varplane_accept_errors_total for failed
// accepts retried after a pause, varplane_connections_expired_total at the
// maximum connection age) and, with an HTTP2Guard, varplane_http2_goaway_total
// by reason (too-many-pings, max-connection-age).
func (s *Server) Collectors() []prometheus.Collector {
	stats := s.ListenerStats
	counter := func(name, help, label, value string, count func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{label: value}},
			func() float64 { return float64(count()) })
	}
	const refused = "Connections closed as soon as accepted, by the cap that refused them."
	out := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "varplane_connections", Help: "Connections open on the main listener (HTTP and gRPC)."},
			func() float64 { return float64(stats().Open) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "varplane_accept_errors_total", Help: "Failed accepts on the main listener, retried after a pause (EMFILE, ENFILE…)."},
			func() float64 { return float64(stats().AcceptErrors) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "varplane_connections_expired_total", Help: "Connections closed at --max-connection-age."},
			func() float64 { return float64(stats().Expired) }),
		counter("varplane_connections_refused_total", refused, "limit", "max-connections", func() uint64 { return stats().RefusedTotal }),
		counter("varplane_connections_refused_total", refused, "limit", "max-connections-per-addr", func() uint64 { return stats().RefusedPerAddr }),
	}
	if g := s.HTTP2Guard; g != nil {
		const goaway = "GOAWAY frames the server sent to end HTTP/2 connections, by reason."
		out = append(out,
			counter("varplane_http2_goaway_total", goaway, "reason", "too-many-pings", func() uint64 { return g.Stats().TooManyPings }),
			counter("varplane_http2_goaway_total", goaway, "reason", "max-connection-age", func() uint64 { return g.Stats().AgedGoAways }))
	}
	return out
}
