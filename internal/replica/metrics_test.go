package replica_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/replica"
)

// stats are a shared store's figures, as redis.Stats and postgres.Stats
// hold them.
type stats struct {
	Invalidations, Passes uint64
	LastPass              time.Duration
}

// fakeFigures are a store's figures with fixed values.
type fakeFigures struct {
	stats stats
	lag   map[varplane.Scope]time.Duration
	ok    bool
}

// collector is the collector of f, as the Redis store builds its own.
func collector(f fakeFigures) prometheus.Collector {
	ok := func() float64 {
		if f.ok {
			return 1
		}
		return 0
	}
	return replica.NewCollector("redis", "Redis", func() stats { return f.stats }, func() map[varplane.Scope]time.Duration { return f.lag },
		func(s stats) time.Duration { return s.LastPass }, time.Minute, 5*time.Minute,
		[]replica.Gauge{{Name: "eviction_policy_ok", Help: "policy", Value: ok}},
		[]replica.Counter[stats]{
			{Name: "invalidations_total", Help: "invalidations", Get: func(s stats) uint64 { return s.Invalidations }},
			{Name: "revalidation_passes_total", Help: "passes", Get: func(s stats) uint64 { return s.Passes }},
		})
}

// TestCollector checks the exported values and that the series count does
// not grow with the number of installed scopes.
func TestCollector(t *testing.T) {
	gather := func(t *testing.T, f fakeFigures) map[string]float64 {
		t.Helper()
		reg := prometheus.NewRegistry()
		reg.MustRegister(collector(f))
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, fam := range fams {
			for _, m := range fam.GetMetric() {
				name := fam.GetName()
				for _, l := range m.GetLabel() {
					name += "{" + l.GetName() + "=" + l.GetValue() + "}"
				}
				switch {
				case m.GetGauge() != nil:
					out[name] = m.GetGauge().GetValue()
				case m.GetCounter() != nil:
					out[name] = m.GetCounter().GetValue()
				}
			}
		}
		return out
	}
	f := fakeFigures{
		stats: stats{Invalidations: 7, Passes: 3, LastPass: 250 * time.Millisecond},
		lag:   map[varplane.Scope]time.Duration{"a": time.Second, "b": 2 * time.Minute, "c": 10 * time.Minute},
		ok:    true,
	}
	got := gather(t, f)
	for name, want := range map[string]float64{
		"varplane_redis_eviction_policy_ok":                 1,
		"varplane_redis_installed_scopes":                   3,
		"varplane_redis_lag_max_seconds":                    600,
		"varplane_redis_lagging_scopes{threshold=warn}":     2,
		"varplane_redis_lagging_scopes{threshold=escalate}": 1,
		"varplane_redis_revalidation_last_pass_seconds":     0.25,
		"varplane_redis_invalidations_total":                7,
		"varplane_redis_revalidation_passes_total":          3,
	} {
		if g, ok := got[name]; !ok || g != want {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, want)
		}
	}

	f.ok = false
	f.lag = map[varplane.Scope]time.Duration{}
	for i := range 1000 {
		f.lag[varplane.Scope(fmt.Sprintf("s.%d", i))] = time.Millisecond
	}
	more := gather(t, f)
	if len(more) != len(got) {
		t.Errorf("%d series with 1000 scopes, %d with 3: the series count depends on the scopes", len(more), len(got))
	}
	if more["varplane_redis_eviction_policy_ok"] != 0 {
		t.Errorf("varplane_redis_eviction_policy_ok = %v with a failed check, want 0", more["varplane_redis_eviction_policy_ok"])
	}
}
