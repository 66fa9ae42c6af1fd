package file

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/varplane/varplane"
)

// reclaimList is the file store's to-delete list: revisions a reclamation
// pass chose, whose bodies leave the log at the next compaction.
type reclaimList struct {
	pending map[varplane.Scope][]varplane.Revision
}

// ReclaimRevisions puts revs of scope on the to-delete list (never the head,
// nor what the log does not store); their bodies leave the log, and they
// start to answer revision-reclaimed, at the next compaction, which
// FinishReclaim runs at the end of the pass. It deletes nothing itself and
// returns 0.
func (s *Store) ReclaimRevisions(ctx context.Context, scope varplane.Scope, revs []varplane.Revision) (int, error) {
	if s.IsShut() {
		return 0, varplane.ErrClosed
	}
	var head varplane.Revision
	if h := s.st.State(scope).Head; h != nil {
		head = h.Revision
	}
	s.reclaimMu.Lock()
	defer s.reclaimMu.Unlock()
	if s.reclaim.pending == nil {
		s.reclaim.pending = map[varplane.Scope][]varplane.Revision{}
	}
	for _, r := range revs {
		ok, err := s.st.HasRevision(scope, r)
		if err != nil {
			return 0, err
		}
		if ok && r != head && !slices.Contains(s.reclaim.pending[scope], r) {
			s.reclaim.pending[scope] = append(s.reclaim.pending[scope], r)
		}
	}
	return 0, nil
}

// FinishReclaim compacts the log when revisions are on the to-delete list,
// leaving the listed bodies out (see Compact); with none it does nothing.
// On failure the list is kept for the next pass, and the error is a
// retention FailedError counting them (see varplane.ReclaimFinisher).
func (s *Store) FinishReclaim(ctx context.Context) (int, error) {
	s.reclaimMu.Lock()
	pending := maps.Clone(s.reclaim.pending)
	s.reclaimMu.Unlock()
	n := 0
	for _, revs := range pending {
		n += len(revs)
	}
	if n == 0 {
		return 0, nil
	}
	res, err := s.Compact(ctx, pending)
	if err != nil {
		return 0, &deletionsFailed{n: n, err: err}
	}
	s.reclaimMu.Lock()
	for scope, revs := range pending {
		left := slices.DeleteFunc(s.reclaim.pending[scope], func(r varplane.Revision) bool { return slices.Contains(revs, r) })
		if len(left) == 0 {
			delete(s.reclaim.pending, scope)
		} else {
			s.reclaim.pending[scope] = left
		}
	}
	s.reclaimMu.Unlock()
	s.log.Info("file store: compacted", "path", s.path, "before", res.Before, "after", res.After, "reclaimed", res.Reclaimed, "paused", res.Paused)
	return res.Reclaimed, nil
}

// deletionsFailed is the error of a compaction that could not delete the
// bodies on the to-delete list; Failed reports how many.
type deletionsFailed struct {
	n   int
	err error
}

func (e *deletionsFailed) Error() string {
	return fmt.Sprintf("file store: %d revision bodies not deleted (retried next pass): %v", e.n, e.err)
}

func (e *deletionsFailed) Unwrap() error { return e.err }

// Failed returns how many deletions failed.
func (e *deletionsFailed) Failed() int { return e.n }
