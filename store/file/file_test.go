package file_test

import (
	"context"
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
	}
}

func TestConformance(t *testing.T) { storetest.Run(t, harness(file.Options{})) }
