package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/store/redis"
	"github.com/varplane/varplane/store/redis/redistest"
)

// BenchmarkPublishRedisCommands publishes through an engine guarded by the
// control plane (its policy scope has no head: no policy was ever set) on a
// private Redis, and reports the commands Redis ran per publish (INFO
// commandstats after CONFIG RESETSTAT, which is why the server is private),
// with the head reads (evalsha_ro) among them.
func BenchmarkPublishRedisCommands(b *testing.B) {
	r := redistest.StartServer(b)
	ctx := context.Background()
	st, err := redis.Open(ctx, r.URL("bench"), redis.Options{Logger: slog.New(slog.DiscardHandler), RevalidateInterval: redis.MaxRevalidateInterval})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	guard := control.NewGuard()
	eng := varplane.NewEngine(st, varplane.Options{Owners: guard.Owners()})
	b.Cleanup(eng.Close)
	control.New(eng, guard, control.Options{})
	opt, err := rueidis.ParseURL("redis://" + r.Addr + "/0")
	if err != nil {
		b.Fatal(err)
	}
	opt.DisableCache = true
	raw, err := rueidis.NewClient(opt)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(raw.Close)
	var gen varplane.Generation
	publish := func() {
		res, err := eng.Publish(ctx, varplane.PublishRequest{Scope: "app.k", Document: json.RawMessage(fmt.Sprintf(`{"n":%d}`, gen)), ExpectedGeneration: gen, Actor: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		gen = res.Generation
	}
	publish() // warm: the scope and the policy scope are read once
	if err := raw.Do(ctx, raw.B().ConfigResetstat().Build()).Error(); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	b.ResetTimer()
	for b.Loop() {
		publish()
	}
	b.StopTimer()
	if time.Since(start) >= redis.MaxRevalidateInterval {
		b.Log("a revalidation pass may have run during the measurement")
	}
	info, err := raw.Do(ctx, raw.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	var total, reads int64
	var parts []string
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" || name == "cmdstat_config|resetstat" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		total += n
		if name == "cmdstat_evalsha_ro" || name == "cmdstat_eval_ro" {
			reads += n
		}
		parts = append(parts, fmt.Sprintf("%s=%d", strings.TrimPrefix(name, "cmdstat_"), n))
	}
	b.ReportMetric(float64(total)/float64(b.N), "redis_cmds/op")
	b.ReportMetric(float64(reads)/float64(b.N), "head_reads/op")
	b.Logf("commands over %d publishes: %s", b.N, strings.Join(parts, " "))
}
