package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
)

// reclaimed marks the revision rev of scope whose record retention deleted,
// so that a read of it answers revision-reclaimed, not not-found. It is a
// plain key beside the record, in the scope's slot, read with GET (which
// the read-only ACL user of docs/redis.md may run).
func (k keys) reclaimed(scope varplane.Scope, rev varplane.Revision) string {
	return k.slotBase(scope) + "reclaimed:" + string(scope) + ":" + string(rev)
}

// reclaimScript deletes the revision record KEYS[2] of revision ARGV[1]
// unless it is the head in KEYS[1] (field r) or is not stored, and sets its
// reclaimed marker KEYS[3] first. One script: the head
// check, the record and the marker change in one step, so an activation
// (a script on the same slot) sees the record or its marker, never
// neither. Reply: 1 deleted, 0 kept.
var reclaimScript = rueidis.NewLuaScript(`
if redis.call('HGET', KEYS[1], 'r') == ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
redis.call('SET', KEYS[3], '1')
redis.call('DEL', KEYS[2])
return 1
`)

// lsetIfScript replaces element ARGV[1] of the list KEYS[1] by ARGV[3] only
// while it is still ARGV[2]. Reply: 1 replaced, 0 not.
var lsetIfScript = rueidis.NewLuaScript(`
if redis.call('LINDEX', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('LSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
`)

// ReclaimRevisions deletes the records of revs of scope (never the head's;
// what is not stored is skipped) and returns how many it deleted; each
// deletion is one script, so none is left half done. The history keeps
// every event; the revision-created entries of the reclaimed revisions lose
// their documents. A read of a reclaimed revision answers
// revision-reclaimed.
func (s *Store) ReclaimRevisions(ctx context.Context, scope varplane.Scope, revs []varplane.Revision) (int, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	if err := checkScope(scope); err != nil {
		return 0, err
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	gone := map[varplane.Revision]bool{}
	for _, rev := range revs {
		n, err := reclaimScript.Exec(cctx, s.client, []string{s.keys.head(scope), s.keys.revision(scope, rev), s.keys.reclaimed(scope, rev)},
			[]string{string(rev)}).AsInt64()
		if err != nil {
			return len(gone), s.readFailure("reclaim", scope, err)
		}
		if n == 1 {
			gone[varplane.Revision(rev)] = true
		}
	}
	if len(gone) == 0 {
		return 0, nil
	}
	hist := s.keys.history(scope)
	raw, err := s.client.Do(cctx, s.client.B().Lrange().Key(hist).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		return len(gone), s.readFailure("history", scope, err)
	}
	for i, r := range raw {
		var ev varplane.Event
		if err := eventjson.DecodeEvent([]byte(r), &ev); err != nil {
			return len(gone), s.decodeFailure(fmt.Sprintf("history entry %d", i), scope, err)
		}
		if ev.Kind != varplane.EventRevisionCreated || !gone[ev.Revision] || len(ev.Document) == 0 {
			continue
		}
		ev.Document = nil
		b, err := json.Marshal(&ev)
		if err != nil {
			return len(gone), fmt.Errorf("redis store: encode history entry %d of %q: %w", i, scope, err)
		}
		if err := lsetIfScript.Exec(cctx, s.client, []string{hist}, []string{strconv.Itoa(i), r, string(b)}).Error(); err != nil {
			return len(gone), s.readFailure("history", scope, err)
		}
	}
	return len(gone), nil
}

// missingRevision is the answer for a revision of scope that Redis does not
// store: revision-reclaimed when retention deleted it, not-found otherwise.
func (s *Store) missingRevision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) error {
	err := s.client.Do(ctx, s.client.B().Get().Key(s.keys.reclaimed(scope, rev)).Build()).Error()
	if err != nil && !rueidis.IsRedisNil(err) {
		return s.readFailure("revision", scope, err)
	}
	if err == nil {
		return &varplane.Error{Code: varplane.CodeRevisionReclaimed, Message: fmt.Sprintf("revision %s of scope %q was reclaimed by retention", rev, scope)}
	}
	return varplane.Errorf(varplane.CodeNotFound, "revision %s of scope %q is not stored", rev, scope)
}
