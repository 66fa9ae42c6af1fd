package file

import (
	"context"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/logstate"
)

// History returns every event of scope in log order (see
// varplane.Store.History), each with its link; a revision-created event
// whose body retention reclaimed carries no document. Documents not held in
// memory are read from the log.
func (s *Store) History(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	if s.IsShut() {
		return nil, varplane.ErrClosed
	}
	return s.st.HistoryDocuments(scope)
}

// EventHistory is History without reading documents from the log: a
// revision-created event carries its document only when the store holds
// it in memory. For callers that need the events' metadata alone (the
// retention pass), so that they do not read every body of the scope.
func (s *Store) EventHistory(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	if s.IsShut() {
		return nil, varplane.ErrClosed
	}
	return logstate.StripOnDisk(s.st.History(scope)), nil
}

// Revision returns the stored revision rev of scope; ErrReclaimed when
// retention took its body out; a not-found error when it was never created.
func (s *Store) Revision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	if s.IsShut() {
		return nil, varplane.ErrClosed
	}
	return s.st.RevisionOrGone(scope, rev)
}

func (s *Store) replayAt(ctx context.Context, scope varplane.Scope, gen varplane.Generation) (*varplane.ScopeState, error) {
	return s.st.StateAt(ctx, scope, gen)
}
