package instance

import (
	"context"
	"encoding/json"

	"github.com/varplane/varplane"
)

// Store is a varplane.Store whose reads of documents (State, and Revision of
// an installed head) answer from a Cache of raw JSON documents, with the
// cache's rules (not-ready, document-failed, document-stale, bounded
// memory); everything else goes to the store underneath, which is the one
// the cache reads. It is what `varplane serve --read-only --root …` serves
// its read API from.
type Store struct {
	varplane.Store
	cache *Cache[json.RawMessage]
}

// NewStore wraps under with c, which must read from under.
func NewStore(c *Cache[json.RawMessage], under varplane.Store) *Store {
	return &Store{Store: under, cache: c}
}

// Cache returns the cache the store answers from.
func (s *Store) Cache() *Cache[json.RawMessage] { return s.cache }

// Unwrap returns the store underneath.
func (s *Store) Unwrap() varplane.Store { return s.Store }

// State answers from the cache: a scope the store says has no document is
// the zero state with its generation.
func (s *Store) State(ctx context.Context, scope varplane.Scope) (*varplane.ScopeState, error) {
	d, err := s.cache.Get(ctx, scope)
	if err != nil {
		if varplane.ErrorCode(err) == varplane.CodeNoHead {
			return &varplane.ScopeState{Scope: scope, Generation: s.cache.absentGeneration(scope)}, nil
		}
		return nil, err
	}
	return &varplane.ScopeState{Scope: scope, Generation: d.Generation, Head: d.Head}, nil
}

// States answers scopes as one request's view (varplane.Snapshotter): one
// document per scope, held for the request, with the fail-closed rule
// judged by the oldest of them (Cache.Snapshot); a scope with no document
// is a state without a head.
func (s *Store) States(ctx context.Context, scopes []varplane.Scope) ([]*varplane.ScopeState, error) {
	return s.states(ctx, scopes, true)
}

// HeadStates is States with each scope's head, never the revision of a
// rollout that selects this instance (varplane.HeadSnapshotter): what an
// evaluation for an entity key starts from.
func (s *Store) HeadStates(ctx context.Context, scopes []varplane.Scope) ([]*varplane.ScopeState, error) {
	return s.states(ctx, scopes, false)
}

func (s *Store) states(ctx context.Context, scopes []varplane.Scope, serve bool) ([]*varplane.ScopeState, error) {
	docs, err := s.cache.view(ctx, scopes, serve)
	if err != nil {
		return nil, err
	}
	out := make([]*varplane.ScopeState, len(docs))
	states := make(map[*Doc[json.RawMessage]]*varplane.ScopeState, len(docs))
	for i, d := range docs {
		st, ok := states[d]
		if !ok {
			st = &varplane.ScopeState{Scope: d.Scope, Generation: d.Generation, Head: d.Head}
			states[d] = st
		}
		out[i] = st
	}
	return out, nil
}

// Revision answers the installed head's record from memory, other
// revisions from the store underneath.
func (s *Store) Revision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	if v, ok := s.cache.entries.Load(scope); ok {
		if d := v.doc.Load(); d.err == nil && d.Head != nil && d.Head.Revision == rev {
			h := d.Head
			return &varplane.RevisionRecord{Scope: scope, Revision: rev, Document: h.Document, SchemaID: h.SchemaID,
				SchemaVersion: h.SchemaVersion, Actor: h.Actor}, nil
		}
	}
	if err := s.cache.Ready(); err != nil {
		return nil, err // the audit reads' readiness rule (audit.go)
	}
	return s.Store.Revision(ctx, scope, rev)
}

// Close closes the cache and the store underneath.
func (s *Store) Close() error {
	_ = s.cache.Close()
	return s.Store.Close()
}
