package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/varplane/varplane"
)

// replicaCounter is one counter of a shared store's Stats (type S).
type replicaCounter[S any] struct {
	name, help string
	get        func(S) uint64
}

// replicaGauge is a gauge a store adds to the shared ones.
type replicaGauge struct {
	name, help string
	value      func() float64
}

// replicaCollector exports the figures of a shared store of record (Redis,
// PostgreSQL) under varplane_<store>_: the installed scopes, the largest lag,
// the scopes past each lag threshold, the last revalidation pass, the
// store's own gauges and its counters. It reads Stats and Lag once per
// scrape, so the figures of one scrape agree, and it never labels by
// scope, which keeps the series count fixed however many scopes are
// installed.
type replicaCollector[S any] struct {
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

// newReplicaCollector returns the collector of store ("redis", "postgres");
// server names the server in the help texts ("Redis", "PostgreSQL").
func newReplicaCollector[S any](store, server string, stats func() S, lag func() map[varplane.Scope]time.Duration,
	lastPass func(S) time.Duration, warn, escalate time.Duration, gauges []replicaGauge, counters []replicaCounter[S]) *replicaCollector[S] {
	g := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("varplane_"+store+"_"+name, help, labels, nil)
	}
	c := &replicaCollector[S]{
		stats: stats, lag: lag, lastPass: lastPass, warn: warn, escalate: escalate,
		installed:    g("installed_scopes", "Scopes whose head this instance holds in memory."),
		maxLag:       g("lag_max_seconds", "Largest time since "+server+" last confirmed an installed head."),
		lagging:      g("lagging_scopes", "Installed scopes not confirmed by "+server+" for longer than the warn or escalate threshold.", "threshold"),
		lastPassDesc: g("revalidation_last_pass_seconds", "Duration of the latest revalidation pass."),
	}
	for _, k := range gauges {
		c.gauges = append(c.gauges, g(k.name, k.help))
		c.gaugeValues = append(c.gaugeValues, k.value)
	}
	for _, k := range counters {
		c.counters = append(c.counters, g(k.name, k.help))
		c.counterGets = append(c.counterGets, k.get)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *replicaCollector[S]) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append(c.gauges, c.installed, c.maxLag, c.lagging, c.lastPassDesc) {
		ch <- d
	}
	for _, d := range c.counters {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *replicaCollector[S]) Collect(ch chan<- prometheus.Metric) {
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
