package file

import (
	"context"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/logstate"
)

// History returns every event of scope in log order (see
// varplane.Store.History), each with its link; a revision-created event
// whose body retention reclaimed carries no document. Documents not held in
// memory are read from the log. After a restart from a checkpoint it waits
// until the log before the checkpoint is read (cold.go): a history is
// whole or an error.
func (s *Store) History(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	h, err := s.fullHistoryMeta(ctx, scope)
	if err != nil {
		return nil, err
	}
	return s.st.FillDocuments(scope, h)
}

// EventHistory is History without reading documents from the log: a
// revision-created event carries its document only when the store holds
// it in memory. For callers that need the events' metadata alone (the
// retention pass), so that they do not read every body of the scope.
func (s *Store) EventHistory(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	h, err := s.fullHistoryMeta(ctx, scope)
	if err != nil {
		return nil, err
	}
	return logstate.StripOnDisk(h), nil
}

// Revision returns the stored revision rev of scope; ErrReclaimed when
// retention took its body out; a not-found error when it was never created.
func (s *Store) Revision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	if s.IsShut() {
		return nil, varplane.ErrClosed
	}
	return s.st.RevisionOrGone(scope, rev)
}

// Idempotency returns what the store recorded for key, or a not-found
// error. After a restart from a checkpoint it waits until the records of
// the events before the checkpoint are read.
func (s *Store) Idempotency(ctx context.Context, key string) (*varplane.IdempotencyRecord, error) {
	if err := s.waitCold(ctx); err != nil {
		return nil, err
	}
	return s.Reads.Idempotency(ctx, key)
}

// Replay returns the state of scope right after the event that allocated
// generation gen (generation 0: the never-activated zero state), or a
// not-found error when the scope is not in the log or never reached gen.
func (s *Store) Replay(ctx context.Context, scope varplane.Scope, gen varplane.Generation) (*varplane.ScopeState, error) {
	hist, err := s.fullHistoryMeta(ctx, scope) // FoldAt reads the head's record itself
	if err != nil {
		return nil, err
	}
	if len(hist) == 0 && s.st.Load(scope) == nil {
		return nil, varplane.Errorf(varplane.CodeNotFound, "scope %q has no events", scope)
	}
	return logstate.FoldAt(ctx, scope, hist, gen, func(r varplane.Revision) (*varplane.RevisionRecord, error) {
		return s.st.RevisionOrGone(scope, r)
	})
}
