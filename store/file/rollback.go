package file

import (
	"context"

	"github.com/varplane/varplane"
)

// RollbackTarget answers varplane.Store.RollbackTarget from the scope's
// whole history (a compacted log's history section included, once loaded),
// walked from its end without reading any document.
func (s *Store) RollbackTarget(ctx context.Context, scope varplane.Scope, expected varplane.Generation, to *varplane.Generation) (varplane.Revision, error) {
	h, err := s.fullHistoryMeta(ctx, scope)
	if err != nil {
		return "", err
	}
	return varplane.RollbackTargetIn(scope, h, expected, to)
}
