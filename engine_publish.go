package varplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// PublishRequest asks to store a document as a revision of a scope (or find
// it stored) and make it the head, in one commit.
type PublishRequest struct {
	Scope              Scope
	Document           json.RawMessage
	SchemaID           string
	SchemaVersion      string
	ExpectedGeneration Generation
	Actor              string
	OnBehalfOf         string
	Owner              string
	Reason             string
	IdempotencyKey     string
	// Checked, optional, is Document as a CheckedBody vouched for it
	// (CheckedBody.Document): when it holds Document itself and was
	// checked against limits no looser than the engine's, the engine
	// neither scans nor copies the document again (it must then not be
	// modified until Publish returns), and a store that implements
	// CheckedPublisher does not scan it either. Otherwise it is ignored.
	Checked CheckedDocument
	// DryRun asks for every check of the publish (the document validated,
	// no rejection recorded) and no commit.
	DryRun bool
}

// PublishResult answers Publish: the activation, as Activate answers it,
// and whether the publish created the revision (false: it was stored
// already, and only activated).
type PublishResult struct {
	ActivationResult
	Created bool `json:"created"`
}

// Publish validates req.Document as CreateRevision does and, in one atomic
// store operation (Store.AppendPublish: one fsync, script or transaction),
// stores it unless the content-addressed revision exists and activates it at
// req.ExpectedGeneration+1. Its refusals are those of CreateRevision and
// Activate: revision-invalid with the issues (a rejected event is recorded,
// with the idempotency key if any, and nothing else), revision-conflict
// carrying the current generation (and no revision is left behind),
// idempotency-key-reused. Without an idempotency key, a scope already past
// req.ExpectedGeneration is a conflict before the document is even
// validated. A repeated request with the same idempotency key answers the
// first result, Created included, or the first refusal of an invalid
// document, and appends nothing.
func (e *Engine) Publish(ctx context.Context, req PublishRequest) (PublishResult, error) {
	if err := e.writable(req.Scope, req.Owner); err != nil {
		return PublishResult{}, err
	}
	if req.IdempotencyKey == "" {
		// A publish that has already lost its race is refused before its
		// document is validated: losers of a contended scope retry often.
		// Generations only grow, so a snapshot past the expected one (even
		// a shared store's, which may lag) proves the conflict; one at or
		// behind it proves nothing, and the store decides. A request with
		// a key goes the whole way, so that a retry of a publish that won
		// answers its first result.
		if st, err := e.store.State(ctx, req.Scope); err == nil && st.Generation > req.ExpectedGeneration {
			return PublishResult{}, ConflictError(req.Scope, req.ExpectedGeneration, st.Generation)
		}
	}
	by := authorOf(req.Actor, req.OnBehalfOf)
	a, err := e.admit(ctx, req.Scope, req.Document, req.Checked, req.SchemaID, req.SchemaVersion, by, req.Owner, req.IdempotencyKey, req.DryRun,
		func(content string) string {
			return requestHash("publish", req.Scope, content, req.SchemaID, req.SchemaVersion, fmt.Sprint(req.ExpectedGeneration))
		})
	if err != nil || a.replay != nil {
		return publishResult(a.replay), err
	}
	doc, rev, hash := a.doc, a.rev, a.hash // hash: only a request with a key is recorded with one
	act := e.guardedEvent(EventActivated, req.Scope, req.ExpectedGeneration, by, req.Reason, req.IdempotencyKey, hash)
	act.Revision = rev
	if req.DryRun {
		return e.dryPublish(ctx, act, req.ExpectedGeneration)
	}
	created := createdEvent(req.Scope, rev, doc, a.schemaID, req.SchemaVersion, by, req.Reason, act.Timestamp)
	var isNew bool
	if cp, ok := e.store.(CheckedPublisher); ok && req.Checked.Holds(doc) {
		isNew, err = cp.AppendPublishChecked(ctx, created, act, req.ExpectedGeneration, req.Checked)
	} else {
		isNew, err = e.store.AppendPublish(ctx, created, act, req.ExpectedGeneration)
	}
	switch {
	case errors.Is(err, ErrDuplicateIdempotencyKey):
		rec, err := e.replayedAfterRace(ctx, req.IdempotencyKey, hash)
		return publishResult(rec), err
	case err != nil:
		return PublishResult{}, err
	}
	return PublishResult{
		ActivationResult: ActivationResult{Scope: act.Scope, Generation: act.Generation, Revision: rev, EffectiveAt: act.Timestamp},
		Created:          isNew,
	}, nil
}

// publishResult rebuilds the answer of a recorded publish. The store keeps
// the key with the publish's first event: its revision-created event (at
// the generation before the activation) when it created the revision, its
// activation otherwise.
func publishResult(rec *IdempotencyRecord) PublishResult {
	if rec == nil {
		return PublishResult{}
	}
	if ev := rec.Event; ev.Kind == EventRevisionCreated {
		return PublishResult{
			ActivationResult: ActivationResult{Scope: ev.Scope, Generation: rec.Generation + 1, Revision: ev.Revision, EffectiveAt: ev.Timestamp},
			Created:          true,
		}
	}
	return PublishResult{ActivationResult: activationResult(rec)}
}
