package redis

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
)

// The history list holds event metadata only: a revision-created entry is
// written without its document, which lives once, in the revision record.
// History attaches the documents back from the records (pipelined GETs,
// which the read-only ACL user may run); a reclaimed revision's entry stays without one.
// Entries written with their document before this (older stores) are read
// as they are.

// historyEvent returns the form of ev that the history list and the
// idempotency record hold: ev without its document.
func historyEvent(ev *varplane.Event) *varplane.Event {
	if len(ev.Document) == 0 {
		return ev
	}
	cp := *ev
	cp.Document = nil
	return &cp
}

// attachDocuments fills the documents of the revision-created events of
// hist that carry none from their revision records, where still stored.
func (s *Store) attachDocuments(ctx context.Context, scope varplane.Scope, hist []varplane.Event) error {
	var cmds rueidis.Commands
	var at []int
	for i := range hist {
		if hist[i].Kind == varplane.EventRevisionCreated && len(hist[i].Document) == 0 {
			cmds = append(cmds, s.client.B().Get().Key(s.keys.revision(scope, hist[i].Revision)).Build())
			at = append(at, i)
		}
	}
	if len(cmds) == 0 {
		return nil
	}
	for j, res := range s.client.DoMulti(ctx, cmds...) {
		b, err := res.AsBytes()
		if rueidis.IsRedisNil(err) {
			continue // not stored: reclaimed
		}
		if err != nil {
			return s.readFailure("history", scope, err)
		}
		var rec varplane.RevisionRecord
		if err := eventjson.DecodeRecord(b, &rec); err != nil {
			return s.decodeFailure(fmt.Sprintf("revision %s", hist[at[j]].Revision), scope, err)
		}
		hist[at[j]].Document = rec.Document
	}
	return nil
}
