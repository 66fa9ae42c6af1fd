package logstate

import (
	"context"
	"sync/atomic"

	"github.com/varplane/varplane"
)

// Reads serves the read half of varplane.Store (State, Revision, History,
// Idempotency, Scopes) from a State, so that every store holding its state
// in memory answers reads the same way: lock-free, with not-found errors for
// absent records, and ErrClosed once the store is shut. Stores embed it and
// call Init before use.
type Reads struct {
	st   *State
	down atomic.Bool
}

// Init points r at st. It must be called before any read.
func (r *Reads) Init(st *State) { r.st = st }

// Shut makes every later read answer ErrClosed.
func (r *Reads) Shut() { r.down.Store(true) }

// IsShut reports whether Shut was called.
func (r *Reads) IsShut() bool { return r.down.Load() }

// State returns the current snapshot of scope (a zero state for a scope
// never written), or ErrClosed.
func (r *Reads) State(_ context.Context, scope varplane.Scope) (*varplane.ScopeState, error) {
	if r.down.Load() {
		return nil, varplane.ErrClosed
	}
	return r.st.State(scope), nil
}

// States answers scopes as one moment of the log (varplane.Snapshotter,
// which Engine.Heads uses): no commit lands between two of its reads, so
// an OFREP bulk evaluation or a batch read never pairs a scope's older
// head with another's newer one. ErrClosed once the store is shut.
func (r *Reads) States(_ context.Context, scopes []varplane.Scope) ([]*varplane.ScopeState, error) {
	if r.down.Load() {
		return nil, varplane.ErrClosed
	}
	return r.st.States(scopes), nil
}

// Revision returns the stored revision rev of scope, ErrReclaimed for one
// retention took out, a not-found error, or ErrClosed.
func (r *Reads) Revision(_ context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	if r.down.Load() {
		return nil, varplane.ErrClosed
	}
	return r.st.RevisionOrGone(scope, rev)
}

// History returns the events of scope in commit order (empty for a scope
// never written), or ErrClosed.
func (r *Reads) History(_ context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	if r.down.Load() {
		return nil, varplane.ErrClosed
	}
	return r.st.History(scope), nil
}

// EventHistory is History: the documents are held in memory already, so
// the events carry them at no cost (see varplane.Store.EventHistory).
func (r *Reads) EventHistory(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	return r.History(ctx, scope)
}

// Idempotency returns the record of key, a not-found error, or ErrClosed.
func (r *Reads) Idempotency(_ context.Context, key string) (*varplane.IdempotencyRecord, error) {
	if r.down.Load() {
		return nil, varplane.ErrClosed
	}
	rec, ok := r.st.Idempotency(key)
	if !ok {
		return nil, varplane.Errorf(varplane.CodeNotFound, "idempotency key %q not recorded", key)
	}
	return rec, nil
}

// Scopes returns every scope written so far, sorted, or ErrClosed.
func (r *Reads) Scopes(_ context.Context) ([]varplane.Scope, error) {
	if r.down.Load() {
		return nil, varplane.ErrClosed
	}
	return r.st.Scopes(), nil
}
