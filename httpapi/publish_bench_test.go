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
// (fdatasync before every answer), with 1 and 64 writers on distinct
// scopes: the server side of bench/'s commit scenario for publish, in one
// process so that it can be profiled. It reports the process's CPU per
// commit, commits/s and the store's events per fsync.
func BenchmarkDurablePublish(b *testing.B) {
	for _, par := range []int{1, 64} {
		b.Run(fmt.Sprintf("writers=%d", par), func(b *testing.B) {
			srv, s := durableServer(b)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
			pad := strings.Repeat("x", 960)
			var next atomic.Int64
			b.SetParallelism(par)
			b.ResetTimer()
			cpu0 := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := next.Add(1)
					body := fmt.Sprintf(`{"scope":"bench.publish.s%d","expectedGeneration":0,"document":{"enabled":true,"n":%d,"note":"%s"}}`, n, n, pad)
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
				}
			})
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
			b.ReportMetric(s.Stats().EventsPerFsync(), "events/fsync")
		})
	}
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
	h := httpapi.NewHandler(e, httpapi.Options{Authorizer: httpapi.AllowAll, Logger: slog.New(slog.DiscardHandler)})
	b.Cleanup(h.Close)
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	return srv, s
}
