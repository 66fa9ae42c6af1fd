package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/redis"
)

// redisFlags are serve's --redis-* flags. They apply to a redis:// store
// only; checkStore refuses them with any other store.
type redisFlags struct {
	evict      string
	revalidate time.Duration
	readOnly   bool
}

// register adds the --redis-* flags to fs.
func (f *redisFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.evict, "redis-eviction-check", redis.EvictionCheckFail, "with a redis:// store: fail (refuse to start unless maxmemory-policy is noeviction) or warn (log it, for managed Redis that hides INFO/CONFIG)")
	fs.DurationVar(&f.revalidate, "redis-revalidate-interval", redis.DefaultRevalidateInterval, "with a redis:// store: how often every installed head is confirmed with Redis, which bounds how long a lost invalidation goes unnoticed (10ms to 5m)")
	fs.BoolVar(&f.readOnly, "redis-read-only", false, "with a redis:// store: a data-plane replica that serves reads and the live stream and refuses every mutation (400 store-unsupported)")
}

// check refuses values the store would refuse or silently change, so a typo
// is a usage error before anything is opened. An interval above the
// store's maximum is refused rather than clamped: the operator asked for a
// staleness bound the server would not keep.
func (f *redisFlags) check() error {
	if f.evict != redis.EvictionCheckFail && f.evict != redis.EvictionCheckWarn {
		return usagef("--redis-eviction-check %q: want fail or warn", f.evict)
	}
	if f.revalidate < redis.MinRevalidateInterval || f.revalidate > redis.MaxRevalidateInterval {
		return usagef("--redis-revalidate-interval %v: want %v to %v", f.revalidate, redis.MinRevalidateInterval, redis.MaxRevalidateInterval)
	}
	return nil
}

// options returns the store options the flags ask for.
func (f redisFlags) options(log *slog.Logger) redis.Options {
	return redis.Options{
		Logger:             log,
		EvictionCheck:      f.evict,
		RevalidateInterval: f.revalidate,
		ReadOnly:           f.readOnly,
	}
}

// redisFigures is what serve reads from a Redis store for /metrics and
// /readyz; *redis.Store implements it.
type redisFigures interface {
	Stats() redis.Stats
	Lag() map[varplane.Scope]time.Duration
	EvictionPolicyOK() (bool, string)
}

var _ redisFigures = (*redis.Store)(nil)

// wireRedis adds the Redis store's readiness check, metrics and /readyz
// details to the HTTP API being built. opts is completed before the handler
// exists; mount runs once it does.
type wireRedis struct {
	src   redisFigures
	flags redisFlags
}

// ready is the Options.Ready hook. Under --redis-eviction-check fail a node
// that may evict keeps the instance out of rotation (503, the policy under
// checks.ready); under warn the operator accepted an unverified policy, so
// it shows only in the details.
func (w wireRedis) ready(context.Context) error {
	if w.flags.evict != redis.EvictionCheckFail {
		return nil
	}
	if ok, msg := w.src.EvictionPolicyOK(); !ok {
		return errors.New(msg)
	}
	return nil
}

// mount registers the store's collectors on the handler's registry and
// serves /readyz with the store's details on mux (the handler's own /readyz
// decides the status; the wrapper adds a "redis" object to its body).
func (w wireRedis) mount(mux *http.ServeMux, api *httpapi.Handler) {
	api.Registry().MustRegister(newRedisCollector(w.src, redis.DefaultLagWarn, redis.DefaultLagEscalate))
	mux.Handle("GET /readyz", readyzWithRedis(api, w))
}

// redisReadyDetails is the "redis" object of /readyz.
type redisReadyDetails struct {
	EvictionCheck      string  `json:"evictionCheck"`
	EvictionPolicyOK   bool    `json:"evictionPolicyOK"`
	EvictionPolicy     string  `json:"evictionPolicy"`
	ReadOnly           bool    `json:"readOnly"`
	RevalidateInterval string  `json:"revalidateInterval"`
	InstalledScopes    int     `json:"installedScopes"`
	MaxLagSeconds      float64 `json:"maxLagSeconds"`
}

// readyzBody is httpapi's /readyz body plus the Redis details.
type readyzBody struct {
	httpapi.ReadyResponse
	Redis redisReadyDetails `json:"redis"`
}

// readyzWithRedis answers /readyz through next (so its status, checks,
// metrics and logs stay the handler's) and adds the Redis details to the
// body. A body it cannot read (a HEAD request) passes through unchanged.
func readyzWithRedis(next http.Handler, w wireRedis) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		buf := &bufferedResponse{header: http.Header{}}
		next.ServeHTTP(buf, r)
		status := buf.status
		if status == 0 {
			status = http.StatusOK
		}
		body := buf.body.Bytes()
		var res readyzBody
		if err := json.Unmarshal(body, &res.ReadyResponse); err == nil && res.Status != "" {
			ok, detail := w.src.EvictionPolicyOK()
			st := w.src.Stats()
			res.Redis = redisReadyDetails{
				EvictionCheck:      w.flags.evict,
				EvictionPolicyOK:   ok,
				EvictionPolicy:     detail,
				ReadOnly:           w.flags.readOnly,
				RevalidateInterval: w.flags.revalidate.String(),
				InstalledScopes:    st.Installed,
				MaxLagSeconds:      st.MaxLag.Seconds(),
			}
			if b, err := json.Marshal(res); err == nil {
				body = append(b, '\n')
				buf.header.Del("Content-Length")
			}
		}
		for k, v := range buf.header {
			rw.Header()[k] = v
		}
		rw.WriteHeader(status)
		_, _ = rw.Write(body)
	})
}

// bufferedResponse holds a small response (the /readyz body) so that it
// can be extended before it is sent.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

// redisCollector exports a Redis store's counters and gauges. It reads
// Stats and Lag once per scrape, so the figures of one scrape agree, and it
// never labels by scope: per-scope lag is summarised as the largest lag and
// the number of scopes past each log threshold, which keeps the series
// count fixed however many scopes are installed.
type redisCollector struct {
	src            redisFigures
	warn, escalate time.Duration

	evictionOK, installed, maxLag, lagging, lastPass *prometheus.Desc
	counters                                         []redisCounter
}

// redisCounter is one counter of redis.Stats.
type redisCounter struct {
	desc *prometheus.Desc
	get  func(redis.Stats) uint64
}

func newRedisCollector(src redisFigures, warn, escalate time.Duration) *redisCollector {
	g := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("varplane_redis_"+name, help, labels, nil)
	}
	c := &redisCollector{
		src: src, warn: warn, escalate: escalate,
		evictionOK: g("eviction_policy_ok", "1 when every Redis node was last seen with maxmemory-policy noeviction, else 0 (under --redis-eviction-check warn, an unreadable policy counts as 1)."),
		installed:  g("installed_scopes", "Scopes whose head this instance holds in memory."),
		maxLag:     g("lag_max_seconds", "Largest time since Redis last confirmed an installed head."),
		lagging:    g("lagging_scopes", "Installed scopes not confirmed by Redis for longer than the warn or escalate threshold.", "threshold"),
		lastPass:   g("revalidation_last_pass_seconds", "Duration of the latest revalidation pass."),
	}
	for _, k := range []struct {
		name, help string
		get        func(redis.Stats) uint64
	}{
		{"commits_total", "Mutations acknowledged by Redis.", func(s redis.Stats) uint64 { return s.Commits }},
		{"commit_conflicts_total", "Mutations refused by Redis for a generation mismatch.", func(s redis.Stats) uint64 { return s.CommitConflicts }},
		{"commit_errors_total", "Mutations that failed for another reason (Redis unreachable, a script error); nothing of them was written.", func(s redis.Stats) uint64 { return s.CommitErrors }},
		{"invalidations_total", "Invalidation messages received.", func(s redis.Stats) uint64 { return s.Invalidations }},
		{"invalidation_reads_total", "Heads read from Redis because of an invalidation message.", func(s redis.Stats) uint64 { return s.InvalidationReads }},
		{"invalidations_dropped_total", "Invalidation messages dropped on a full queue (the next revalidation pass catches them).", func(s redis.Stats) uint64 { return s.InvalidationDropped }},
		{"revalidation_passes_total", "Revalidation passes run.", func(s redis.Stats) uint64 { return s.RevalidationPasses }},
		{"revalidation_confirms_total", "Conditional reads that found the installed head unchanged.", func(s redis.Stats) uint64 { return s.Confirmations }},
		{"revalidation_changed_total", "Conditional reads that found a different head (a change no message delivered).", func(s redis.Stats) uint64 { return s.ConfirmChanged }},
		{"revalidation_errors_total", "Conditional reads that failed.", func(s redis.Stats) uint64 { return s.ConfirmErrors }},
		{"cold_loads_total", "Scopes read from Redis on first use.", func(s redis.Stats) uint64 { return s.ColdLoads }},
		{"read_errors_total", "Reads of Redis that failed.", func(s redis.Stats) uint64 { return s.ReadErrors }},
		{"decode_errors_total", "Values in Redis that could not be decoded (left in place; their reads fail closed).", func(s redis.Stats) uint64 { return s.DecodeErrors }},
		{"regressions_total", "Heads Redis answered older than the installed one (a failover lost a commit).", func(s redis.Stats) uint64 { return s.Regressions }},
		{"subscriptions_total", "Successful (re)subscriptions to the invalidation channel.", func(s redis.Stats) uint64 { return s.Subscriptions }},
		{"eviction_checks_total", "maxmemory-policy checks run.", func(s redis.Stats) uint64 { return s.EvictionChecks }},
	} {
		c.counters = append(c.counters, redisCounter{desc: g(k.name, k.help), get: k.get})
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *redisCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.evictionOK, c.installed, c.maxLag, c.lagging, c.lastPass} {
		ch <- d
	}
	for _, k := range c.counters {
		ch <- k.desc
	}
}

// Collect implements prometheus.Collector.
func (c *redisCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	lags := c.src.Lag()
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
	ok, _ := c.src.EvictionPolicyOK()
	okv := 0.0
	if ok {
		okv = 1
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.evictionOK, okv)
	gauge(c.installed, float64(len(lags)))
	gauge(c.maxLag, maxLag.Seconds())
	gauge(c.lagging, float64(warn), "warn")
	gauge(c.lagging, float64(escalate), "escalate")
	gauge(c.lastPass, st.LastPassDuration.Seconds())
	for _, k := range c.counters {
		ch <- prometheus.MustNewConstMetric(k.desc, prometheus.CounterValue, float64(k.get(st)))
	}
}
