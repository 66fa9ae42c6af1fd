package logstate

import (
	"context"

	"github.com/varplane/varplane"
)

// RollbackTarget answers varplane.Store.RollbackTarget from the history the
// fold holds, walked from its end (varplane.RollbackSearch); the fold is
// the store of record of the stores that embed Reads. ErrClosed once shut.
func (r *Reads) RollbackTarget(_ context.Context, scope varplane.Scope, expected varplane.Generation, to *varplane.Generation) (varplane.Revision, error) {
	if r.down.Load() {
		return "", varplane.ErrClosed
	}
	return varplane.RollbackTargetIn(scope, r.st.History(scope), expected, to)
}
