package redis

import "github.com/redis/rueidis"

// The scripts. Each one touches only keys of one slot (the scope's root tag):
// the ones it declares in KEYS, and, for the subtree deactivation, the heads
// and histories of descendants, whose names it builds from a declared base
// that already carries the tag. TestScriptKeysShareOneSlot checks this.
//
// Generations are compared and stored as decimal strings, so no Lua number
// conversion can round them. Replies are tables whose first element is a
// status word.

// luaIdemCheck refuses a duplicate idempotency key before anything is written.
// ARGV[1] is "1" when the event carries a key, KEYS[4] its record.
const luaIdemCheck = `
if ARGV[1] == '1' and redis.call('EXISTS', KEYS[4]) == 1 then
  return {'DUP'}
end
`

// luaChain compares the scope's chain head (the head hash's field k; the
// empty string when the scope has no chained event yet) with the one the
// caller linked the commit's events from, ARGV[n]. A script calls chainStale(n) after its
// other checks, so that a commit refused for another reason answers that
// reason, and answers {'CHAIN', k} when it returns true: nothing written.
const luaChain = `
local function chainStale(n)
  local k = redis.call('HGET', KEYS[1], 'k') or ''
  if k ~= ARGV[n] then
    return {'CHAIN', k}
  end
  return nil
end
`

// luaGen finds a scope's current generation for a commit script that
// allocates the next one. The head's g is the generation, but a head can be
// deleted or rewritten by hand, and "no head" would hand generation 1 out
// again. So every script that allocates a generation also writes it to the
// scope's floor key (KEYS[6], never deleted by varplane), and a head that is
// missing or below its floor is a vanished head: the script answers
// {'VANISHED', floor} and writes nothing, unless the caller expects exactly
// the floor (the documented recovery: activate over a vanished head at
// floor+1, which no one has had). Generations are decimal strings; declt
// compares them without converting to a Lua number.
const luaGen = `
local function declt(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local function curgen(head, floorkey)
  local g = redis.call('HGET', head, 'g')
  local f = redis.call('GET', floorkey)
  if f and (not g or declt(g, f)) then
    return nil, f
  end
  return g or '0', f
end
`

// createScript stores a revision record and its revision-created event,
// and moves the scope's chain head to the event's link (a write of the
// head hash: its version goes up, and a head that vanished is refused as
// by rejectScript, since the chain head went with it).
//
// KEYS: 1 head, 2 history, 3 index, 4 idem, 5 revision record, 6 floor.
// ARGV: 1 has-idem, 2 record JSON, 3 event JSON (linked), 4 scope,
// 5 the chain head the event was linked from, 6 the event's link.
// Reply: {'OK', v, g}: the new version and the generation.
var createScript = rueidis.NewLuaScript(luaIdemCheck + luaGen + luaChain + `
local g, floor = curgen(KEYS[1], KEYS[6])
if not g then
  return {'VANISHED', floor}
end
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {'EXISTS'}
end
local stale = chainStale(5)
if stale then
  return stale
end
redis.call('SET', KEYS[5], ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[3], 0, ARGV[4])
local v = redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('HSETNX', KEYS[1], 'g', '0')
redis.call('HSETNX', KEYS[1], 'r', '')
redis.call('HSET', KEYS[1], 'k', ARGV[6], 'c', v .. ' ' .. g .. ' ' .. redis.call('HGET', KEYS[1], 'r'))
if ARGV[1] == '1' then
  redis.call('SET', KEYS[4], '{"g":' .. g .. ',"e":' .. ARGV[3] .. '}')
end
return {'OK', v, g}
`)

// activateScript compares the head's generation with the expected one,
// replaces the head, appends the history entry, records the idempotency key
// and publishes the invalidation.
//
// KEYS: 1 head, 2 history, 3 index, 4 idem, 5 revision record, 6 floor.
// ARGV: 1 has-idem, 2 expected generation, 3 event JSON (linked), 4 scope,
// 5 new generation, 6 revision, 7 channel, 8 the chain head the event was
// linked from, 9 the event's link.
// Reply: {'OK', v, j}: the new version and the last rejection.
var activateScript = rueidis.NewLuaScript(luaIdemCheck + luaGen + luaChain + `
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
if redis.call('EXISTS', KEYS[5]) == 0 then
  return {'NOREV'}
end
local stale = chainStale(8)
if stale then
  return stale
end
local v = redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('HSET', KEYS[1], 'g', ARGV[5], 'r', ARGV[6], 'e', ARGV[3], 'k', ARGV[9], 'c', v .. ' ' .. ARGV[5] .. ' ' .. ARGV[6])
redis.call('SET', KEYS[6], ARGV[5])
redis.call('RPUSH', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[3], 0, ARGV[4])
if ARGV[1] == '1' then
  redis.call('SET', KEYS[4], '{"g":' .. ARGV[5] .. ',"e":' .. ARGV[3] .. '}')
end
redis.call('PUBLISH', ARGV[7], 'activated\n' .. v .. ' ' .. ARGV[5] .. ' ' .. ARGV[4])
return {'OK', v, redis.call('HGET', KEYS[1], 'j')}
`)

// rejectScript records a rejected event as the scope's last rejection.
//
// KEYS: 1 head, 2 history, 3 index, 4 idem, 5 floor.
// ARGV: 1 has-idem, 2 event JSON (linked), 3 scope, 4 channel, 5 the chain
// head the event was linked from, 6 the event's link.
// A vanished head is refused: writing the rejection would create a head at
// generation 0 over one that had a higher generation.
var rejectScript = rueidis.NewLuaScript(luaIdemCheck + luaGen + luaChain + `
local cur, floor = curgen(KEYS[1], KEYS[5])
if not cur then
  return {'VANISHED', floor}
end
local stale = chainStale(5)
if stale then
  return stale
end
local v = redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('HSETNX', KEYS[1], 'g', '0')
redis.call('HSETNX', KEYS[1], 'r', '')
local g = redis.call('HGET', KEYS[1], 'g')
redis.call('HSET', KEYS[1], 'j', ARGV[2], 'k', ARGV[6], 'c', v .. ' ' .. g .. ' ' .. redis.call('HGET', KEYS[1], 'r'))
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], 0, ARGV[3])
if ARGV[1] == '1' then
  redis.call('SET', KEYS[4], '{"g":' .. g .. ',"e":' .. ARGV[2] .. '}')
end
redis.call('PUBLISH', ARGV[4], 'rejected\n' .. v .. ' ' .. g .. ' ' .. ARGV[3])
return {'OK', v}
`)

// deactivateScript deactivates a scope and every active descendant in one
// step. It finds the descendants itself, in the per-root index (bytewise
// order, so the cascade is sorted), so no concurrent activation can slip
// between choosing them and clearing them.
//
// The event's link covers its cascade, which the script chooses: the
// caller links the event with the cascade it expects (ARGV[12], "<d1> <g1>
// <d2> <g2> …", the descendants and their new generations; scopes hold no
// space), and the script compares that too before writing anything,
// answering {'CHAIN', k, cascade} with the cascade it found when either
// differs.
//
// KEYS: 1 head, 2 history, 3 index, 4 idem, 5 floor.
// ARGV: 1 has-idem, 2 expected generation, 3 event JSON without its closing
// brace, 4 scope, 5 new generation, 6 head key base, 7 history key base,
// 8 channel, 9 the JSON tail of a descendant's event (",actor,reason,
// timestamp" fields), 10 floor key base, 11 the chain head the event was
// linked from, 12 the expected cascade, 13 the event's link, 14 the end of
// the event's JSON after its cascade (its seq, hash and closing brace).
// Reply: {'OK', v, j, k, d1, g1, v1, j1, k1, d2, ...}: the version, last
// rejection and chain head of the scope, then those of each descendant
// cleared (its chain head unchanged: the cascade entry takes no link). A
// descendant's next generation is above its floor too; a descendant whose
// head vanished is not active as far as the script can tell and is left as
// it is (its reads fail closed).
var deactivateScript = rueidis.NewLuaScript(luaIdemCheck + luaGen + `
local cur, floor = curgen(KEYS[1], KEYS[5])
if not cur then
  if floor ~= ARGV[2] then
    return {'VANISHED', floor}
  end
  cur = floor
end
if cur ~= ARGV[2] then
  return {'CONFLICT', cur}
end
local scope = ARGV[4]
local descs = redis.call('ZRANGEBYLEX', KEYS[3], '[' .. scope .. '.', '(' .. scope .. '/')
local out = {'OK', 0, redis.call('HGET', KEYS[1], 'j'), ARGV[13]}
local active = {}
local want = {}
for _, d in ipairs(descs) do
  local h = redis.call('HMGET', ARGV[6] .. d, 'g', 'r', 'j', 'k')
  if h[2] and h[2] ~= '' then
    local og = h[1] or '0'
    local df = redis.call('GET', ARGV[10] .. d)
    if df and declt(og, df) then
      og = df
    end
    local ng = string.format('%d', tonumber(og) + 1)
    active[#active + 1] = {d, og, ng, h[3], h[4]}
    want[#want + 1] = d .. ' ' .. ng
  end
end
local k = redis.call('HGET', KEYS[1], 'k') or ''
local cascade = table.concat(want, ' ')
if k ~= ARGV[11] or cascade ~= ARGV[12] then
  return {'CHAIN', k, cascade}
end
local casc = {}
local msg = {}
for _, a in ipairs(active) do
  local d, og, ng = a[1], a[2], a[3]
  local hk = ARGV[6] .. d
  local dv = redis.call('HINCRBY', hk, 'v', 1)
  redis.call('HSET', hk, 'g', ng, 'r', '', 'c', dv .. ' ' .. ng .. ' ')
  redis.call('SET', ARGV[10] .. d, ng)
  redis.call('HDEL', hk, 'e')
  local q = '"' .. (string.gsub(d, '[\\"]', '\\%0')) .. '"'
  redis.call('RPUSH', ARGV[7] .. d, '{"kind":"deactivated","scope":' .. q ..
    ',"generation":' .. ng .. ',"previousGeneration":' .. og .. ARGV[9] .. '}')
  casc[#casc + 1] = '{"scope":' .. q .. ',"generation":' .. ng .. '}'
  msg[#msg + 1] = dv .. ' ' .. ng .. ' ' .. d
  out[#out + 1] = d
  out[#out + 1] = ng
  out[#out + 1] = dv
  out[#out + 1] = a[4]
  out[#out + 1] = a[5]
end
local v = redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('HSET', KEYS[1], 'g', ARGV[5], 'r', '', 'k', ARGV[13], 'c', v .. ' ' .. ARGV[5] .. ' ')
redis.call('SET', KEYS[5], ARGV[5])
redis.call('HDEL', KEYS[1], 'e')
local ev = ARGV[3]
if #casc > 0 then
  ev = ev .. ',"cascade":[' .. table.concat(casc, ',') .. ']'
end
ev = ev .. ARGV[14]
redis.call('RPUSH', KEYS[2], ev)
redis.call('ZADD', KEYS[3], 0, scope)
if ARGV[1] == '1' then
  redis.call('SET', KEYS[4], '{"g":' .. ARGV[5] .. ',"e":' .. ev .. '}')
end
local body = 'deactivated\n' .. v .. ' ' .. ARGV[5] .. ' ' .. scope
if #msg > 0 then
  body = body .. '\n' .. table.concat(msg, '\n')
end
redis.call('PUBLISH', ARGV[8], body)
out[2] = v
return out
`)

// confirmScript is the conditional read of revalidation, run with
// EVALSHA_RO: it answers 0 and transfers nothing when the head's version,
// generation and revision are the ones the caller holds, and the head's small
// fields (never the document) otherwise. With an empty ARGV[1] it is the
// plain read of a head.
//
// Every script that writes a head also sets its field c to
// "<v> <g> <r>", so the unchanged case is one HGET and one string compare.
//
// KEYS: 1 head, 2 floor. ARGV: 1 "<version> <generation> <revision>".
// Reply: 0, or {v, g, r, e, j, k, f} (nil fields when the head does not
// exist; k is the chain head, nil before the scope's first chained event;
// f is the generation floor, nil when no generation was ever allocated).
var confirmScript = rueidis.NewLuaScriptReadOnly(`
if redis.call('HGET', KEYS[1], 'c') == ARGV[1] then
  return 0
end
local h = redis.call('HMGET', KEYS[1], 'v', 'g', 'r', 'e', 'j', 'k')
h[7] = redis.call('GET', KEYS[2])
return h
`)

// claimTakeoverScript moves the global claim of an idempotency key from a
// root whose slot holds no record for it (a commit that failed after its
// claim) to another root, only if the claim still names the old root.
//
// KEYS: 1 claim. ARGV: 1 old root, 2 new root. Reply: 1 when moved.
var claimTakeoverScript = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
`)
