package push

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collectors returns the hub's Prometheus collectors:
// varplane_push_subscribers_refused_total by the cap that refused
// (max-subscribers, max-subscribers-per-token, -per-addr, -per-connection),
// over every transport, and varplane_push_subscriptions_revoked_total. The
// number of live subscribers is the HTTP API's varplane_subscribers.
func (h *Hub) Collectors() []prometheus.Collector {
	refused := func(limit string, count func(Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "varplane_push_subscribers_refused_total",
			Help:        "Subscriptions refused 503 too-many-subscribers (SSE, Connect, gRPC), by the cap that refused them.",
			ConstLabels: prometheus.Labels{"limit": limit},
		}, func() float64 { return float64(count(h.Stats())) })
	}
	return []prometheus.Collector{
		refused(LimitSubscribers, func(s Stats) uint64 { return s.RefusedFull }),
		refused(LimitSubscribersPerToken, func(s Stats) uint64 { return s.RefusedPerToken }),
		refused(LimitSubscribersPerAddr, func(s Stats) uint64 { return s.RefusedPerAddr }),
		refused(LimitSubscribersPerConn, func(s Stats) uint64 { return s.RefusedPerConn }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "varplane_push_subscriptions_revoked_total",
			Help: "Subscriptions ended because their token no longer allowed them (revoked, expired or narrowed).",
		}, func() float64 { return float64(h.Stats().Revoked) }),
	}
}
