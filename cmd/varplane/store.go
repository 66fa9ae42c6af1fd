package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/redis"
)

// defaultStore is the embedded default: a JSONL log under ./.varplane/.
const defaultStore = "file:./.varplane/var-log.jsonl"

// openStore opens the store a --store URL names:
//
//	file:PATH            append-only JSONL log (file.Open creates it and its directory)
//	memory:              ephemeral, empty on every start
//	redis://… rediss://  Redis as the shared store of record
//	postgres://… postgresql://…  PostgreSQL as the shared store of record
//	                     (its settings are URL parameters; docs/postgres.md)
//
// rf carries the --redis-* flags; other stores ignore them.
func openStore(ctx context.Context, spec string, rf redisFlags, log *slog.Logger) (varplane.Store, error) {
	scheme, rest, _ := strings.Cut(spec, ":")
	switch strings.ToLower(scheme) {
	case "file":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return nil, usagef("--store file:PATH needs a path, e.g. %s", defaultStore)
		}
		s, err := file.Open(ctx, path, file.Options{Logger: log})
		if err != nil {
			return nil, fmt.Errorf("open file store %s: %w", path, err)
		}
		return s, nil
	case "memory":
		if rest != "" {
			return nil, usagef("--store memory: takes no path (got %q)", spec)
		}
		return memory.New(), nil
	case "redis", "rediss":
		s, err := redis.Open(ctx, spec, rf.options(log))
		if err != nil {
			return nil, fmt.Errorf("open redis store: %w", err)
		}
		return replicaOf(ctx, s, rf, log)
	case "postgres", "postgresql":
		return openPostgres(ctx, spec, log)
	}
	return nil, usagef("--store %q: want file:PATH, memory:, redis://HOST:PORT or postgres://HOST/DATABASE", redactURL(spec))
}
