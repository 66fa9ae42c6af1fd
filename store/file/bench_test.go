package file_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

func BenchmarkHeadRead(b *testing.B) { storetest.BenchmarkHeadRead(b, harness(file.Options{})) }

func BenchmarkCreateActivate(b *testing.B) {
	storetest.BenchmarkCreateActivate(b, harness(file.Options{}))
}

// BenchmarkActivate measures fsync'ed activations from 1 and 64 goroutines
// and reports commits/s and events per fsync (group commit).
func BenchmarkActivate(b *testing.B) {
	for _, p := range []int{1, 64} {
		b.Run(fmt.Sprintf("P%d", p), func(b *testing.B) {
			durableLoad(b, func(s *file.Store) { storetest.ActivateLoad(b, s, p) })
		})
	}
}

// durableLoad runs load on a new fsync'ed log and reports the events per
// fsync.
func durableLoad(b *testing.B, load func(*file.Store)) {
	durableLoadWith(b, file.Options{}, load)
}

func durableLoadWith(b *testing.B, opts file.Options, load func(*file.Store)) {
	s := mustOpen(b, filepath.Join(b.TempDir(), "log.jsonl"), opts)
	before := s.Stats()
	load(s)
	st := s.Stats()
	if fsyncs := st.Fsyncs - before.Fsyncs; fsyncs > 0 {
		b.ReportMetric(float64(st.Commits-before.Commits)/float64(fsyncs), "events/fsync")
	}
}

// writeBenchLog writes a log of n events straight to path: scopes of 100
// events each (two revisions, then activations with a deactivation every
// tenth generation), each linked into its scope's chain.
func writeBenchLog(tb testing.TB, path string, n int) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	lw := file.NewLogWriter(w)
	base := time.Date(2026, 7, 20, 0, 0, 0, 0, time.UTC)
	written := 0
	for sc := 0; written < n; sc++ {
		scope := varplane.Scope(fmt.Sprintf("bench.restart.s%05d", sc))
		var revs [2]varplane.Revision
		var gen varplane.Generation
		for i := 0; i < 100 && written < n; i++ {
			var ev varplane.Event
			ts := base.Add(time.Duration(written) * time.Microsecond)
			switch {
			case i < 2:
				ev = *storetest.CreatedEvent(scope, storetest.Doc(sc*2+i))
				revs[i] = ev.Revision
			case i%10 == 9:
				ev = *storetest.DeactivatedEvent(scope, gen)
				gen++
			default:
				ev = *storetest.ActivatedEvent(scope, revs[i%2], gen)
				gen++
			}
			ev.Timestamp = ts
			if err := lw.Write(&ev); err != nil {
				tb.Fatal(err)
			}
			written++
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkRestart replays a 1,000,000-event log (no checkpoint) and
// reports events/s and the heap the open state holds.
func BenchmarkRestart(b *testing.B) {
	const n = 1_000_000
	path := filepath.Join(b.TempDir(), "log.jsonl")
	writeBenchLog(b, path, n)
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var elapsed, cpu time.Duration
	var heap, inuse uint64
	for b.Loop() {
		runtime.GC()
		start, cpu0 := time.Now(), cpuTime()
		s, err := file.Open(context.Background(), path, file.Options{CheckpointEvery: -1})
		if err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		cpu += cpuTime() - cpu0
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		inuse = max(inuse, ms.HeapInuse)
		runtime.GC()
		runtime.ReadMemStats(&ms)
		heap = max(heap, ms.HeapAlloc)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		runtime.KeepAlive(s)
	}
	b.ReportMetric(float64(n)*float64(b.N)/elapsed.Seconds(), "events/s")
	// Events per second of process CPU time: a figure that a loaded machine
	// disturbs less than the wall-clock rate.
	b.ReportMetric(float64(n)*float64(b.N)/cpu.Seconds(), "events/cpu-s")
	b.ReportMetric(float64(heap)/(1<<20), "live-heap-MB")
	b.ReportMetric(float64(inuse)/(1<<20), "heap-inuse-after-open-MB")
	b.ReportMetric(float64(fi.Size())/(1<<20), "log-MB")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRestartDocuments replays a log of revision-created + activated
// pairs with 1 KiB documents (the shape of bench/'s restart scenario), no
// checkpoint: half the events carry a document the decoder must delimit and
// keep, and every link is checked.
func BenchmarkRestartDocuments(b *testing.B) {
	const n = 200_000
	path := filepath.Join(b.TempDir(), "log.jsonl")
	writeDocumentLog(b, path, n, time.Date(2026, 7, 20, 0, 0, 0, 0, time.UTC))
	b.ResetTimer()
	var elapsed time.Duration
	for b.Loop() {
		start := time.Now()
		s, err := file.Open(context.Background(), path, file.Options{CheckpointEvery: -1})
		if err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/elapsed.Seconds(), "events/s")
}

// writeDocumentLog writes a log of n events at path: revision-created +
// activated pairs over 1,000 scopes with 1 KiB documents (the shape of
// bench/'s restart scenario), each pair one batch as a publish writes it
// (log format 2), timestamped a microsecond apart from base.
func writeDocumentLog(b *testing.B, path string, n int, base time.Time) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	lw := file.NewLogWriter(w)
	doc := []byte(`{"enabled":true,"note":"` + strings.Repeat("x", 980) + `","n":`)
	gens := map[varplane.Scope]varplane.Generation{}
	for i := 0; i < n/2; i++ {
		scope := varplane.Scope(fmt.Sprintf("bench.docs.s%04d", i%1000))
		created := storetest.CreatedEvent(scope, append(append([]byte{}, doc...), fmt.Sprintf("%d}", i)...))
		created.Timestamp = base.Add(time.Duration(i) * time.Microsecond)
		act := storetest.ActivatedEvent(scope, created.Revision, gens[scope])
		act.Timestamp = created.Timestamp
		gens[scope]++
		if err := lw.WritePublish(created, act); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
