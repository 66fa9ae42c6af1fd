package retention

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns the runner's Prometheus collector: the revision bodies
// its passes reclaimed, the deletions that failed, and when the last pass
// started and how long it took.
func (r *Runner) Collector() prometheus.Collector { return collector{r} }

type collector struct{ r *Runner }

var (
	descReclaimed = prometheus.NewDesc("varplane_retention_revisions_reclaimed_total", "Revision bodies reclaimed by retention passes.", nil, nil)
	descFailed    = prometheus.NewDesc("varplane_retention_deletions_failed_total", "Revision body deletions that failed (retried by the next pass).", nil, nil)
	descLastPass  = prometheus.NewDesc("varplane_retention_last_pass_timestamp_seconds", "When the last reclamation pass started (0: none yet).", nil, nil)
	descDuration  = prometheus.NewDesc("varplane_retention_last_pass_duration_seconds", "How long the last reclamation pass took.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReclaimed, descFailed, descLastPass, descDuration} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	m := c.r.Metrics()
	var last float64
	if !m.LastPass.IsZero() {
		last = float64(m.LastPass.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(descReclaimed, prometheus.CounterValue, float64(m.Reclaimed))
	ch <- prometheus.MustNewConstMetric(descFailed, prometheus.CounterValue, float64(m.DeletionsFailed))
	ch <- prometheus.MustNewConstMetric(descLastPass, prometheus.GaugeValue, last)
	ch <- prometheus.MustNewConstMetric(descDuration, prometheus.GaugeValue, m.LastDuration.Seconds())
}
