package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/varplane/varplane"
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
