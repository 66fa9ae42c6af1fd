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
	c, a, err := PreparePublish(created, activated, expected)
	if err != nil {
		return nil, nil, err
	}
	isNew, err := tx.AppendPublishPrepared(c, a, expected)
	if err != nil {
		return nil, nil, err
	}
	if !isNew {
		c = nil
	}
	return c, a, nil
}

// AppendPublishPrepared is AppendPublish for the events PreparePublish
// returned: it checks them against the fold and folds them (created only
// when the fold does not store its revision), reporting whether created
// was folded. When it is, the idempotency key has moved from a to c, as
// AppendPublish describes. On error the transaction is unchanged.
func (tx *Tx) AppendPublishPrepared(c, a *varplane.Event, expected varplane.Generation) (bool, error) {
	rec, err := tx.revE(c.Scope, c.Revision) // loads the scope's revision block, if any
	if err != nil {
		return false, err
	}
	found := rec != nil
	mode := modePublish
	if found {
		mode = modeAppend
	}
	if err := tx.check(a, expected, mode); err != nil {
		return false, err
	}
	if found {
		tx.apply(a)
		return false, nil
	}
	key, hash := a.IdempotencyKey, a.RequestHash
	c.IdempotencyKey, c.RequestHash = key, hash
	a.IdempotencyKey, a.RequestHash = "", ""
	if err := tx.check(c, 0, modeAppend); err != nil {
		c.IdempotencyKey, c.RequestHash = "", ""
		a.IdempotencyKey, a.RequestHash = key, hash
		return false, err
	}
	tx.apply(c)
	tx.apply(a)
	return true, nil
}
