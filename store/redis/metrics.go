package redis

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/varplane/varplane/internal/replica"
)

// Collector returns the store's Prometheus collector: its figures under
// varplane_redis_ (the installed scopes, the lags against the store's
// LagWarn and LagEscalate, the last revalidation pass, the eviction policy
// and the counters of Stats). It never labels by scope.
func (s *Store) Collector() prometheus.Collector {
	evictionOK := func() float64 {
		if ok, _ := s.EvictionPolicyOK(); ok {
			return 1
		}
		return 0
	}
	return replica.NewCollector("redis", "Redis", s.Stats, s.Lag,
		func(st Stats) time.Duration { return st.LastPassDuration }, s.opts.LagWarn, s.opts.LagEscalate,
		[]replica.Gauge{{Name: "eviction_policy_ok", Help: "1 when every Redis node was last seen with maxmemory-policy noeviction, else 0 (under eviction_check=warn, an unreadable policy counts as 1).", Value: evictionOK}},
		[]replica.Counter[Stats]{
			{Name: "commits_total", Help: "Mutations acknowledged by Redis.", Get: func(st Stats) uint64 { return st.Commits }},
			{Name: "commit_conflicts_total", Help: "Mutations refused by Redis for a generation mismatch.", Get: func(st Stats) uint64 { return st.CommitConflicts }},
			{Name: "commit_errors_total", Help: "Mutations that failed for another reason (Redis unreachable, a script error); nothing of them was written.", Get: func(st Stats) uint64 { return st.CommitErrors }},
			{Name: "invalidations_total", Help: "Invalidation messages received.", Get: func(st Stats) uint64 { return st.Invalidations }},
			{Name: "invalidation_reads_total", Help: "Heads read from Redis because of an invalidation message.", Get: func(st Stats) uint64 { return st.InvalidationReads }},
			{Name: "invalidations_dropped_total", Help: "Invalidation messages dropped on a full queue (the next revalidation pass catches them).", Get: func(st Stats) uint64 { return st.InvalidationDropped }},
			{Name: "revalidation_passes_total", Help: "Revalidation passes run.", Get: func(st Stats) uint64 { return st.RevalidationPasses }},
			{Name: "revalidation_confirms_total", Help: "Conditional reads that found the installed head unchanged.", Get: func(st Stats) uint64 { return st.Confirmations }},
			{Name: "revalidation_changed_total", Help: "Conditional reads that found a different head (a change no message delivered).", Get: func(st Stats) uint64 { return st.ConfirmChanged }},
			{Name: "revalidation_errors_total", Help: "Conditional reads that failed.", Get: func(st Stats) uint64 { return st.ConfirmErrors }},
			{Name: "cold_loads_total", Help: "Scopes read from Redis on first use.", Get: func(st Stats) uint64 { return st.ColdLoads }},
			{Name: "read_errors_total", Help: "Reads of Redis that failed.", Get: func(st Stats) uint64 { return st.ReadErrors }},
			{Name: "decode_errors_total", Help: "Values in Redis that could not be decoded (left in place; their reads fail closed).", Get: func(st Stats) uint64 { return st.DecodeErrors }},
			{Name: "regressions_total", Help: "Heads Redis answered older than the installed one (a failover lost a commit).", Get: func(st Stats) uint64 { return st.Regressions }},
			{Name: "subscriptions_total", Help: "Successful (re)subscriptions to the invalidation channel.", Get: func(st Stats) uint64 { return st.Subscriptions }},
			{Name: "eviction_checks_total", Help: "maxmemory-policy checks run.", Get: func(st Stats) uint64 { return st.EvictionChecks }},
		})
}

// ReadyDetails describes the store for /readyz (varplane.ReadyDetailer):
// its settings, the eviction policy last seen, the scopes it holds and the
// largest lag. The eviction indicator is not a readiness rule: a node that
// may evict is an alert (these details, varplane_redis_eviction_policy_ok
// and an ERROR log), not a reason to take a replica out of rotation while
// it serves what it installed.
func (s *Store) ReadyDetails() any {
	ok, policy := s.EvictionPolicyOK()
	st := s.Stats()
	return ReadyDetails{
		EvictionCheck:      s.opts.EvictionCheck,
		EvictionPolicyOK:   ok,
		EvictionPolicy:     policy,
		ReadOnly:           s.opts.ReadOnly,
		RevalidateInterval: s.opts.RevalidateInterval.String(),
		InstalledScopes:    st.Installed,
		MaxLagSeconds:      st.MaxLag.Seconds(),
	}
}

// ReadyDetails is the "redis" object of /readyz.
type ReadyDetails struct {
	EvictionCheck      string  `json:"evictionCheck"`
	EvictionPolicyOK   bool    `json:"evictionPolicyOK"`
	EvictionPolicy     string  `json:"evictionPolicy"`
	ReadOnly           bool    `json:"readOnly"`
	RevalidateInterval string  `json:"revalidateInterval"`
	InstalledScopes    int     `json:"installedScopes"`
	MaxLagSeconds      float64 `json:"maxLagSeconds"`
}
