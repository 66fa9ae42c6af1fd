package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/varplane/varplane"
)

// Forget drops scope's installed head from memory, so that an embedding
// cache (package instance) that bounds what it holds bounds the store's copy
// too. The next read of scope reads Redis again. It never touches Redis.
func (s *Store) Forget(scope varplane.Scope) {
	s.mu.Lock()
	s.entries.Delete(scope)
	s.mu.Unlock()
}

// ConfirmedAt returns when Redis last confirmed scope's installed head (an
// install, an invalidation that matched, or a revalidation pass), and false
// when the store does not hold scope. Package instance reads it instead of
// running revalidation reads of its own.
func (s *Store) ConfirmedAt(scope varplane.Scope) (time.Time, bool) {
	e := s.entry(scope)
	if e == nil {
		return time.Time{}, false
	}
	return time.Unix(0, e.confirmed.Load()), true
}

// The status heartbeat of data-plane instances (docs/instances.md). These
// keys are the one thing a data-plane instance writes, so they are allowed
// on a ReadOnly store. Unlike documents, they expire: a status nobody
// refreshes must vanish.
const (
	// StatusTTL is how long a status value lives after its last write
	// (varplane.StatusLifetime): an hour, so that deletion protection
	// names the instances seen in the last hour.
	StatusTTL = varplane.StatusLifetime
	// StatusMaxAge is the age past which a reader that counts live
	// instances ignores a status (varplane.StatusFresh).
	StatusMaxAge = varplane.StatusFresh
	// InstanceListMaxAge is the age past which whoever writes the instance
	// list drops an entry.
	InstanceListMaxAge = 3 * time.Hour
)

// statusKey is the status value of one instance; instanceList is the hash
// of instance id → unix milliseconds of when it last listed itself.
func (k keys) statusKey(id string) string { return k.prefix + ":status:" + id }
func (k keys) instanceList() string       { return k.prefix + ":instances" }

// listScript adds an instance to the list and drops entries older than
// ARGV[3] milliseconds before ARGV[2]. KEYS: 1 list. ARGV: 1 id, 2 now (ms),
// 3 max age (ms).
var listScript = rueidis.NewLuaScript(`
local now = tonumber(ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local t = tonumber(all[i + 1])
  if not t or now - t > tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// WriteStatus writes instance id's status value (JSON, see
// docs/instances.md) with StatusTTL.
func (s *Store) WriteStatus(ctx context.Context, id string, value []byte) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	err := s.client.Do(ctx, s.client.B().Set().Key(s.keys.statusKey(id)).Value(rueidis.BinaryString(value)).Px(StatusTTL).Build()).Error()
	if err != nil {
		return varplane.Unavailable(fmt.Errorf("redis store: write status of instance %q: %w", id, err))
	}
	return nil
}

// DeleteStatus deletes instance id's status key (nothing when it has none).
// Its entry in the instance list stays, as an expired status's does, and
// ages out of it past InstanceListMaxAge: another server may have listed
// the id and would not list it again within varplane.ListInterval when the
// name comes back.
func (s *Store) DeleteStatus(ctx context.Context, id string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	if err := s.client.Do(ctx, s.client.B().Del().Key(s.keys.statusKey(id)).Build()).Error(); err != nil {
		return varplane.Unavailable(fmt.Errorf("redis store: delete status of instance %q: %w", id, err))
	}
	return nil
}

// ListInstance lists instance id in the instance list as of now, dropping
// entries older than InstanceListMaxAge.
func (s *Store) ListInstance(ctx context.Context, id string, now time.Time) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	args := []string{id, strconv.FormatInt(now.UnixMilli(), 10), strconv.FormatInt(InstanceListMaxAge.Milliseconds(), 10)}
	if err := listScript.Exec(ctx, s.client, []string{s.keys.instanceList()}, args).Error(); err != nil {
		return varplane.Unavailable(fmt.Errorf("redis store: list instance %q: %w", id, err))
	}
	return nil
}

// InstanceStatuses returns the status value of every listed instance that
// has one, by instance id: those written in the last StatusTTL. It does
// not judge their age: a caller that counts live instances ignores a
// status whose writtenAt is older than StatusMaxAge.
func (s *Store) InstanceStatuses(ctx context.Context) (map[string][]byte, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	ids, err := s.client.Do(ctx, s.client.B().Hkeys().Key(s.keys.instanceList()).Build()).AsStrSlice()
	if err != nil {
		return nil, s.readFailure("instance list", "", err)
	}
	// One GET each: the status keys carry no hash tag, so on a Cluster they
	// lie in different slots and no MGET covers them.
	return s.getEach(ctx, ids, s.keys.statusKey, "instance status")
}

// getEach GETs key(id) for every id and returns the values by id, leaving
// out those that expired (or were never written).
func (s *Store) getEach(ctx context.Context, ids []string, key func(string) string, what string) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(ids) == 0 {
		return out, nil
	}
	cmds := make(rueidis.Commands, len(ids))
	for i, id := range ids {
		cmds[i] = s.client.B().Get().Key(key(id)).Build()
	}
	for i, res := range s.client.DoMulti(ctx, cmds...) {
		b, err := res.AsBytes()
		if rueidis.IsRedisNil(err) {
			continue // listed, expired
		}
		if err != nil {
			return nil, s.readFailure(what, "", err)
		}
		out[ids[i]] = b
	}
	return out, nil
}
