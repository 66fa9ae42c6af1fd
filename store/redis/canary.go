package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/varplane/varplane"
)

// The canary reports of data-plane instances (docs/instances.md, docs/control.md):
// like the status heartbeat, they are written by instances (so they are
// allowed on a ReadOnly store) and they expire.

// ReportTTL is how long a canary report lives after its last write.
const ReportTTL = 8 * 24 * time.Hour

// reportKey is instance id's report of window; reportIndex is the hash of
// instance id → unix milliseconds of its last report of window. Both carry
// the window as hash tag, so one script writes both on a Cluster.
func (k keys) reportKey(window, id string) string {
	return k.prefix + ":report:{" + window + "}:" + id
}
func (k keys) reportIndex(window string) string { return k.prefix + ":reports:{" + window + "}" }

// reportScript writes a report and lists it in its window's index; both
// live ReportTTL after this write. KEYS: 1 report, 2 index. ARGV: 1 value,
// 2 id, 3 now (ms), 4 ttl (ms).
var reportScript = rueidis.NewLuaScript(`
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
`)

// validWindow refuses a window id that would break its hash tag.
func validWindow(window string) error {
	if window == "" || strings.ContainsAny(window, "{}") {
		return varplane.Errorf(varplane.CodeBadRequest, "redis store: canary window %q: want a non-empty id without braces", window)
	}
	return nil
}

// WriteCanaryReport writes instance id's report of window (JSON, see
// instance.Report), replacing its previous one; it expires ReportTTL after
// this write.
func (s *Store) WriteCanaryReport(ctx context.Context, window, id string, value []byte) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := validWindow(window); err != nil {
		return err
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	args := []string{string(value), id, strconv.FormatInt(time.Now().UnixMilli(), 10), strconv.FormatInt(ReportTTL.Milliseconds(), 10)}
	if err := reportScript.Exec(ctx, s.client, []string{s.keys.reportKey(window, id), s.keys.reportIndex(window)}, args).Error(); err != nil {
		return varplane.Unavailable(fmt.Errorf("redis store: write the canary report of instance %q: %w", id, err))
	}
	return nil
}

// CanaryReports returns the report of window of every instance that wrote
// one and whose report has not expired, by the instance id it was filed
// under.
func (s *Store) CanaryReports(ctx context.Context, window string) (map[string][]byte, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := validWindow(window); err != nil {
		return nil, err
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	ids, err := s.client.Do(ctx, s.client.B().Hkeys().Key(s.keys.reportIndex(window)).Build()).AsStrSlice()
	if err != nil {
		return nil, s.readFailure("canary reports", "", err)
	}
	return s.getEach(ctx, ids, func(id string) string { return s.keys.reportKey(window, id) }, "canary report")
}
