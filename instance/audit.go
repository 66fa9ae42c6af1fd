package instance

import (
	"context"

	"github.com/varplane/varplane"
)

// The audit reads of a read replica (history, the scope list, replay and
// revisions other than the installed heads) go to the store underneath,
// but follow the same readiness rule as the document reads: until the root
// document is installed they answer not-ready, so a replica never serves
// an audit trail while it would refuse the documents themselves.

// History answers the store's history of scope once the cache is ready.
func (s *Store) History(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	if err := s.cache.Ready(); err != nil {
		return nil, err
	}
	return s.Store.History(ctx, scope)
}

// EventHistory answers the store's history without documents once the
// cache is ready.
func (s *Store) EventHistory(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	if err := s.cache.Ready(); err != nil {
		return nil, err
	}
	return s.Store.EventHistory(ctx, scope)
}

// Scopes answers the store's scope list once the cache is ready.
func (s *Store) Scopes(ctx context.Context) ([]varplane.Scope, error) {
	if err := s.cache.Ready(); err != nil {
		return nil, err
	}
	return s.Store.Scopes(ctx)
}

// Replay answers the store's replay once the cache is ready; a store that
// keeps no log to replay answers store-unsupported.
func (s *Store) Replay(ctx context.Context, scope varplane.Scope, gen varplane.Generation) (*varplane.ScopeState, error) {
	if err := s.cache.Ready(); err != nil {
		return nil, err
	}
	r, ok := s.Store.(varplane.Replayer)
	if !ok {
		return nil, varplane.Errorf(varplane.CodeStoreUnsupported, "the %s store keeps no log to replay", s.Store.Name())
	}
	return r.Replay(ctx, scope, gen)
}
