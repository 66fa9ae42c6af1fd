package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/varplane/varplane"
)

// rollbackToSQL is the revision of the activation at one generation of a
// scope: one lookup on events_scope_generation.
const rollbackToSQL = `SELECT body->>'revision' FROM events
WHERE scope = $1 AND generation = $2 AND generation IS NOT NULL AND kind = 'activated' LIMIT 1`

// rollbackPrevSQL is the target of a rollback without a generation: h is
// the event that set the head as of generation $2 (the highest generation
// not above it), and the answer the latest activation below it whose
// revision differs from h's (any activation when h is a deactivation).
// Both read events_scope_generation backwards from $2 and stop at the
// first row that qualifies.
const rollbackPrevSQL = `SELECT t.rev FROM
	(SELECT generation, kind, body->>'revision' AS rev FROM events
		WHERE scope = $1 AND generation IS NOT NULL AND generation <= $2
		ORDER BY generation DESC LIMIT 1) h,
	LATERAL (SELECT e.body->>'revision' AS rev FROM events e
		WHERE e.scope = $1 AND e.generation IS NOT NULL AND e.generation < h.generation AND e.kind = 'activated'
			AND (h.kind <> 'activated' OR e.body->>'revision' IS DISTINCT FROM h.rev)
		ORDER BY e.generation DESC LIMIT 1) t`

// RollbackTarget answers varplane.Store.RollbackTarget from the events
// table (never from the installed heads, which may be behind expected), by
// one indexed query that reads the history backwards from expected and
// stops at the target.
func (s *Store) RollbackTarget(ctx context.Context, scope varplane.Scope, expected varplane.Generation, to *varplane.Generation) (varplane.Revision, error) {
	if err := s.checkOpen(); err != nil {
		return "", err
	}
	if err := checkScope(scope); err != nil {
		return "", err
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	var row pgx.Row
	if to != nil {
		row = s.pool.QueryRow(cctx, rollbackToSQL, string(scope), int64(*to))
	} else {
		row = s.pool.QueryRow(cctx, rollbackPrevSQL, string(scope), int64(expected))
	}
	var rev string
	switch err := row.Scan(&rev); {
	case errors.Is(err, pgx.ErrNoRows):
		var gen int64
		err := s.pool.QueryRow(cctx, "SELECT generation FROM heads WHERE scope = $1", string(scope)).Scan(&gen)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return "", s.readFailure("rollback target", scope, err)
		}
		return "", varplane.RollbackNotFound(scope, expected, to, varplane.Generation(gen))
	case err != nil:
		return "", s.readFailure("rollback target", scope, err)
	}
	return varplane.Revision(rev), nil
}
