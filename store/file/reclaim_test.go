package file_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

// TestFailedDeletionIsRetried: a compaction that fails keeps the bodies on
// the to-delete list, counted as failed, and the next pass deletes them.
func TestFailedDeletionIsRetried(t *testing.T) {
	ctx := context.Background()
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	var revs []varplane.Revision
	for i := range 3 {
		c := storetest.CreatedEvent("d.k", storetest.Doc(i))
		if _, err := s.AppendPublish(ctx, c, storetest.ActivatedEvent("d.k", c.Revision, varplane.Generation(i)), varplane.Generation(i)); err != nil {
			t.Fatal(err)
		}
		revs = append(revs, c.Revision)
	}
	if _, err := s.ReclaimRevisions(ctx, "d.k", revs[:2]); err != nil {
		t.Fatal(err)
	}
	// A directory where the compacted log is to be written: the
	// compaction cannot create it.
	if err := os.Mkdir(path+".compact", 0o700); err != nil {
		t.Fatal(err)
	}
	n, err := s.FinishReclaim(ctx)
	var failed interface{ Failed() int }
	if n != 0 || !errors.As(err, &failed) || failed.Failed() != 2 {
		t.Fatalf("FinishReclaim with a failing compaction = %d, %v; want 2 failed deletions", n, err)
	}
	if _, err := s.Revision(ctx, "d.k", revs[0]); err != nil {
		t.Errorf("a body whose deletion failed answers %v, want it still there until deleted", err)
	}
	if err := os.Remove(path + ".compact"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.FinishReclaim(ctx); n != 2 || err != nil {
		t.Fatalf("the next FinishReclaim = %d, %v; want the 2 deletions retried", n, err)
	}
	if _, err := s.Revision(ctx, "d.k", revs[0]); !errors.Is(err, varplane.ErrReclaimed) {
		t.Errorf("after the retry: %v, want revision-reclaimed", err)
	}
}
