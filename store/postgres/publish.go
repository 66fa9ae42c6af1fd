package postgres

import (
	"context"
	"fmt"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/logstate"
)

// AppendPublish commits a publish (see varplane.Store.AppendPublish) as one
// call of varplane_publish, in one transaction (its own or a batch's, where
// it is an item of one varplane_publish_batch with the batch's other
// publishes): the
// revision record and its revision-created event unless the scope stores
// the revision already, then the activation and the head. The head row is
// locked and its generation compared before anything else, so a publish
// that loses a race is a conflict and leaves no revision. It reports
// whether the revision was created. Errors as Append; on any error nothing
// is written.
func (s *Store) AppendPublish(ctx context.Context, created, activated *varplane.Event, expected varplane.Generation) (bool, error) {
	if err := s.checkWritable(); err != nil {
		return false, err
	}
	if err := checkScope(activated.Scope); err != nil {
		return false, err
	}
	c, a, err := logstate.PreparePublish(unlinked(created), unlinked(activated), expected)
	if err != nil {
		return false, err
	}
	if a.Generation != expected+1 {
		return false, varplane.Errorf(varplane.CodeBadRequest, "activation generation %d is not expected generation %d + 1", a.Generation, expected)
	}
	rec := &varplane.RevisionRecord{
		Scope: c.Scope, Revision: c.Revision, Document: c.Document,
		SchemaID: c.SchemaID, SchemaVersion: c.SchemaVersion, Actor: c.Actor, CreatedAt: c.Timestamp,
	}
	// The key goes with the publish's first event: the revision-created
	// one when the revision is new, the activation otherwise.
	withKey := *c
	withKey.IdempotencyKey, withKey.RequestHash = a.IdempotencyKey, a.RequestHash
	noKey := *a
	noKey.IdempotencyKey, noKey.RequestHash = "", ""
	js := [4][]byte{eventjson.Record(rec), eventjson.Event(&withKey), eventjson.Event(&noKey), eventjson.Event(a)}
	cs := [3][]byte{content(&withKey), content(&noKey), content(a)}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	var (
		st                string
		cur, version, seq *int64
		hash, createdHash *string
		rejected, recJSN  []byte
		isNew             *bool
	)
	// The arguments' types are the ones publishArrays expects: a run of
	// publishes in one batch is sent as one varplane_publish_batch.
	err = s.enqueue(&commitCall{ctx: ctx, scope: string(a.Scope), publish: true, done: make(chan error, 1),
		sql: "SELECT " + publishColumns + " FROM varplane_publish($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
		args: []any{string(a.Scope), int64(expected), int64(a.Generation), string(a.Revision), js[0], unclosed(js[1]), unclosed(js[2]), unclosed(js[3]),
			nullable(a.IdempotencyKey), a.RequestHash, cs[0], cs[1], cs[2]},
		dst: []any{&st, &cur, &version, &rejected, &recJSN, &isNew, &seq, &hash, &createdHash}})
	if err != nil {
		return false, s.writeFailure(a.Scope, err)
	}
	if err := s.status(a, expected, st, deref(cur)); err != nil {
		return false, err
	}
	wasNew := isNew != nil && *isNew
	l := link(seq, hash)
	activated.Seq, activated.Hash = l.Seq, l.Hash
	created.Seq, created.Hash = 0, "" // not appended: the revision was found
	if wasNew && createdHash != nil {
		created.Seq, created.Hash = l.Seq-1, *createdHash
	}
	if version != nil {
		// Sent once this replica has installed the commit (deferred), so
		// that its own echo finds the head installed and is skipped.
		defer s.notify(fmt.Sprintf("%s\n%d %d %s", varplane.EventActivated, *version, a.Generation, a.Scope))
	}
	ev := a
	if wasNew {
		ev = &noKey
	}
	snap, err := s.ownSnapshot(a.Scope, a.Generation, version, rejected, l)
	if err == nil && !wasNew {
		var found varplane.RevisionRecord
		if err = eventjson.DecodeRecord(recJSN, &found); err == nil {
			rec = &found
		}
	}
	if err != nil {
		s.log.Warn("postgres store: published, but the reply cannot be read; reloading", "scope", string(a.Scope), "err", err)
		s.refreshAfterCommit(ctx, a.Scope)
		return wasNew, nil
	}
	snap.rec = rec
	snap.state.Head = varplane.NewHead(ev, rec)
	reqs := []installReq{{scope: a.Scope, snap: snap, seq: ownSeq}}
	s.fillGaps(ctx, reqs) // commits of other replicas this one had not seen yet
	s.installAndDeliver(reqs)
	return wasNew, nil
}
