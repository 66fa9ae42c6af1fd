package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/postgres"
)

// openPostgres opens the PostgreSQL store a --store postgres://… URL names.
// Its settings (schema, pool sizes, timeouts, read_only) are URL
// parameters, so a URL the store refuses (an unknown parameter, a bad
// value) is a usage error naming it, before anything is started; a
// database that cannot be reached, or whose schema is newer than this
// binary's, is an error of its own.
func openPostgres(ctx context.Context, spec string, log *slog.Logger) (varplane.Store, error) {
	s, err := postgres.Open(ctx, spec, postgres.Options{Logger: log})
	if err != nil {
		if varplane.ErrorCode(err) == varplane.CodeBadRequest {
			return nil, usagef("--store: %s", varplane.ErrorMessage(err))
		}
		return nil, fmt.Errorf("open PostgreSQL store: %w", err)
	}
	return s, nil
}

// postgresFigures is what serve reads from a PostgreSQL store for /metrics
// and /readyz; *postgres.Store implements it.
type postgresFigures interface {
	Stats() postgres.Stats
	Lag() map[varplane.Scope]time.Duration
	Schema() string
	ReadOnly() bool
	RevalidateInterval() time.Duration
}

var _ postgresFigures = (*postgres.Store)(nil)

// mountPostgres registers a PostgreSQL store's collector on the handler's
// registry and serves /readyz with its details on mux (the handler's own
// /readyz decides the status; the wrapper adds a "postgres" object to its
// body). It does nothing for any other store.
func mountPostgres(next http.Handler, api *httpapi.Handler, store varplane.Store) http.Handler {
	src, ok := store.(postgresFigures)
	if !ok {
		return next
	}
	api.Registry().MustRegister(newPostgresCollector(src, postgres.DefaultLagWarn, postgres.DefaultLagEscalate))
	return onReadyz(next, readyzWith(api, "postgres", func() any {
		st := src.Stats()
		return postgresReadyDetails{
			Schema:             src.Schema(),
			ReadOnly:           src.ReadOnly(),
			RevalidateInterval: src.RevalidateInterval().String(),
			InstalledScopes:    st.Installed,
			MaxLagSeconds:      st.MaxLag.Seconds(),
			Listens:            st.Listens,
		}
	}))
}

// postgresReadyDetails is the "postgres" object of /readyz.
type postgresReadyDetails struct {
	Schema             string  `json:"schema"`
	ReadOnly           bool    `json:"readOnly"`
	RevalidateInterval string  `json:"revalidateInterval"`
	InstalledScopes    int     `json:"installedScopes"`
	MaxLagSeconds      float64 `json:"maxLagSeconds"`
	Listens            uint64  `json:"listens"` // successful (re)LISTENs: 0 with listen=false or before the first
}

// readyzWith answers /readyz through next (so its status, checks, metrics
// and logs stay the handler's) and adds details() to the body under key. A
// body it cannot read (a HEAD request) passes through unchanged.
// (readyzWithRedis does the same for the Redis details with its own body
// type; it could become a call of this one.)
func readyzWith(next http.Handler, key string, details func() any) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		buf := &bufferedResponse{header: http.Header{}}
		next.ServeHTTP(buf, r)
		status := buf.status
		if status == 0 {
			status = http.StatusOK
		}
		body := buf.body.Bytes()
		var res map[string]json.RawMessage
		if err := json.Unmarshal(body, &res); err == nil && res["status"] != nil {
			if d, err := json.Marshal(details()); err == nil {
				res[key] = d
				if b, err := json.Marshal(res); err == nil {
					body = append(b, '\n')
					buf.header.Del("Content-Length")
				}
			}
		}
		for k, v := range buf.header {
			rw.Header()[k] = v
		}
		rw.WriteHeader(status)
		_, _ = rw.Write(body)
	})
}

// newPostgresCollector exports a PostgreSQL store's figures under
// varplane_postgres_ (replicaCollector).
func newPostgresCollector(src postgresFigures, warn, escalate time.Duration) *replicaCollector[postgres.Stats] {
	return newReplicaCollector("postgres", "PostgreSQL", src.Stats, src.Lag,
		func(s postgres.Stats) time.Duration { return s.LastPassDuration }, warn, escalate, nil,
		[]replicaCounter[postgres.Stats]{
			{"commits_total", "Mutations PostgreSQL committed.", func(s postgres.Stats) uint64 { return s.Commits }},
			{"commit_conflicts_total", "Mutations refused for a generation mismatch.", func(s postgres.Stats) uint64 { return s.CommitConflicts }},
			{"commit_errors_total", "Mutations that failed for another reason (the database unreachable or refusing); nothing of them was written.", func(s postgres.Stats) uint64 { return s.CommitErrors }},
			{"batches_total", "Transactions that grouped several commits.", func(s postgres.Stats) uint64 { return s.Batches }},
			{"batched_commits_total", "Commits run in those transactions.", func(s postgres.Stats) uint64 { return s.BatchedCalls }},
			{"batch_retries_total", "Batches the server refused, whose commits ran again one by one.", func(s postgres.Stats) uint64 { return s.BatchRetries }},
			{"notifications_total", "Notifications received.", func(s postgres.Stats) uint64 { return s.Notifications }},
			{"notification_reads_total", "Scopes read because of a notification.", func(s postgres.Stats) uint64 { return s.NotificationReads }},
			{"log_follows_total", "Of those, activations read from the log as the next commit of the installed head (the rest are read from the heads table).", func(s postgres.Stats) uint64 { return s.LogFollows }},
			{"notifications_dropped_total", "Notifications dropped on a full queue (the next revalidation pass catches them).", func(s postgres.Stats) uint64 { return s.NotificationsDropped }},
			{"notify_errors_total", "Invalidations of own commits whose sending failed.", func(s postgres.Stats) uint64 { return s.NotifyErrors }},
			{"revalidation_passes_total", "Revalidation passes run.", func(s postgres.Stats) uint64 { return s.RevalidationPasses }},
			{"revalidation_changed_total", "Installed heads a pass found changed (a commit no notification delivered).", func(s postgres.Stats) uint64 { return s.ConfirmChanged }},
			{"revalidation_errors_total", "Revalidation queries that failed.", func(s postgres.Stats) uint64 { return s.ConfirmErrors }},
			{"cold_loads_total", "Scopes read from PostgreSQL on first use.", func(s postgres.Stats) uint64 { return s.ColdLoads }},
			{"read_errors_total", "Reads of PostgreSQL that failed.", func(s postgres.Stats) uint64 { return s.ReadErrors }},
			{"decode_errors_total", "Rows that could not be decoded (left in place; their reads fail closed).", func(s postgres.Stats) uint64 { return s.DecodeErrors }},
			{"regressions_total", "Heads PostgreSQL answered older than the installed one (a restore or failover lost a commit).", func(s postgres.Stats) uint64 { return s.Regressions }},
			{"listens_total", "Successful (re)LISTENs on the notification channel.", func(s postgres.Stats) uint64 { return s.Listens }},
		})
}
