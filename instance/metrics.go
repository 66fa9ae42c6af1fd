package instance

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns the cache's Prometheus collector, under
// varplane_instance_: readiness, the documents held, the oldest lag (a
// gauge), the lags at the last pass (a histogram) and the counters of the
// rules. No series is labelled by scope.
func (c *Cache[T]) Collector() prometheus.Collector { return newCollector(c.Stats) }

type collector struct {
	stats                        func() Stats
	ready, docs, maxLag, lagHist *prometheus.Desc
	counters                     []counter
}

type counter struct {
	desc *prometheus.Desc
	get  func(Stats) uint64
}

func newCollector(stats func() Stats) *collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("varplane_instance_"+name, help, nil, nil)
	}
	ic := &collector{stats: stats,
		ready:   d("ready", "1 once the root document is installed."),
		docs:    d("documents", "Documents the cache holds."),
		maxLag:  d("lag_max_seconds", "Oldest time since the store last confirmed a held document, at the last pass."),
		lagHist: d("lag_seconds", "Lags of the held documents at the last pass."),
	}
	for _, x := range []struct {
		name, help string
		get        func(Stats) uint64
	}{
		{"cold_loads_total", "Documents loaded on first need.", func(s Stats) uint64 { return s.ColdLoads }},
		{"local_loads_total", "Cold loads served from the local copy.", func(s Stats) uint64 { return s.LocalLoads }},
		{"local_refused_total", "Local copies ignored: too large, not JSON within the limits, or a digest that is not their revision.", func(s Stats) uint64 { return s.LocalRefused }},
		{"cold_load_timeouts_total", "Reads that answered 503 after the cold-load timeout.", func(s Stats) uint64 { return s.ColdTimeouts }},
		{"evictions_total", "Documents dropped beyond a family's bound.", func(s Stats) uint64 { return s.Evictions }},
		{"decode_errors_total", "Documents the decoder refused (installed as failed).", func(s Stats) uint64 { return s.DecodeErrors }},
		{"disappeared_total", "Documents that disappeared from the store after they were seen.", func(s Stats) uint64 { return s.Disappeared }},
		{"regressions_total", "Documents the store answered at a lower generation.", func(s Stats) uint64 { return s.Regressions }},
		{"passes_total", "Revalidation passes.", func(s Stats) uint64 { return s.Passes }},
		{"passes_abandoned_total", "Passes abandoned for confirming nothing for 30s with no read in flight.", func(s Stats) uint64 { return s.Abandoned }},
	} {
		ic.counters = append(ic.counters, counter{d(x.name, x.help), x.get})
	}
	return ic
}

// Describe implements prometheus.Collector.
func (ic *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{ic.ready, ic.docs, ic.maxLag, ic.lagHist} {
		ch <- d
	}
	for _, c := range ic.counters {
		ch <- c.desc
	}
}

// Collect implements prometheus.Collector.
func (ic *collector) Collect(ch chan<- prometheus.Metric) {
	st := ic.stats()
	ready := 0.0
	if st.Ready {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(ic.ready, prometheus.GaugeValue, ready)
	ch <- prometheus.MustNewConstMetric(ic.docs, prometheus.GaugeValue, float64(st.Installed))
	ch <- prometheus.MustNewConstMetric(ic.maxLag, prometheus.GaugeValue, st.MaxLag.Seconds())
	buckets := map[float64]uint64{}
	var count uint64
	for i, b := range LagBuckets {
		count += st.LagHistogram[i]
		buckets[b.Seconds()] = count
	}
	count += st.LagHistogram[len(LagBuckets)]
	ch <- prometheus.MustNewConstHistogram(ic.lagHist, count, 0, buckets)
	for _, c := range ic.counters {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.get(st)))
	}
}
