package file_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

// BenchmarkRestartCheckpoint opens the log of BenchmarkRestartDocuments'
// shape (pairs, 1 KiB documents, 1,000 scopes) from the checkpoint beside
// it: keep-all keeps every revision; keep-50 keeps the 50 newest of each
// scope (a compaction left the others' documents out), as the default
// retention pass leaves a log whose revisions are older than a week. It
// reports the wall and CPU time of Open (the latter less disturbed by a
// busy machine) and, as history-ms, until a History returns (it waits for
// the history before the checkpoint); full-replay is the same log without
// its checkpoint.
func BenchmarkRestartCheckpoint(b *testing.B) {
	const n = 200_000
	dir := b.TempDir()
	path := filepath.Join(dir, "log.jsonl")
	writeDocumentLog(b, path, n, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b.Run("full-replay", func(b *testing.B) { benchOpen(b, path, file.Options{CheckpointEvery: -1}) })
	compact := func(b *testing.B, keep int) {
		s, err := file.Open(context.Background(), path, file.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		reclaim := map[varplane.Scope][]varplane.Revision{}
		if keep > 0 {
			scopes, _ := s.Scopes(context.Background())
			for _, sc := range scopes {
				hist, _ := s.EventHistory(context.Background(), sc)
				var revs []varplane.Revision
				for _, ev := range hist {
					if ev.Kind == varplane.EventRevisionCreated && ev.Document != nil {
						revs = append(revs, ev.Revision)
					}
				}
				reclaim[sc] = revs[:max(len(revs)-keep, 0)]
			}
		}
		if _, err := s.Compact(context.Background(), reclaim); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("keep-all", func(b *testing.B) { compact(b, 0); benchOpen(b, path, file.Options{}) })
	b.Run("keep-50", func(b *testing.B) { compact(b, 50); benchOpen(b, path, file.Options{}) })
}

// BenchmarkRestartManyScopes opens a log of 100,000 scopes, each with one
// revision (1 KiB) and its activation: every revision ends as a head, the
// case where leaving documents on disk would only mean reading each one
// back. It reports the wall time and the CPU time of Open.
func BenchmarkRestartManyScopes(b *testing.B) {
	const n = 100_000
	path := filepath.Join(b.TempDir(), "log.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	lw := file.NewLogWriter(w)
	doc := `{"enabled":true,"note":"` + strings.Repeat("x", 980) + `","n":`
	for i := range n {
		sc := varplane.Scope(fmt.Sprintf("many.s%06d", i))
		c := storetest.CreatedEvent(sc, []byte(doc+fmt.Sprintf("%d}", i)))
		for _, ev := range []*varplane.Event{c, storetest.ActivatedEvent(sc, c.Revision, 0)} {
			if err := lw.Write(ev); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	benchOpen(b, path, file.Options{})
}

// benchOpen opens and closes the store at path b.N times, reporting the
// wall and CPU time of each Open, and the time until a History returns.
func benchOpen(b *testing.B, path string, opts file.Options) {
	b.Helper()
	var wall, cpu, hist time.Duration
	for b.Loop() {
		c0, t0 := cpuTime(), time.Now()
		s, err := file.Open(context.Background(), path, opts)
		wall, cpu = wall+time.Since(t0), cpu+cpuTime()-c0
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.History(context.Background(), "bench.docs.s0000"); err != nil {
			b.Fatal(err)
		}
		hist += time.Since(t0)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(wall.Milliseconds())/float64(b.N), "wall-ms/open")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/open")
	b.ReportMetric(float64(hist.Milliseconds())/float64(b.N), "history-ms")
}
