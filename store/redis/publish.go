package redis

import (
	"context"
	"strconv"

	"github.com/redis/rueidis"
	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
)

// publishScript is a publish in one step: it compares the head's generation
// with the expected one, stores the revision record and its revision-created
// event unless the record exists, then activates it as activateScript does.
// Nothing is written before the comparison and the idempotency check, so a
// refused publish leaves no revision behind.
//
// The events are linked by the caller from the chain head it expects
// (ARGV[11]): the revision-created event and the activation after it when
// the revision is new (the head becomes ARGV[12]), the keyed activation
// alone when it is found (ARGV[13]).
//
// KEYS: 1 head, 2 history, 3 index, 4 idem, 5 revision record, 6 floor.
// ARGV: 1 has-idem, 2 expected generation, 3 record JSON, 4 revision-created
// event JSON (carrying the idempotency key, if any), 5 activated event JSON
// without the key, 6 activated event JSON with it, 7 scope, 8 new
// generation, 9 revision, 10 channel, 11 the chain head the events were
// linked from, 12 the activation's link after the revision-created event,
// 13 the keyed activation's link alone.
// Reply: {'OK', v, j, c}: the new version, the last rejection, and c = 1
// when the revision was created, the stored record's JSON when it was found.
var publishScript = rueidis.NewLuaScript(luaIdemCheck + luaGen + luaChain + `
local cur, floor = curgen(KEYS[1], KEYS[6])
if not cur then
  if floor ~= ARGV[2] then
    return {'VANISHED', floor}
  end
  cur = floor
end
if cur ~= ARGV[2] then
  return {'CONFLICT', cur}
end
local stale = chainStale(11)
if stale then
  return stale
end
local act = ARGV[6]
local link = ARGV[13]
local found = redis.call('GET', KEYS[5])
if not found then
  redis.call('SET', KEYS[5], ARGV[3])
  redis.call('RPUSH', KEYS[2], ARGV[4])
  act = ARGV[5]
  link = ARGV[12]
  if ARGV[1] == '1' then
    redis.call('SET', KEYS[4], '{"g":' .. cur .. ',"e":' .. ARGV[4] .. '}')
  end
elseif ARGV[1] == '1' then
  redis.call('SET', KEYS[4], '{"g":' .. ARGV[8] .. ',"e":' .. act .. '}')
end
local v = redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('HSET', KEYS[1], 'g', ARGV[8], 'r', ARGV[9], 'e', act, 'k', link, 'c', v .. ' ' .. ARGV[8] .. ' ' .. ARGV[9])
redis.call('SET', KEYS[6], ARGV[8])
redis.call('RPUSH', KEYS[2], act)
redis.call('ZADD', KEYS[3], 0, ARGV[7])
redis.call('PUBLISH', ARGV[10], 'activated\n' .. v .. ' ' .. ARGV[8] .. ' ' .. ARGV[7])
return {'OK', v, redis.call('HGET', KEYS[1], 'j'), found or 1}
`)

// AppendPublish commits a publish (see varplane.Store.AppendPublish) in one
// script, on the keys of the scope's slot. Errors as Append; on any error
// nothing is written but the harmless root and claim entries of prepare.
func (s *Store) AppendPublish(ctx context.Context, created, activated *varplane.Event, expected varplane.Generation) (bool, error) {
	if err := s.checkWritable(); err != nil {
		return false, err
	}
	if err := checkScope(activated.Scope); err != nil {
		return false, err
	}
	if err := checkPublish(created, activated, expected); err != nil {
		return false, err
	}
	// Checked (and compacted, as the stored form always is) here, since
	// the records are encoded with the document as it is.
	doc, err := eventjson.Compacted(created.Document)
	if err != nil {
		return false, varplane.Errorf(varplane.CodeBadRequest, "a revision-created event needs a JSON document")
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	rec := &varplane.RevisionRecord{
		Scope: created.Scope, Revision: created.Revision, Document: doc,
		SchemaID: created.SchemaID, SchemaVersion: created.SchemaVersion, Actor: created.Actor, CreatedAt: created.Timestamp,
	}
	withKey := *created
	withKey.IdempotencyKey, withKey.RequestHash = activated.IdempotencyKey, activated.RequestHash
	withKey.Document = nil // the document is in the record (history.go)
	noKey := *activated
	noKey.IdempotencyKey, noKey.RequestHash = "", ""
	recJSON := eventjson.Record(rec)
	if err := s.prepare(ctx, activated); err != nil {
		return false, err
	}
	g := strconv.FormatUint(uint64(activated.Generation), 10)
	keys := append(s.commonKeys(activated), s.keys.revision(activated.Scope, activated.Revision), s.keys.floor(activated.Scope))
	// The links of both outcomes: the revision created, then activated
	// (afterCreated, afterActivated), or found and activated alone.
	var afterCreated, afterActivated, alone varplane.ChainHead
	st, rest, err := s.chained(activated.Scope, func(head varplane.ChainHead, _ []rueidis.RedisMessage) (string, []rueidis.RedisMessage, error) {
		var c, a, k []byte
		c, afterCreated = linked(&withKey, head)
		a, afterActivated = linked(&noKey, afterCreated)
		k, alone = linked(activated, head)
		args := []string{
			hasIdem(activated), strconv.FormatUint(uint64(expected), 10), string(recJSON), string(c), string(a), string(k),
			string(activated.Scope), g, string(activated.Revision), s.keys.channel(),
			chainArg(head), chainArg(afterActivated), chainArg(alone),
		}
		return reply(publishScript.Exec(ctx, s.client, keys, args))
	})
	if err != nil {
		return false, s.scriptFailure(activated.Scope, err)
	}
	if err := s.status(activated, expected, st, rest); err != nil {
		return false, err
	}
	isNew := true
	ev := activated
	if len(rest) > 2 {
		if stored, ok, _ := optString(rest[2]); ok {
			isNew = false
			var found varplane.RevisionRecord
			if err := eventjson.DecodeRecord([]byte(stored), &found); err != nil {
				s.log.Warn("redis store: published, but the stored revision cannot be read; reloading", "scope", string(activated.Scope), "err", err)
				s.refreshAfterCommit(ctx, activated.Scope)
				return false, nil
			}
			rec = &found
		} else {
			ev = &noKey
		}
	}
	link := alone
	created.Seq, created.Hash = 0, "" // not appended: the revision was found
	if isNew {
		link = afterActivated
		created.Seq, created.Hash = afterCreated.Seq, afterCreated.Hash
	}
	activated.Seq, activated.Hash = link.Seq, link.Hash
	snap := &snapshot{state: &varplane.ScopeState{Scope: ev.Scope, Generation: ev.Generation, Head: varplane.NewHead(ev, rec), Chain: link}, g: g, r: string(ev.Revision), rec: rec}
	if err := s.fillOwn(snap, rest); err != nil {
		s.log.Warn("redis store: committed, but the script reply cannot be read; reloading", "scope", string(ev.Scope), "err", err)
		s.refreshAfterCommit(ctx, ev.Scope)
		return isNew, nil
	}
	s.installAndDeliver([]installReq{{scope: ev.Scope, snap: snap, seq: ownSeq}})
	return isNew, nil
}

// checkPublish refuses a malformed publish before anything is sent.
func checkPublish(created, activated *varplane.Event, expected varplane.Generation) error {
	switch {
	case created.Kind != varplane.EventRevisionCreated || activated.Kind != varplane.EventActivated:
		return varplane.Errorf(varplane.CodeBadRequest, "a publish commits a revision-created and an activated event, not %s and %s", created.Kind, activated.Kind)
	case created.Scope != activated.Scope || created.Revision != activated.Revision:
		return varplane.Errorf(varplane.CodeBadRequest, "a publish activates the revision it creates, not %s of %q", activated.Revision, activated.Scope)
	case created.IdempotencyKey != "" || created.RequestHash != "":
		return varplane.Errorf(varplane.CodeBadRequest, "a publish carries its idempotency key on the activation, not on the revision")
	case activated.Generation != expected+1:
		return varplane.Errorf(varplane.CodeBadRequest, "activation generation %d is not expected generation %d + 1", activated.Generation, expected)
	case len(created.Document) == 0:
		return varplane.Errorf(varplane.CodeBadRequest, "a revision-created event needs a JSON document")
	}
	if _, err := varplane.ParseRevision(string(created.Revision)); err != nil {
		return err
	}
	return nil
}
