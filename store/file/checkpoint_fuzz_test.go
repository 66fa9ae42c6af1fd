package file_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/varplane/varplane/store/file"
)

// FuzzOpenCheckpoint opens logs whose checkpoint is arbitrary bytes after a
// real one's header: Open never panics, and a log it accepts answers its
// reads and compacts again.
func FuzzOpenCheckpoint(f *testing.F) {
	dir := f.TempDir()
	seed := filepath.Join(dir, "seed.jsonl")
	s, err := file.Open(context.Background(), seed, file.Options{NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	workload(f, s, 0, 12)
	if _, err := s.Compact(context.Background(), nil); err != nil {
		f.Fatal(err)
	}
	workload(f, s, 12, 3)
	if err := s.Close(); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add([]byte(`{"checkpoint":1,"state":80                  ,"tail":81                  }` + "\n" + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "log.jsonl")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := file.Open(context.Background(), path, file.Options{NoSync: true})
		if err != nil {
			return
		}
		defer s.Close()
		ctx := context.Background()
		scopes, err := s.Scopes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range scopes {
			if _, err := s.State(ctx, sc); err != nil {
				t.Fatal(err)
			}
			_, _ = s.History(ctx, sc)
		}
		_, _ = s.Compact(ctx, nil)
	})
}
