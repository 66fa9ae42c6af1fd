package httpapi

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/varplane/varplane"
)

// unmatchedRoute labels requests that matched no route, so that random paths
// cannot grow the label set.
const unmatchedRoute = "unmatched"

type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	commits   *prometheus.CounterVec
	commitDur *prometheus.HistogramVec

	// byRoute caches the per-route children so the hot path does no label
	// hashing; codes are looked up in a small sync.Map per route.
	mu      sync.Mutex
	byRoute map[string]*routeMetrics

	subscribers atomic.Pointer[func() int]

	// commitOps and commitKinds cache the children of commitDur by op and
	// of commits by kind (a handful each), so that a commit does no label
	// hashing either.
	commitOps   sync.Map // string → prometheus.Observer
	commitKinds sync.Map // varplane.EventKind → prometheus.Counter
}

type routeMetrics struct {
	m        *metrics
	route    string
	duration prometheus.Observer
	// codes holds one counter per status 100..599, created on first use;
	// an array index keeps the hot path free of boxing and hashing.
	codes [500]atomic.Pointer[prometheus.Counter]
}

func newMetrics(engine *varplane.Engine, opts *Options) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "varplane_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "varplane_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route"}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "varplane_commits_total",
			Help: "Accepted commits reported by the engine, by event kind (activated, deactivated).",
		}, []string{"kind"}),
		commitDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "varplane_store_commit_duration_seconds",
			Help:    "Time spent in engine mutations (store commit included), by operation.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"op"}),
		byRoute: map[string]*routeMetrics{},
	}
	m.reg.MustRegister(m.requests, m.duration, m.commits, m.commitDur,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	heads := opts.ScopesWithHead
	if heads == nil {
		heads = func() int { return countHeads(engine) }
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "varplane_scopes_with_head",
		Help: "Scopes that currently serve a head (-1 when the store could not be listed).",
	}, func() float64 { return float64(heads()) }))

	if opts.Subscribers != nil {
		m.subscribers.Store(&opts.Subscribers)
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "varplane_subscribers",
		Help: "Live push subscribers (0 when no push layer is attached).",
	}, func() float64 {
		if fn := m.subscribers.Load(); fn != nil {
			return float64((*fn)())
		}
		return 0
	}))

	return m
}

// countHeads lists the store's scopes and counts those with a head. It is
// called per scrape; a store that cannot be listed reports -1.
func countHeads(engine *varplane.Engine) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st := engine.Store()
	scopes, err := st.Scopes(ctx)
	if err != nil {
		return -1
	}
	n := 0
	for _, s := range scopes {
		state, err := st.State(ctx, s)
		if err != nil {
			return -1
		}
		if state.Head != nil {
			n++
		}
	}
	return n
}

// route returns the cached metrics of a route pattern, creating them on
// first use.
func (m *metrics) route(pattern string) *routeMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	rm := m.byRoute[pattern]
	if rm == nil {
		rm = &routeMetrics{m: m, route: pattern, duration: m.duration.WithLabelValues(pattern)}
		m.byRoute[pattern] = rm
	}
	return rm
}

func (rm *routeMetrics) observe(status int, d time.Duration) {
	rm.duration.Observe(d.Seconds())
	if status < 100 || status > 599 {
		rm.m.requests.WithLabelValues(rm.route, strconv.Itoa(status)).Inc()
		return
	}
	slot := &rm.codes[status-100]
	c := slot.Load()
	if c == nil {
		// Racing creators get the same child from the vec; either pointer works.
		child := rm.m.requests.WithLabelValues(rm.route, strconv.Itoa(status))
		slot.Store(&child)
		c = &child
	}
	(*c).Inc()
}

func (m *metrics) commit(c varplane.Commit) {
	v, ok := m.commitKinds.Load(c.Kind)
	if !ok {
		// Racing creators get the same child from the vec.
		v, _ = m.commitKinds.LoadOrStore(c.Kind, m.commits.WithLabelValues(string(c.Kind)))
	}
	v.(prometheus.Counter).Inc()
}

// timeCommit observes the duration of an engine mutation; op is one of the
// handlers' constant names.
func (m *metrics) timeCommit(op string, start time.Time) {
	v, ok := m.commitOps.Load(op)
	if !ok {
		v, _ = m.commitOps.LoadOrStore(op, m.commitDur.WithLabelValues(op))
	}
	v.(prometheus.Observer).Observe(time.Since(start).Seconds())
}
