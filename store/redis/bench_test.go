package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/storetest"
)

// sizedDoc returns a JSON object of about n bytes.
func sizedDoc(n int) json.RawMessage {
	return json.RawMessage(`{"blob":"` + strings.Repeat("x", max(n-12, 0)) + `"}`)
}

// BenchmarkRevalidationRead measures the conditional read of an unchanged
// head on a private Redis, and reports the Redis-side time per call from INFO
// commandstats (reset with CONFIG RESETSTAT, which is why the server is
// private).
func BenchmarkRevalidationRead(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"1KiB", 1 << 10}, {"4MiB", 4 << 20}} {
		b.Run(size.name, func(b *testing.B) {
			p := startPrivateRedis(b, "--appendonly", "no")
			s := openStore(b, p.url(""), Options{})
			ctx := context.Background()
			ev := storetest.CreatedEvent("bench.reval", sizedDoc(size.n))
			if err := s.Append(ctx, ev, 0); err != nil {
				b.Fatal(err)
			}
			if err := s.Append(ctx, storetest.ActivatedEvent("bench.reval", ev.Revision, 0), 0); err != nil {
				b.Fatal(err)
			}
			snap := s.entry("bench.reval").Snap.Load()
			keys, args := []string{s.keys.head("bench.reval"), s.keys.floor("bench.reval")}, []string{snap.confirmArg()}
			if n, err := confirmScript.Exec(ctx, s.client, keys, args).AsInt64(); err != nil || n != 0 {
				b.Fatalf("warm-up confirm = %d, %v; want 0 (unchanged)", n, err)
			}
			raw := rawClient(b, p.url(""))
			if err := raw.Do(ctx, raw.B().ConfigResetstat().Build()).Error(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if n, err := confirmScript.Exec(ctx, s.client, keys, args).AsInt64(); err != nil || n != 0 {
					b.Fatalf("confirm = %d, %v; want 0 (unchanged)", n, err)
				}
			}
			b.StopTimer()
			info, err := raw.Do(ctx, raw.B().Info().Section("commandstats").Build()).ToString()
			if err != nil {
				b.Fatal(err)
			}
			calls, usecPerCall := commandStat(info, "evalsha_ro")
			if calls < int64(b.N) {
				b.Fatalf("commandstats counts %d evalsha_ro calls, want >= %d:\n%s", calls, b.N, info)
			}
			b.ReportMetric(usecPerCall, "redis-µs/call")
		})
	}
}

// commandStat reads calls and usec_per_call of cmd from INFO commandstats.
func commandStat(info, cmd string) (calls int64, usecPerCall float64) {
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec_per_call":
				usecPerCall, _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	return calls, usecPerCall
}

func benchHarness(b *testing.B) storetest.Harness {
	u := sharedURL(b)
	return storetest.Harness{Open: func(tb testing.TB) varplane.Store {
		return openStore(tb, withPrefix(tb, u, testPrefix(tb, u)), Options{})
	}}
}

// BenchmarkCommit measures activations (one script each) against the shared
// Redis at parallelism 1 and 64.
func BenchmarkCommit(b *testing.B) {
	for _, par := range []int{1, 64} {
		b.Run(fmt.Sprintf("parallel=%d", par), func(b *testing.B) {
			storetest.BenchmarkActivate(b, benchHarness(b), par)
		})
	}
}

// BenchmarkHeadRead measures State of an installed head (memory only).
func BenchmarkHeadRead(b *testing.B) { storetest.BenchmarkHeadRead(b, benchHarness(b)) }

// BenchmarkCommitToWatch measures the time from the start of an activation
// through store A to its delivery to a Watch listener of store B on the same
// Redis, and reports p50 and p99.
func BenchmarkCommitToWatch(b *testing.B) {
	u := sharedURL(b)
	u = withPrefix(b, u, testPrefix(b, u))
	a := openStore(b, u, Options{})
	bs := openStore(b, u, Options{})
	storetest.CommitToWatch(b, a, bs)
}

// BenchmarkRevalidationPass10k runs one revalidation pass over 10,000
// installed, unchanged heads on a private Redis, and reports the pass's
// wall time per document and the Redis time per document (INFO
// commandstats usec_per_call of evalsha_ro).
func BenchmarkRevalidationPass10k(b *testing.B) {
	const n = 10_000
	p := startPrivateRedis(b, "--appendonly", "no")
	s := openStore(b, p.url(""), Options{RevalidateInterval: 5 * time.Minute})
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 32 {
				sc := varplane.Scope(fmt.Sprintf("t%d.doc", i))
				ev := storetest.CreatedEvent(sc, storetest.Doc(i))
				if _, err := s.AppendPublish(ctx, ev, storetest.ActivatedEvent(sc, ev.Revision, 0), 0); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := s.Stats().Installed; got != n {
		b.Fatalf("installed %d heads, want %d", got, n)
	}
	raw := rawClient(b, p.url(""))
	if err := raw.Do(ctx, raw.B().ConfigResetstat().Build()).Error(); err != nil {
		b.Fatal(err)
	}
	before := s.Stats().Confirmations
	b.ResetTimer()
	for b.Loop() {
		s.revalidatePass()
	}
	b.StopTimer()
	if got := s.Stats().Confirmations - before; got < uint64(b.N*n) {
		b.Fatalf("%d confirmations, want %d", got, b.N*n)
	}
	info, err := raw.Do(ctx, raw.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	_, usec := commandStat(info, "evalsha_ro")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "wall-µs/doc")
	b.ReportMetric(usec, "redis-µs/doc")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/pass")
}
