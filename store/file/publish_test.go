package file_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

// publishDoc is the document of the publish the crash tests cut.
var publishDoc = storetest.Doc(42)

// writePublishLog writes n plain revision-created events, then one publish,
// and returns the log's bytes and where the publish's first line starts.
func writePublishLog(t *testing.T, path string, n int) ([]byte, int) {
	t.Helper()
	s := mustOpen(t, path, file.Options{NoSync: true})
	ctx := context.Background()
	for i := range n {
		if err := s.Append(ctx, storetest.CreatedEvent(varplane.Scope(fmt.Sprintf("fill.k%d", i)), storetest.Doc(i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	c := storetest.CreatedEvent("pub.crash", publishDoc)
	if created, err := s.AppendPublish(ctx, c, storetest.ActivatedEvent("pub.crash", c.Revision, 0), 0); err != nil || !created {
		t.Fatalf("publish: created %v, %v", created, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines) != n+3 { // the last element is empty
		t.Fatalf("log has %d lines, want %d", len(lines)-1, n+2)
	}
	return b, len(b) - len(lines[n]) - len(lines[n+1])
}

// TestPublishCrashAtEveryOffset cuts a log at every byte of a publish's two
// lines, as a crash during their one write could, and checks that Open
// shows the whole publish or nothing of it, and cuts the log back to the
// end of the line before it.
func TestPublishCrashAtEveryOffset(t *testing.T) {
	if raceEnabled {
		// One goroutine reopening a log cut at each offset: the run
		// without the detector (go test ./...) checks every offset.
		t.Skip("runs without the race detector")
	}
	dir := t.TempDir()
	good, start := writePublishLog(t, filepath.Join(dir, "src.jsonl"), 2)
	if !strings.HasSuffix(string(good[:bytes.IndexByte(good[start:], '\n')+start]), `,"publish":true}`) {
		t.Fatalf("the publish's first line is not marked: %s", good[start:])
	}
	rev := storetest.RevisionOf(publishDoc)
	for cut := start; cut <= len(good); cut++ {
		path := filepath.Join(dir, fmt.Sprintf("cut-%d.jsonl", cut))
		if err := os.WriteFile(path, good[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		logger, _ := captureLog()
		s, err := file.Open(context.Background(), path, file.Options{Logger: logger})
		if err != nil {
			t.Fatalf("cut at %d: Open: %v", cut, err)
		}
		whole := cut == len(good)
		ctx := context.Background()
		st, _ := s.State(ctx, "pub.crash")
		h, _ := s.History(ctx, "pub.crash")
		_, revErr := s.Revision(ctx, "pub.crash", rev)
		switch {
		case whole && (st.Generation != 1 || st.Head == nil || len(h) != 2 || revErr != nil):
			t.Errorf("whole log: gen %d head %v, %d events, revision err %v; want the publish", st.Generation, st.Head, len(h), revErr)
		case !whole && (st.Generation != 0 || st.Head != nil || len(h) != 0 || revErr == nil):
			t.Errorf("cut at %d: gen %d, %d events, revision stored %v; want nothing of the publish", cut, st.Generation, len(h), revErr == nil)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		want := int64(start)
		if whole {
			want = int64(len(good))
		}
		if fi, _ := os.Stat(path); fi.Size() != want {
			t.Errorf("cut at %d: log is %d bytes after open, want %d", cut, fi.Size(), want)
		}
	}
}

// TestPublishCutAtReplayBatchEnd puts a publish's first line last in a
// replay batch (the 1024th line): the cut must still reach it.
func TestPublishCutAtReplayBatchEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	good, start := writePublishLog(t, path, 1023)
	if err := os.WriteFile(path, good[:bytes.IndexByte(good[start:], '\n')+start+1], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path + ".checkpoint"); err != nil { // the crash came before Close
		t.Fatal(err)
	}
	logger, logs := captureLog()
	s := mustOpen(t, path, file.Options{Logger: logger})
	if _, err := s.Revision(context.Background(), "pub.crash", storetest.RevisionOf(publishDoc)); err == nil {
		t.Error("the revision of a publish cut before its activation is stored")
	}
	if !strings.Contains(logs.String(), "publish cut between its revision and its activation") {
		t.Errorf("no warning names the cut publish: %s", logs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Size() != int64(start) {
		t.Errorf("log is %d bytes after open, want %d", fi.Size(), start)
	}
}

// TestPublishFailedSync checks a publish whose fdatasync fails: answered
// outcome-unknown (its bytes may reach the disk), invisible, cut from the
// log, and absent after reopen.
func TestPublishFailedSync(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	s := mustOpen(t, path, file.Options{})
	ctx := context.Background()
	if err := s.Append(ctx, storetest.CreatedEvent("k.other", storetest.Doc(1)), 0); err != nil {
		t.Fatal(err)
	}
	good := readLog(t, path)
	file.SetSyncFunc(s, func() error { return errors.New("injected EIO") })
	c := storetest.CreatedEvent("pub.fail", publishDoc)
	created, err := s.AppendPublish(ctx, c, storetest.ActivatedEvent("pub.fail", c.Revision, 0), 0)
	if !errors.Is(err, varplane.ErrOutcomeUnknown) || created {
		t.Fatalf("publish with a failing sync: created %v, err %v; want outcome-unknown", created, err)
	}
	if _, err := s.Revision(ctx, "pub.fail", c.Revision); err == nil {
		t.Error("the revision of an undurable publish is visible")
	}
	if b := readLog(t, path); !bytes.Equal(b, good) {
		t.Errorf("the failed publish was left in the log (%d bytes, want %d)", len(b), len(good))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, file.Options{})
	if st, _ := s.State(ctx, "pub.fail"); st.Generation != 0 || st.Head != nil {
		t.Errorf("after reopen: gen %d head %v, want nothing of the publish", st.Generation, st.Head)
	}
}

// BenchmarkPublish measures fsync'ed publishes of new 1 KiB documents from 1
// and 64 goroutines, straight on the store, and reports commits/s and
// events per fsync (a publish is two events): with 64 publishers the batch
// should approach the 64 waiting. Each runs with the write-ahead file (the
// default) and without it (each commit syncs the log, which grows).
func BenchmarkPublish(b *testing.B) {
	for _, p := range []int{1, 64} {
		for _, w := range []struct {
			name string
			size int64
		}{{"wal", 0}, {"nowal", -1}} {
			b.Run(fmt.Sprintf("P%d/%s", p, w.name), func(b *testing.B) {
				durableLoadWith(b, file.Options{WALSize: w.size}, func(s *file.Store) { storetest.PublishLoad(b, s, p) })
			})
		}
	}
}

// TestAppendPublishChecked checks the store's side of a checked publish: a
// CheckedDocument that holds the document spares its scan but not its copy
// (changing the caller's bytes afterwards changes nothing stored, before and
// after a reopen), and one that holds other bytes is ignored, so an invalid
// document is refused as AppendPublish refuses it and nothing is written.
func TestAppendPublishChecked(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "log.jsonl")
	s := mustOpen(t, path, file.Options{NoSync: true})
	doc := `{"a":[1,2],"b":"x"}`
	body := []byte(`{"document":` + doc + `}`)
	cb, err := varplane.DefaultLimits().CheckBody(body, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := body[12 : 12+len(doc)]
	checked := cb.Document(d)
	if !checked.Holds(d) {
		t.Fatal("CheckBody does not vouch for the document")
	}
	c := storetest.CreatedEvent("pub.checked", json.RawMessage(d))
	if created, err := s.AppendPublishChecked(ctx, c, storetest.ActivatedEvent("pub.checked", c.Revision, 0), 0, checked); err != nil || !created {
		t.Fatalf("checked publish: created %v, %v", created, err)
	}
	copy(d, `{"a":[9,9],"b":"y"}`) // the caller's buffer is reused
	stored := func(s *file.Store) string {
		st, err := s.State(ctx, "pub.checked")
		if err != nil || st.Head == nil {
			t.Fatalf("state = %+v, %v", st, err)
		}
		return string(st.Head.Document)
	}
	if got := stored(s); got != doc {
		t.Fatalf("stored document %s, want %s (a copy)", got, doc)
	}

	bad := storetest.CreatedEvent("pub.bad", json.RawMessage(`{"a":1`))
	if _, err := s.AppendPublishChecked(ctx, bad, storetest.ActivatedEvent("pub.bad", bad.Revision, 0), 0, checked); varplane.ErrorCode(err) != varplane.CodeBadRequest {
		t.Fatalf("invalid document with another document's check = %v, want bad-request", err)
	}
	if _, err := s.AppendPublishChecked(ctx, bad, storetest.ActivatedEvent("pub.bad", bad.Revision, 0), 0, varplane.CheckedDocument{}); varplane.ErrorCode(err) != varplane.CodeBadRequest {
		t.Fatalf("invalid document with no check = %v, want bad-request", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, file.Options{NoSync: true})
	defer s.Close()
	if got := stored(s); got != doc {
		t.Fatalf("after reopen: stored document %s, want %s", got, doc)
	}
	if _, err := s.State(ctx, "pub.bad"); err == nil {
		if st, _ := s.State(ctx, "pub.bad"); st.Generation != 0 || st.Head != nil {
			t.Fatalf("a refused publish left %+v", st)
		}
	}
}
