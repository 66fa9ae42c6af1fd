package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/file"
)

// BenchmarkDurablePublish drives POST admin/publish, one request per
// commit, through the real handler over loopback HTTP on the file store
// (fdatasync before every answer), with 1 and 64 writers: the server side
// of bench/'s commit scenario for publish, in one process so that it can be
// profiled. Each commit publishes on a new scope; with ",own-scope" each
// writer publishes on a scope of its own with the generation it last saw,
// as the harness's writers do (no scope is created after the first
// commit). It reports the process's CPU per commit, commits/s and the
// store's events per fsync.
func BenchmarkDurablePublish(b *testing.B) {
	for _, own := range []bool{false, true} {
		for _, par := range []int{1, 64} {
			name := fmt.Sprintf("writers=%d", par)
			if own {
				name += ",own-scope"
			}
			b.Run(name, func(b *testing.B) { benchmarkDurablePublish(b, par, own) })
		}
	}
}

func benchmarkDurablePublish(b *testing.B, par int, own bool) {
	srv, s := durableServer(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	pad := strings.Repeat("x", 960)
	var next, writers atomic.Int64
	b.SetParallelism(par)
	b.ResetTimer()
	cpu0 := processCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		w, gen := writers.Add(1), int64(0)
		for pb.Next() {
			n := next.Add(1)
			scope := fmt.Sprintf("bench.publish.s%d", n)
			if own {
				scope = fmt.Sprintf("bench.publish.w%d", w)
			} else {
				gen = 0
			}
			body := fmt.Sprintf(`{"scope":"%s","expectedGeneration":%d,"document":{"enabled":true,"n":%d,"note":"%s"}}`, scope, gen, n, pad)
			resp, err := client.Post(srv.URL+"/vars/admin/publish", "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("publish: %d %s", resp.StatusCode, raw)
				return
			}
			gen++
		}
	})
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
	b.ReportMetric(s.Stats().EventsPerFsync(), "events/fsync")
}

// processCPU returns the CPU time the process has used, user and system, in
// nanoseconds: the server and the benchmark's client together, so that a
// change to the server's CPU per commit shows whatever the load of the
// machine does to wall time.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// durableServer serves the handler over loopback HTTP on a file store in a
// temporary directory (fdatasync before every answer), for the commit
// benchmarks; everything is closed when b ends.
func durableServer(b *testing.B) (*httptest.Server, *file.Store) {
	s, err := file.Open(context.Background(), filepath.Join(b.TempDir(), "log.jsonl"), file.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	e := varplane.NewEngine(s, varplane.Options{})
	b.Cleanup(e.Close)
	h := httpapi.NewHandler(e, httpapi.Options{Authorizer: varplane.AllowAll, Logger: slog.New(slog.DiscardHandler)})
	b.Cleanup(h.Close)
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	return srv, s
}
