package postgres

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/varplane/varplane/internal/replica"
)

// Collector returns the store's Prometheus collector: its figures under
// varplane_postgres_ (the installed scopes, the lags against the store's
// LagWarn and LagEscalate, the last revalidation pass and the counters of
// Stats). It never labels by scope.
func (s *Store) Collector() prometheus.Collector {
	return replica.NewCollector("postgres", "PostgreSQL", s.Stats, s.Lag,
		func(st Stats) time.Duration { return st.LastPassDuration }, s.opts.LagWarn, s.opts.LagEscalate, nil,
		[]replica.Counter[Stats]{
			{Name: "commits_total", Help: "Mutations PostgreSQL committed.", Get: func(st Stats) uint64 { return st.Commits }},
			{Name: "commit_conflicts_total", Help: "Mutations refused for a generation mismatch.", Get: func(st Stats) uint64 { return st.CommitConflicts }},
			{Name: "commit_errors_total", Help: "Mutations that failed for another reason (the database unreachable or refusing); nothing of them was written.", Get: func(st Stats) uint64 { return st.CommitErrors }},
			{Name: "batches_total", Help: "Transactions that grouped several commits.", Get: func(st Stats) uint64 { return st.Batches }},
			{Name: "batched_commits_total", Help: "Commits run in those transactions.", Get: func(st Stats) uint64 { return st.BatchedCalls }},
			{Name: "batch_retries_total", Help: "Batches the server refused, whose commits ran again one by one.", Get: func(st Stats) uint64 { return st.BatchRetries }},
			{Name: "notifications_total", Help: "Notifications received.", Get: func(st Stats) uint64 { return st.Notifications }},
			{Name: "notification_reads_total", Help: "Scopes read because of a notification.", Get: func(st Stats) uint64 { return st.NotificationReads }},
			{Name: "log_follows_total", Help: "Of those, activations read from the log as the next commit of the installed head (the rest are read from the heads table).", Get: func(st Stats) uint64 { return st.LogFollows }},
			{Name: "notifications_dropped_total", Help: "Notifications dropped on a full queue (the next revalidation pass catches them).", Get: func(st Stats) uint64 { return st.NotificationsDropped }},
			{Name: "notify_errors_total", Help: "Invalidations of own commits whose sending failed.", Get: func(st Stats) uint64 { return st.NotifyErrors }},
			{Name: "revalidation_passes_total", Help: "Revalidation passes run.", Get: func(st Stats) uint64 { return st.RevalidationPasses }},
			{Name: "revalidation_changed_total", Help: "Installed heads a pass found changed (a commit no notification delivered).", Get: func(st Stats) uint64 { return st.ConfirmChanged }},
			{Name: "revalidation_errors_total", Help: "Revalidation queries that failed.", Get: func(st Stats) uint64 { return st.ConfirmErrors }},
			{Name: "cold_loads_total", Help: "Scopes read from PostgreSQL on first use.", Get: func(st Stats) uint64 { return st.ColdLoads }},
			{Name: "read_errors_total", Help: "Reads of PostgreSQL that failed.", Get: func(st Stats) uint64 { return st.ReadErrors }},
			{Name: "decode_errors_total", Help: "Rows that could not be decoded (left in place; their reads fail closed).", Get: func(st Stats) uint64 { return st.DecodeErrors }},
			{Name: "regressions_total", Help: "Heads PostgreSQL answered older than the installed one (a restore or failover lost a commit).", Get: func(st Stats) uint64 { return st.Regressions }},
			{Name: "listens_total", Help: "Successful (re)LISTENs on the notification channel.", Get: func(st Stats) uint64 { return st.Listens }},
		})
}

// ReadyDetails describes the store for /readyz (varplane.ReadyDetailer):
// its schema and settings, the scopes it holds, the largest lag and the
// (re)LISTENs so far.
func (s *Store) ReadyDetails() any {
	st := s.Stats()
	return ReadyDetails{
		Schema:             s.Schema(),
		ReadOnly:           s.ReadOnly(),
		RevalidateInterval: s.RevalidateInterval().String(),
		InstalledScopes:    st.Installed,
		MaxLagSeconds:      st.MaxLag.Seconds(),
		Listens:            st.Listens,
	}
}

// ReadyDetails is the "postgres" object of /readyz.
type ReadyDetails struct {
	Schema             string  `json:"schema"`
	ReadOnly           bool    `json:"readOnly"`
	RevalidateInterval string  `json:"revalidateInterval"`
	InstalledScopes    int     `json:"installedScopes"`
	MaxLagSeconds      float64 `json:"maxLagSeconds"`
	Listens            uint64  `json:"listens"` // successful (re)LISTENs: 0 with listen=false or before the first
}
