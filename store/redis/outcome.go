package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/rueidis"

	"github.com/varplane/varplane"
)

// commitFailure reports a commit script that failed: store-unavailable
// when Redis certainly did not run it (scriptNotRun), outcome-unknown
// otherwise, since Redis may have run it and the reply been lost (a
// timeout, a connection closed after the script was sent).
func (s *Store) commitFailure(scope varplane.Scope, err error) error {
	werr := s.writeFailure(scope, err)
	var e *varplane.Error
	if scriptNotRun(err) || !errors.As(werr, &e) {
		return werr
	}
	return varplane.OutcomeUnknown(e.Err)
}

// refusals are the Redis errors that refuse a script before it writes
// anything: before it runs (routing, loading, a busy server, no script,
// authentication), or at its first write (a replica, out of memory, a
// failed save, too few replicas), which none of ours makes before its
// checks; the condition cannot change while a script runs, so a later
// write cannot meet it. An error a script meets after writing (WRONGTYPE,
// NOPERM on the channel it publishes to) is not one of them.
var refusals = map[string]bool{
	"NOSCRIPT": true, "BUSY": true, "LOADING": true, "MASTERDOWN": true, "CLUSTERDOWN": true, "TRYAGAIN": true,
	"MOVED": true, "ASK": true, "CROSSSLOT": true, "NOAUTH": true, "WRONGPASS": true,
	"READONLY": true, "OOM": true, "MISCONF": true, "NOREPLICAS": true,
}

// scriptNotRun reports an error after which Redis certainly did not run a
// commit script: the connection could not be made, or Redis refused it
// (refusals).
func scriptNotRun(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		word, _, _ := strings.Cut(re.Error(), " ")
		return refusals[word]
	}
	return false
}

// probeScript declares that it may write (a shebang without the no-writes
// flag) and writes nothing: Redis refuses it where it would refuse a
// commit script's first write (a read-only replica, out of memory with
// noeviction, a failed save with stop-writes-on-bgsave-error, too few
// replicas) and runs it otherwise.
var probeScript = rueidis.NewLuaScript("#!lua\nreturn 1")

// WriteReady reports whether Redis accepts the store's writes now
// (varplane.WriteReadiness): it runs probeScript on every node, bounded by
// the command timeout. Unreachable, read-only or refusing writes is
// store-unavailable; a store opened ReadOnly is store-unsupported. On a
// Redis Cluster the replicas answer READONLY, which is their role: the
// cluster is ready when every other node runs the probe.
func (s *Store) WriteReady(ctx context.Context) error {
	if err := s.checkWritable(); err != nil {
		return err
	}
	cluster := s.client.Mode() == rueidis.ClientModeCluster
	ran := false
	for addr, c := range s.client.Nodes() {
		cctx, cancel := s.cmdCtx(ctx)
		err := probeScript.Exec(cctx, c, nil, nil).Error()
		cancel()
		if re, ok := rueidis.IsRedisErr(err); ok && cluster && strings.HasPrefix(re.Error(), "READONLY") {
			continue
		}
		if err != nil {
			return varplane.Unavailable(fmt.Errorf("redis store: %s does not accept writes: %w", addr, err))
		}
		ran = true
	}
	if !ran {
		return varplane.Unavailable(errors.New("redis store: no node accepts writes"))
	}
	return nil
}
