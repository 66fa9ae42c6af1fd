package rpc

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collectors returns the gRPC server's Prometheus collectors:
// varplane_grpc_streams (Subscribe and Watch streams open),
// varplane_grpc_watches (watches open over every Watch stream),
// varplane_grpc_refused_total by reason (request-timeout: a stream whose
// request did not come in time) and varplane_grpc_streams_reset_total by
// reason (write-timeout: a peer that stopped reading).
func (g *GRPCServer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "varplane_grpc_streams", Help: "gRPC streams (Subscribe and Watch) open now."},
			func() float64 { return float64(g.Stats().Streams) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "varplane_grpc_watches", Help: "Watches open now over every gRPC Watch stream."},
			func() float64 { return float64(g.Stats().Watches) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "varplane_grpc_refused_total", Help: "gRPC streams refused before any subscription, by reason.",
			ConstLabels: prometheus.Labels{"reason": "request-timeout"}}, func() float64 { return float64(g.Stats().RequestTimeouts) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "varplane_grpc_streams_reset_total",
			Help:        "gRPC streams the server reset, by reason (write-timeout: a message write waited --grpc-write-timeout on a peer that stopped reading).",
			ConstLabels: prometheus.Labels{"reason": "write-timeout"}}, func() float64 { return float64(g.Stats().WriteTimeouts) }),
	}
}
