package replica

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/varplane/varplane"
)

// Counter is one counter of a shared store's Stats (type S): its name
// under varplane_<store>_, its help, and how to read it.
type Counter[S any] struct {
	Name, Help string
	Get        func(S) uint64
}

// Gauge is a gauge a store adds to the shared ones.
type Gauge struct {
	Name, Help string
	Value      func() float64
}

// Collector exports the figures of a shared store of record (Redis,
// PostgreSQL) under varplane_<store>_: the installed scopes, the largest lag,
// the scopes past each lag threshold, the last revalidation pass, the
// store's own gauges and its counters. It reads Stats and Lag once per
// scrape, so the figures of one scrape agree, and it never labels by
// scope, which keeps the series count fixed however many scopes are
// installed.
type Collector[S any] struct {
	stats          func() S
	lag            func() map[varplane.Scope]time.Duration
	lastPass       func(S) time.Duration
	warn, escalate time.Duration

	installed, maxLag, lagging, lastPassDesc *prometheus.Desc
	gauges                                   []*prometheus.Desc
	gaugeValues                              []func() float64
	counters                                 []*prometheus.Desc
	counterGets                              []func(S) uint64
}

// NewCollector returns the collector of store ("redis", "postgres"); server
// names the server in the help texts ("Redis", "PostgreSQL"). stats and lag
// are read once per scrape; lastPass picks the duration of the latest
// revalidation pass out of the stats; warn and escalate are the store's lag
// thresholds.
func NewCollector[S any](store, server string, stats func() S, lag func() map[varplane.Scope]time.Duration,
	lastPass func(S) time.Duration, warn, escalate time.Duration, gauges []Gauge, counters []Counter[S]) *Collector[S] {
	g := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("varplane_"+store+"_"+name, help, labels, nil)
	}
	c := &Collector[S]{
		stats: stats, lag: lag, lastPass: lastPass, warn: warn, escalate: escalate,
		installed:    g("installed_scopes", "Scopes whose head this instance holds in memory."),
		maxLag:       g("lag_max_seconds", "Largest time since "+server+" last confirmed an installed head."),
		lagging:      g("lagging_scopes", "Installed scopes not confirmed by "+server+" for longer than the warn or escalate threshold.", "threshold"),
		lastPassDesc: g("revalidation_last_pass_seconds", "Duration of the latest revalidation pass."),
	}
	for _, k := range gauges {
		c.gauges = append(c.gauges, g(k.Name, k.Help))
		c.gaugeValues = append(c.gaugeValues, k.Value)
	}
	for _, k := range counters {
		c.counters = append(c.counters, g(k.Name, k.Help))
		c.counterGets = append(c.counterGets, k.Get)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector[S]) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append(c.gauges, c.installed, c.maxLag, c.lagging, c.lastPassDesc) {
		ch <- d
	}
	for _, d := range c.counters {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector[S]) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	lags := c.lag()
	var maxLag time.Duration
	var warn, escalate int
	for _, l := range lags {
		maxLag = max(maxLag, l)
		if l > c.warn {
			warn++
		}
		if l > c.escalate {
			escalate++
		}
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for i, d := range c.gauges {
		gauge(d, c.gaugeValues[i]())
	}
	gauge(c.installed, float64(len(lags)))
	gauge(c.maxLag, maxLag.Seconds())
	gauge(c.lagging, float64(warn), "warn")
	gauge(c.lagging, float64(escalate), "escalate")
	gauge(c.lastPassDesc, c.lastPass(st).Seconds())
	for i, d := range c.counters {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(c.counterGets[i](st)))
	}
}
