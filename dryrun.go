package varplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
)

// A dry run (the DryRun field of PublishRequest, ActivateRequest,
// RollbackRequest and DeactivateRequest) goes down the same path as the
// write it previews: the scope's owners and review policies (scope-owned,
// change-required), the cascade's owned and reviewed descendants, the
// idempotency key, the document's validation (without recording a
// rejection), the rollback's target; it stops where the write would commit
// and checks instead what the store's commit would check: the generation
// the request expects and, for an activation, that the revision is stored.
// Its answer is the write's answer marked DryRun, or the refusal the write
// would meet. The transports authorize a dry run as the write itself, so
// that a dry run refused nothing the write would be refused.
//
// A dry run is a preview, not a reservation: a commit between it and the
// write can still make the write fail (revision-conflict).

// dryGeneration refuses, as the store's guarded commit would, a scope that
// is not at expected.
func (e *Engine) dryGeneration(ctx context.Context, scope Scope, expected Generation) (*ScopeState, error) {
	st, err := e.store.State(ctx, scope)
	if err != nil {
		return nil, err
	}
	if st.Generation != expected {
		return nil, ConflictError(scope, expected, st.Generation)
	}
	return st, nil
}

// dryActivate answers the dry run of activation ev, guarded by expected:
// the scope at expected and the revision stored in it, as the store's
// Append checks them.
func (e *Engine) dryActivate(ctx context.Context, ev *Event, expected Generation) (ActivationResult, error) {
	if _, err := e.dryGeneration(ctx, ev.Scope, expected); err != nil {
		return ActivationResult{}, err
	}
	if _, err := e.store.Revision(ctx, ev.Scope, ev.Revision); err != nil {
		if errors.Is(err, ErrNotFound) {
			return ActivationResult{}, &Error{Code: CodeNotFound, Message: fmt.Sprintf("revision %s is not stored in scope %q", ev.Revision, ev.Scope), Err: err}
		}
		return ActivationResult{}, err
	}
	return ActivationResult{Scope: ev.Scope, Generation: ev.Generation, Revision: ev.Revision, EffectiveAt: ev.Timestamp, DryRun: true}, nil
}

// dryPublish answers the dry run of a publish whose activation is act
// (its document admitted): the scope at expected; Created says whether the
// revision would be new.
func (e *Engine) dryPublish(ctx context.Context, act *Event, expected Generation) (PublishResult, error) {
	if _, err := e.dryGeneration(ctx, act.Scope, expected); err != nil {
		return PublishResult{}, err
	}
	created := false
	switch _, err := e.store.Revision(ctx, act.Scope, act.Revision); {
	case errors.Is(err, ErrNotFound):
		created = true
	case err != nil && !errors.Is(err, ErrReclaimed):
		return PublishResult{}, err
	}
	return PublishResult{
		ActivationResult: ActivationResult{Scope: act.Scope, Generation: act.Generation, Revision: act.Revision, EffectiveAt: act.Timestamp, DryRun: true},
		Created:          created,
	}, nil
}

// dryDeactivate answers the dry run of a subtree deactivation that passed
// the owners' checks: the scope at req.ExpectedGeneration, and the cascade
// the commit would write as the store holds it now (every active
// descendant at its next generation, sorted by scope, as the stores plan
// it).
func (e *Engine) dryDeactivate(ctx context.Context, req DeactivateRequest) (DeactivationResult, error) {
	self, err := e.dryGeneration(ctx, req.Scope, req.ExpectedGeneration)
	if err != nil {
		return DeactivationResult{}, err
	}
	scopes, err := e.store.Scopes(ctx)
	if err != nil {
		return DeactivationResult{}, err
	}
	var cascade []CascadeEntry
	for _, sc := range scopes {
		if !sc.IsDescendantOf(req.Scope) {
			continue
		}
		st, err := e.store.State(ctx, sc)
		if err != nil {
			return DeactivationResult{}, err
		}
		if st.Head != nil {
			cascade = append(cascade, CascadeEntry{Scope: sc, Generation: st.Generation + 1})
		}
	}
	slices.SortFunc(cascade, func(a, b CascadeEntry) int { return cmp.Compare(a.Scope, b.Scope) })
	return DeactivationResult{Scope: req.Scope, Generation: req.ExpectedGeneration + 1, Cascade: cascade, DryRun: true, WasActive: self.Head != nil}, nil
}
