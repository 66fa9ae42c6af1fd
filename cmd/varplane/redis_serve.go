package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"net/http"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/instance"
	"github.com/varplane/varplane/store/redis"
)

// redisFlags are serve's --redis-* flags. They apply to a redis:// store
// only; checkStore refuses them with any other store.
type redisFlags struct {
	evict      string
	revalidate time.Duration
	readOnly   bool
	replica    replicaFlags
}

// register adds the --redis-* flags to fs.
func (f *redisFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.evict, "redis-eviction-check", redis.EvictionCheckFail, "with a redis:// store: fail (refuse to start unless maxmemory-policy is noeviction) or warn (log it, for managed Redis that hides INFO/CONFIG)")
	fs.DurationVar(&f.revalidate, "redis-revalidate-interval", redis.DefaultRevalidateInterval, "with a redis:// store: how often every installed head is confirmed with Redis, which bounds how long a lost invalidation goes unnoticed (10ms to 5m)")
	fs.BoolVar(&f.readOnly, "read-only", false, "with a redis:// store: a data-plane read replica that serves reads and the live stream and refuses every mutation (400 store-unsupported)")
	fs.BoolVar(&f.readOnly, "redis-read-only", false, "the former name of --read-only")
	f.replica.register(fs)
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
	// replica is the instance cache of a read replica (--root), nil
	// otherwise: until its root exists the replica is not ready.
	replica *instance.Store
}

// ready is the Options.Ready hook. The eviction indicator is not part of
// it: a node that may evict is an alert (the /readyz details, the
// varplane_redis_eviction_policy_ok metric and an ERROR log), not a reason
// to take a replica out of rotation while it serves what it installed.
// What decides readiness here is the store check httpapi runs (Redis
// answers).
func (w wireRedis) ready(context.Context) error {
	if w.replica != nil {
		return w.replica.Cache().Ready()
	}
	return nil
}

// mount registers the store's collectors on the handler's registry and
// serves /readyz with the store's details on mux (the handler's own /readyz
// decides the status; the wrapper adds a "redis" object to its body).
func (w wireRedis) mount(next http.Handler, api *httpapi.Handler) http.Handler {
	api.Registry().MustRegister(newRedisCollector(w.src, redis.DefaultLagWarn, redis.DefaultLagEscalate))
	if w.replica != nil {
		api.Registry().MustRegister(newInstanceCollector(w.replica.Cache()))
	}
	return onReadyz(next, readyzWithRedis(api, w))
}

// onReadyz sends GET /readyz to readyz and every other request to next.
func onReadyz(next, readyz http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			readyz.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
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

// newRedisCollector exports a Redis store's figures under varplane_redis_
// (replicaCollector), with the eviction policy as a gauge of its own.
func newRedisCollector(src redisFigures, warn, escalate time.Duration) *replicaCollector[redis.Stats] {
	evictionOK := func() float64 {
		if ok, _ := src.EvictionPolicyOK(); ok {
			return 1
		}
		return 0
	}
	return newReplicaCollector("redis", "Redis", src.Stats, src.Lag,
		func(s redis.Stats) time.Duration { return s.LastPassDuration }, warn, escalate,
		[]replicaGauge{{"eviction_policy_ok", "1 when every Redis node was last seen with maxmemory-policy noeviction, else 0 (under --redis-eviction-check warn, an unreadable policy counts as 1).", evictionOK}},
		[]replicaCounter[redis.Stats]{
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
		})
}
