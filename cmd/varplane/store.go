package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/postgres"
	"github.com/varplane/varplane/store/redis"
)

// defaultStore is the embedded default: a JSONL log under ./.varplane/.
const defaultStore = "file:./.varplane/var-log.jsonl"

// openStore opens the store a --store URL names, and returns it with its
// Prometheus collectors:
//
//	file:PATH            append-only JSONL log (file.Open creates it and its directory)
//	memory:              ephemeral, empty on every start
//	redis://… rediss://  Redis as the shared store of record (its settings
//	                     are URL parameters; docs/redis.md)
//	postgres://… postgresql://…  PostgreSQL as the shared store of record
//	                     (its settings are URL parameters; docs/postgres.md)
//
// rf carries the replica's flags (--root and the cache's); the --redis-*
// flags are in the URL already (redisFlags.apply). A URL or option the
// store refuses is a bad-request error naming it.
func openStore(ctx context.Context, spec string, rf redisFlags, log *slog.Logger) (varplane.Store, []prometheus.Collector, error) {
	scheme, rest, _ := strings.Cut(spec, ":")
	switch strings.ToLower(scheme) {
	case "file":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return nil, nil, usagef("--store file:PATH needs a path, e.g. %s", defaultStore)
		}
		s, err := file.Open(ctx, path, file.Options{Logger: log})
		if err != nil {
			return nil, nil, fmt.Errorf("open file store %s: %w", path, err)
		}
		return s, []prometheus.Collector{s.Collector()}, nil
	case "memory":
		if rest != "" {
			return nil, nil, usagef("--store memory: takes no path (got %q)", spec)
		}
		return memory.New(), nil, nil
	case "redis", "rediss":
		s, err := redis.Open(ctx, spec, redis.Options{Logger: log})
		if varplane.ErrorCode(err) == varplane.CodeBadRequest {
			// The store refused its URL, before connecting: name it
			// without its credentials.
			return nil, nil, usagef("--store %q: %s", strings.ToLower(scheme)+"://…", strings.TrimPrefix(varplane.ErrorMessage(err), "redis store: "))
		}
		if err != nil {
			return nil, nil, fmt.Errorf("open redis store: %w", err)
		}
		return replicaOf(ctx, s, rf, log)
	case "postgres", "postgresql":
		s, err := postgres.Open(ctx, spec, postgres.Options{Logger: log})
		if varplane.ErrorCode(err) == varplane.CodeBadRequest {
			return nil, nil, usagef("--store: %s", varplane.ErrorMessage(err))
		}
		if err != nil {
			return nil, nil, fmt.Errorf("open PostgreSQL store: %w", err)
		}
		return s, []prometheus.Collector{s.Collector()}, nil
	}
	return nil, nil, usagef("--store %q: want file:PATH, memory:, redis://HOST:PORT or postgres://HOST/DATABASE", redactURL(spec))
}
