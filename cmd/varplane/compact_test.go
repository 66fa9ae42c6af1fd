package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

// TestCompactCommand: varplane compact --reclaim on a log of 60 old
// revisions keeps 50 (the restart reads the checkpoint); it refuses a log
// another process holds open, and a store that is not a file.
func TestCompactCommand(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "log.jsonl")
	s, err := file.Open(ctx, path, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-30 * 24 * time.Hour)
	var revs []varplane.Revision
	for i := range 60 {
		c := storetest.CreatedEvent("app.k", storetest.Doc(i))
		c.Timestamp = old.Add(time.Duration(i) * time.Minute)
		a := storetest.ActivatedEvent("app.k", c.Revision, varplane.Generation(i))
		if _, err := s.AppendPublish(ctx, c, a, varplane.Generation(i)); err != nil {
			t.Fatal(err)
		}
		revs = append(revs, c.Revision)
	}
	if r := runCLI(t, nil, "", "compact", "--store", "file:"+path, "--reclaim"); r.code == 0 || !strings.Contains(r.stderr, "locked") {
		t.Errorf("compact of a log held open = %+v, want it refused", r)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, nil, "", "compact", "--store", "file:"+path, "--reclaim")
	if r.code != 0 || !strings.Contains(r.stdout, "10 revision bodies reclaimed") {
		t.Fatalf("compact --reclaim = %+v", r)
	}
	// Every event is kept, with its link: the log still verifies, the
	// reclaimed revisions counted as such.
	if r := runCLI(t, nil, "", "verify", path); r.code != 0 || !strings.Contains(r.stdout, "120 events") || !strings.Contains(r.stdout, "10 reclaimed") {
		t.Fatalf("verify after compact --reclaim = %+v", r)
	}
	s, err = file.Open(ctx, path, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Revision(ctx, "app.k", revs[0]); !errors.Is(err, varplane.ErrReclaimed) {
		t.Errorf("the oldest revision after compact --reclaim: %v, want revision-reclaimed", err)
	}
	if _, err := s.Revision(ctx, "app.k", revs[10]); err != nil {
		t.Errorf("the 50th newest revision: %v", err)
	}
	if r := runCLI(t, nil, "", "compact", "--store", "memory:"); r.code != ExitUsage {
		t.Errorf("compact of memory: = %+v, want a usage error", r)
	}
}
