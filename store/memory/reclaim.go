package memory

import (
	"context"

	"github.com/varplane/varplane"
)

// ReclaimRevisions deletes the bodies of revs of scope at once (never the
// head's; what is not stored is skipped) and returns how many it deleted.
// Their events stay in the history without their documents, and a read of
// them answers revision-reclaimed. In memory a deletion cannot fail, so
// nothing is left on a to-delete list.
func (s *Store) ReclaimRevisions(ctx context.Context, scope varplane.Scope, revs []varplane.Revision) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.IsShut() {
		return 0, varplane.ErrClosed
	}
	return len(s.st.Reclaim(scope, revs)), nil
}
