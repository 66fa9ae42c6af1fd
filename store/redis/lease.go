package redis

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/varplane/varplane"
)

// lease is the key of lease name: "<prefix>:lease:{<base64url(name)>}". Its
// value is the holder token and its PX expiry the lease's end. The name is
// its own hash tag, base64url-encoded for the reason keys.tag gives, so a
// name holding braces cannot pick another slot; every lease command and
// script touches this one key only, so any slot serves it on a cluster.
func (k keys) lease(name string) string {
	return k.prefix + ":lease:{" + base64.RawURLEncoding.EncodeToString([]byte(name)) + "}"
}

// renewLeaseScript extends the lease in KEYS[1] to ARGV[2] milliseconds
// only while its value is the holder ARGV[1]: the compare and the expiry
// are one step, so a lease that expired and was taken is never extended.
// Reply: 1 renewed, 0 not held.
var renewLeaseScript = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// releaseLeaseScript deletes the lease in KEYS[1] only while its value is
// the holder ARGV[1] (compare-and-delete). Reply: 1 released, 0 not held.
var releaseLeaseScript = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

// leaseMillis is d in whole milliseconds, rounded up so a lease never ends
// before the duration asked for.
func leaseMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// AcquireLease takes the lease with SET NX PX; when the key exists, the
// renew script re-takes it for its own holder (for the full duration) and
// refuses any other with ErrLeaseHeld. See varplane.Store.AcquireLease.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, d time.Duration) error {
	if err := varplane.CheckLease(name, holder, d); err != nil {
		return err
	}
	if err := s.checkOpen(); err != nil {
		return err
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	key, ms := s.keys.lease(name), leaseMillis(d)
	err := s.client.Do(ctx, s.client.B().Set().Key(key).Value(holder).Nx().PxMilliseconds(ms).Build()).Error()
	switch {
	case err == nil:
		return nil
	case !rueidis.IsRedisNil(err):
		return leaseFailure("acquire", name, err)
	}
	ok, err := renewLeaseScript.Exec(ctx, s.client, []string{key}, []string{holder, strconv.FormatInt(ms, 10)}).AsInt64()
	if err != nil {
		return leaseFailure("acquire", name, err)
	}
	if ok != 1 {
		return varplane.ErrLeaseHeld
	}
	return nil
}

// RenewLease extends holder's lease by the compare-and-expire script. See
// varplane.Store.RenewLease.
func (s *Store) RenewLease(ctx context.Context, name, holder string, d time.Duration) error {
	if err := varplane.CheckLease(name, holder, d); err != nil {
		return err
	}
	return s.leaseScript(ctx, "renew", renewLeaseScript, name, holder, strconv.FormatInt(leaseMillis(d), 10))
}

// ReleaseLease deletes holder's lease by the compare-and-delete script. See
// varplane.Store.ReleaseLease.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if err := varplane.CheckLeaseHolder(name, holder); err != nil {
		return err
	}
	return s.leaseScript(ctx, "release", releaseLeaseScript, name, holder)
}

func (s *Store) leaseScript(ctx context.Context, op string, script *rueidis.Lua, name string, args ...string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	ok, err := script.Exec(ctx, s.client, []string{s.keys.lease(name)}, args).AsInt64()
	if err != nil {
		return leaseFailure(op, name, err)
	}
	if ok != 1 {
		return varplane.ErrLeaseLost
	}
	return nil
}

func leaseFailure(op, name string, err error) error {
	return varplane.Unavailable(fmt.Errorf("redis store: %s lease %q: %w", op, name, err))
}
