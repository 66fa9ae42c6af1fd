package logstate

import "github.com/varplane/varplane"

// AppendPublish validates a publish with the checks of
// varplane.Store.AppendPublish and folds it into the transaction: created
// (unless the fold already stores its revision) and activated at
// expected+1, both checked before either is folded, so that on error the
// transaction is unchanged. It returns the events as they will be stored,
// normalised as Append does; the created one is nil when the revision was
// found. When the revision is new, the idempotency key moves from the
// activation to the created event (the publish's first), as the Store
// contract records it.
func (tx *Tx) AppendPublish(created, activated *varplane.Event, expected varplane.Generation) (*varplane.Event, *varplane.Event, error) {
	if created.Kind != varplane.EventRevisionCreated || activated.Kind != varplane.EventActivated {
		return nil, nil, badRequest("a publish commits a revision-created and an activated event, not %s and %s", created.Kind, activated.Kind)
	}
	if created.Scope != activated.Scope || created.Revision != activated.Revision {
		return nil, nil, badRequest("a publish activates the revision it creates, not %s of %q", activated.Revision, activated.Scope)
	}
	if created.IdempotencyKey != "" || created.RequestHash != "" {
		return nil, nil, badRequest("a publish carries its idempotency key on the activation, not on the revision")
	}
	c, err := normalize(created, 0)
	if err != nil {
		return nil, nil, err
	}
	a, err := normalize(activated, expected)
	if err != nil {
		return nil, nil, err
	}
	found := c.Scope.Valid() && tx.rev(c.Scope, c.Revision) != nil
	mode := modePublish
	if found {
		mode = modeAppend
	}
	if err := tx.check(&a, expected, mode); err != nil {
		return nil, nil, err
	}
	if found {
		tx.apply(&a)
		return nil, &a, nil
	}
	c.IdempotencyKey, c.RequestHash = a.IdempotencyKey, a.RequestHash
	a.IdempotencyKey, a.RequestHash = "", ""
	if err := tx.check(&c, 0, modeAppend); err != nil {
		return nil, nil, err
	}
	tx.apply(&c)
	tx.apply(&a)
	return &c, &a, nil
}
