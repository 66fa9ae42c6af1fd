package file

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns the store's Prometheus collector: its fdatasyncs and
// the events they made durable (their ratio is the mean group-commit batch
// size), the size of its log, and the revision documents it holds in
// memory.
func (s *Store) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Store }

var (
	descFsyncs    = prometheus.NewDesc("varplane_store_fsyncs_total", "fsync calls made by the store.", nil, nil)
	descFsynced   = prometheus.NewDesc("varplane_store_fsynced_events_total", "Events made durable by the store's fsyncs; divided by varplane_store_fsyncs_total it is the mean fsync batch size.", nil, nil)
	descLogSize   = prometheus.NewDesc("varplane_file_log_bytes", "Size of the file store's log.", nil, nil)
	descBodies    = prometheus.NewDesc("varplane_file_bodies_resident", "Revision documents the file store holds in memory (heads, and revisions committed since the last compaction); the others are read from the log on use.", nil, nil)
	descBodyBytes = prometheus.NewDesc("varplane_file_bodies_resident_bytes", "Bytes of the revision documents the file store holds in memory.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFsyncs, descFsynced, descLogSize, descBodies, descBodyBytes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(descFsyncs, prometheus.CounterValue, float64(st.Fsyncs))
	ch <- prometheus.MustNewConstMetric(descFsynced, prometheus.CounterValue, float64(st.Commits))
	if n, err := c.s.LogSize(); err == nil {
		ch <- prometheus.MustNewConstMetric(descLogSize, prometheus.GaugeValue, float64(n))
	}
	b := c.s.Bodies()
	ch <- prometheus.MustNewConstMetric(descBodies, prometheus.GaugeValue, float64(b.Resident))
	ch <- prometheus.MustNewConstMetric(descBodyBytes, prometheus.GaugeValue, float64(b.ResidentBytes))
}
