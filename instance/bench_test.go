package instance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/storetest"
)

// BenchmarkReadSerial is the instance read of an installed document from
// one goroutine: the figure the ≤ 50 ns, 0 allocations target is about.
func BenchmarkReadSerial(b *testing.B) {
	mem := memory.New()
	publish(b, mem, "root", `{"n":0}`)
	publish(b, mem, "app.a", `{"n":1}`)
	c, _ := newCache(b, mem, newFakeClock(), func(o *Options[value]) { o.FailClosed = []varplane.Scope{"tenant"} })
	ctx := context.Background()
	if _, err := c.Get(ctx, "app.a"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Get(ctx, "app.a"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRevalidationPass is one instance pass over 10,000 installed
// documents (a memory store: the cache's own cost per document).
func BenchmarkRevalidationPass(b *testing.B) {
	const n = 10_000
	mem := memory.New()
	publish(b, mem, "root", `{"n":0}`)
	scopes := make([]varplane.Scope, n)
	for i := range n {
		scopes[i] = varplane.Scope(fmt.Sprintf("app.s%d", i))
		publishFast(b, mem, scopes[i], fmt.Sprintf(`{"n":%d}`, i))
	}
	c, _ := newCache(b, mem, newFakeClock(), func(o *Options[value]) { o.MaxCached = 2 * n })
	ctx := context.Background()
	for _, sc := range scopes {
		if _, err := c.Get(ctx, sc); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		c.runPass(ctx)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n+1), "ns/doc")
}

// publishFast publishes without reading the state first (a new scope).
func publishFast(b testing.TB, s varplane.Store, scope varplane.Scope, doc string) {
	ev := storetest.CreatedEvent(scope, json.RawMessage(doc))
	if _, err := s.AppendPublish(context.Background(), ev, storetest.ActivatedEvent(scope, ev.Revision, 0), 0); err != nil {
		b.Fatalf("publish %s: %v", scope, err)
	}
}

// BenchmarkReplicaBoundedMemory writes VARPLANE_BENCH_SCOPES scopes
// (default 50,000) to Redis, reads each once through a cache bounded to
// --max-cached 10000, and reports the Go heap in use and the process RSS
// after a GC. Run it with -benchtime 1x.
func BenchmarkReplicaBoundedMemory(b *testing.B) {
	n := 50_000
	if v, err := strconv.Atoi(os.Getenv("VARPLANE_BENCH_SCOPES")); err == nil && v > 0 {
		n = v
	}
	base := redisBase(b)
	prefix := newPrefix()
	url := base + "?prefix=" + prefix
	b.Cleanup(func() { deletePrefix(b, base, prefix) })
	control := openRedis(b, url, false)
	doc := `{"n":1,"pad":"` + strings.Repeat("x", 200) + `"}`
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 64 {
				sc := varplane.Scope(fmt.Sprintf("t%d.doc", i))
				publishFast(b, control, sc, doc)
				control.Forget(sc) // the writer's copy is not what is measured

			}
		}()
	}
	wg.Wait()
	publish(b, control, "root", `{"n":0}`)
	control.Forget("root")
	_ = control.Close()
	for b.Loop() {
		replica := openRedis(b, url, true)
		c, _ := newCache(b, replica, systemClock{}, func(o *Options[value]) { o.MaxCached = 10_000 })
		ctx := context.Background()
		start := time.Now()
		var rwg sync.WaitGroup
		for w := range 32 {
			rwg.Add(1)
			go func() {
				defer rwg.Done()
				for i := w; i < n; i += 32 {
					if _, err := c.Get(ctx, varplane.Scope(fmt.Sprintf("t%d.doc", i))); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		rwg.Wait()
		loads := time.Since(start)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		st := c.Stats()
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		b.ReportMetric(rssMiB(), "rss-MiB")
		b.ReportMetric(float64(st.Installed), "installed")
		b.ReportMetric(float64(replica.Stats().Installed), "store-installed")
		b.ReportMetric(float64(n)/loads.Seconds(), "cold-loads/s")
		_ = c.Close()
	}
}

// rssMiB reads the process's resident set from /proc/self/statm.
func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseFloat(f[1], 64)
	return pages * float64(os.Getpagesize()) / (1 << 20)
}
