package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/instance"
	"github.com/varplane/varplane/rollout"
	"github.com/varplane/varplane/store/redis"
)

// replicaFlags are the flags of a read replica (`serve --read-only --root
// SCOPE`): seed 002's instance rules, served through package instance.
// Without --root a read-only server serves the store's reads as before.
type replicaFlags struct {
	root             string
	prewarm          listFlag
	families         listFlag
	failClosed       listFlag
	maxCached        int
	failClosedMaxLag time.Duration
	coldLoad         time.Duration
	localMaxAge      time.Duration
	cacheDir         string
	instanceID       string
	labels           listFlag
	limits           varplane.Limits // serve's document limits, which bound a local copy
}

func (f *replicaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.root, "root", "", "with --read-only: the root scope, loaded at start and never dropped; until it has a document /readyz and every read answer 503 not-ready")
	fs.Var(&f.prewarm, "prewarm", "with --root: scopes loaded at start after the root (repeatable)")
	fs.IntVar(&f.maxCached, "max-cached", instance.DefaultMaxCached, "with --root: the most documents kept per family; the least recently used are dropped")
	fs.Var(&f.families, "family", "with --root: PREFIX=N, a scope prefix with its own --max-cached bound (repeatable)")
	fs.Var(&f.failClosed, "fail-closed", "with --root: reads of scopes under this prefix answer 503 document-stale once their document or the root lags past --fail-closed-max-lag (repeatable)")
	fs.DurationVar(&f.failClosedMaxLag, "fail-closed-max-lag", instance.DefaultFailClosedMaxLag, "with --fail-closed: the lag past which those scopes fail closed")
	fs.DurationVar(&f.coldLoad, "cold-load-timeout", instance.DefaultColdLoadTimeout, "with --root: how long a read waits for a document not installed before it answers 503 store-unavailable")
	fs.StringVar(&f.cacheDir, "cache-dir", "", "with --root: keep a local copy of each installed document here (written atomically); it may serve a cold load")
	fs.DurationVar(&f.localMaxAge, "local-max-age", instance.DefaultLocalMaxAge, "with --cache-dir: the oldest local copy a cold load may take")
	fs.StringVar(&f.instanceID, "instance-id", "", "with --root: the id of this instance's status heartbeat in the store (default: the host name and process id)")
	fs.Var(&f.labels, "instance-label", "with --root: KEY=VALUE, a label of this instance in its status (repeatable): the fleet view shows it, a rollout's label steps select by it")
}

// options builds the cache's options, refusing malformed values as usage
// errors.
func (f *replicaFlags) options(rf redisFlags, log *slog.Logger) (instance.Options[json.RawMessage], error) {
	o := instance.Options[json.RawMessage]{
		Root: varplane.Scope(f.root), Decode: instance.RawJSON, MaxCached: f.maxCached,
		RevalidateInterval: rf.revalidate, FailClosedMaxLag: f.failClosedMaxLag, ColdLoadTimeout: f.coldLoad,
		CacheDir: f.cacheDir, LocalMaxAge: f.localMaxAge, Limits: f.limits, InstanceID: f.instanceID, Logger: log,
	}
	if !o.Root.Valid() {
		return o, usagef("--root %q is not a valid scope", f.root)
	}
	for _, p := range f.prewarm {
		o.Prewarm = append(o.Prewarm, varplane.Scope(p))
	}
	for _, p := range f.failClosed {
		o.FailClosed = append(o.FailClosed, varplane.Scope(p))
	}
	for _, fam := range f.families {
		p, n, ok := strings.Cut(fam, "=")
		max, err := strconv.Atoi(n)
		if !ok || err != nil || max <= 0 || !varplane.Scope(p).Valid() {
			return o, usagef("--family %q: want PREFIX=N with a positive N", fam)
		}
		o.Families = append(o.Families, instance.Family{Prefix: varplane.Scope(p), MaxCached: max})
	}
	for _, l := range f.labels {
		sel, err := rollout.ParseSelector(l)
		if err != nil || len(sel) != 1 {
			return o, usagef("--instance-label %q: want KEY=VALUE", l)
		}
		if o.Labels == nil {
			o.Labels = map[string]string{}
		}
		for k, v := range sel {
			o.Labels[k] = v
		}
	}
	if o.InstanceID == "" {
		host, _ := os.Hostname()
		o.InstanceID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return o, nil
}

// replicaOf wraps a read-only Redis store in the instance cache when --root
// is given; otherwise it returns s as it is.
func replicaOf(ctx context.Context, s *redis.Store, rf redisFlags, log *slog.Logger) (varplane.Store, []prometheus.Collector, error) {
	if rf.replica.root == "" {
		return s, []prometheus.Collector{s.Collector()}, nil
	}
	fail := func(err error) (varplane.Store, []prometheus.Collector, error) {
		_ = s.Close()
		return nil, nil, err
	}
	if !s.ReadOnly() {
		return fail(usagef("--root makes a read replica: it needs --read-only"))
	}
	o, err := rf.replica.options(rf, log)
	if err != nil {
		return fail(err)
	}
	c, err := instance.New(ctx, s, o)
	if err != nil {
		return fail(fmt.Errorf("open the instance cache: %w", err))
	}
	return instance.NewStore(c, s), []prometheus.Collector{s.Collector(), c.Collector()}, nil
}

// checkReplicaStore refuses --read-only and --root on a store that is not
// Redis: only the Redis store has a data-plane mode, and serving a file or
// memory store read-write while the operator asked for a replica would
// silently do the opposite of what was asked.
func checkReplicaStore(spec string, rf redisFlags) error {
	scheme, _, _ := strings.Cut(spec, ":")
	switch strings.ToLower(scheme) {
	case "redis", "rediss":
		return nil
	}
	if rf.readOnly {
		return usagef("--read-only needs a redis:// store; the %s store has no read-only mode", strings.ToLower(scheme))
	}
	if rf.replica.root != "" {
		return usagef("--root makes a read replica of a redis:// store; the %s store has no read replica", strings.ToLower(scheme))
	}
	if rf.revalidate != redis.DefaultRevalidateInterval {
		return usagef("--revalidate-interval needs a redis:// store; the %s store holds no copy to revalidate", strings.ToLower(scheme))
	}
	return nil
}
