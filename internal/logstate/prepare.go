package logstate

import "github.com/varplane/varplane"

// Prepare returns the event that Tx.Append would store for ev (normalised:
// UTC timestamp, compacted document, generation fields from expected) and
// refuses, as Append would, what is malformed whatever the state. It reads
// no state, so a store calls it outside its commit lock, and encodes the
// returned event there too; AppendPrepared then folds it with the state's
// checks only. ev is not modified.
func Prepare(ev *varplane.Event, expected varplane.Generation) (*varplane.Event, error) {
	return prepare(ev, expected, varplane.CheckedDocument{})
}

func prepare(ev *varplane.Event, expected varplane.Generation, doc varplane.CheckedDocument) (*varplane.Event, error) {
	e, err := normalizeChecked(ev, expected, doc)
	if err != nil {
		return nil, err
	}
	if err := wellFormed(&e, false, true); err != nil {
		return nil, err
	}
	return &e, nil
}

// AppendPrepared is Append for an event returned by Prepare: it checks e
// against the fold including the transaction and folds e itself (which the
// caller must not modify afterwards). Errors as Append.
func (tx *Tx) AppendPrepared(e *varplane.Event, expected varplane.Generation) error {
	if err := tx.check(e, expected, modeAppend); err != nil {
		return err
	}
	tx.apply(e)
	return nil
}

// PreparePublish is Prepare for the two events of a publish: it returns
// them normalised, with the checks of AppendPublish that read no state.
func PreparePublish(created, activated *varplane.Event, expected varplane.Generation) (*varplane.Event, *varplane.Event, error) {
	return PreparePublishChecked(created, activated, expected, varplane.CheckedDocument{})
}

// PreparePublishChecked is PreparePublish that takes doc's word for
// created.Document (see varplane.CheckedPublisher): the document is copied
// without a second scan when doc holds it; any other doc is ignored.
func PreparePublishChecked(created, activated *varplane.Event, expected varplane.Generation, doc varplane.CheckedDocument) (*varplane.Event, *varplane.Event, error) {
	if created.Kind != varplane.EventRevisionCreated || activated.Kind != varplane.EventActivated {
		return nil, nil, badRequest("a publish commits a revision-created and an activated event, not %s and %s", created.Kind, activated.Kind)
	}
	if created.Scope != activated.Scope || created.Revision != activated.Revision {
		return nil, nil, badRequest("a publish activates the revision it creates, not %s of %q", activated.Revision, activated.Scope)
	}
	if created.IdempotencyKey != "" || created.RequestHash != "" {
		return nil, nil, badRequest("a publish carries its idempotency key on the activation, not on the revision")
	}
	c, err := prepare(created, 0, doc)
	if err != nil {
		return nil, nil, err
	}
	a, err := Prepare(activated, expected)
	if err != nil {
		return nil, nil, err
	}
	return c, a, nil
}
