package file_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

func mustOpen(tb testing.TB, path string, opts file.Options) *file.Store {
	tb.Helper()
	s, err := file.Open(context.Background(), path, opts)
	if err != nil {
		tb.Fatalf("Open(%s): %v", path, err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func harness(opts file.Options) storetest.Harness {
	return storetest.Harness{
		Open: func(tb testing.TB) varplane.Store {
			return mustOpen(tb, filepath.Join(tb.TempDir(), "var", "log.jsonl"), opts)
		},
		Reopen: func(tb testing.TB, s varplane.Store) varplane.Store {
			path := s.(*file.Store).Path()
			if err := s.Close(); err != nil {
				tb.Fatalf("Close: %v", err)
			}
			return mustOpen(tb, path, opts)
		},
		CutLastEvent: func(tb testing.TB, s varplane.Store) varplane.Store {
			path := s.(*file.Store).Path()
			if err := s.Close(); err != nil {
				tb.Fatalf("Close: %v", err)
			}
			// The crash came before Close: no checkpoint of that line.
			if err := os.Remove(path + ".checkpoint"); err != nil && !errors.Is(err, os.ErrNotExist) {
				tb.Fatal(err)
			}
			cutLastLine(tb, path)
			return mustOpen(tb, path, opts)
		},
	}
}

// cutLastLine truncates the log at path just after its second-to-last
// newline, as a crash that lost the last line's write leaves it.
func cutLastLine(tb testing.TB, path string) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	i := bytes.LastIndexByte(b[:len(b)-1], '\n')
	if err := os.Truncate(path, int64(i+1)); err != nil {
		tb.Fatal(err)
	}
}

// TestConformance runs the suite on the store as it is opened by default:
// every restart reads the checkpoint Close wrote and the history before it
// after Open (cold.go).
func TestConformance(t *testing.T) {
	storetest.Run(t, harness(file.Options{}))
}

// TestConformanceFullReplay runs the suite without checkpoints: every
// restart replays the whole log.
func TestConformanceFullReplay(t *testing.T) {
	if raceEnabled {
		// The same suite runs under the detector as TestConformance, with
		// the WAL and the checkpointer, which have every goroutine this
		// variant has; go test ./... runs this variant without it.
		t.Skip("runs without the race detector (TestConformance runs with it)")
	}
	h := harness(file.Options{CheckpointEvery: -1})
	storetest.Run(t, h)
}
