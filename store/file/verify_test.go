package file_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

// verifySample writes a log with every kind of event, cascades and keys,
// and returns its path and the store's chain heads.
func verifySample(t *testing.T) (string, map[varplane.Scope]varplane.ChainHead) {
	t.Helper()
	ctx := context.Background()
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	workload(t, s, 0, 30)
	// Documents as the engine stores them: each revision is its digest.
	c := storetest.CreatedEvent("v.doc", []byte(`{"a":[1,2,{"b":"ü"}]}`))
	c.Revision = varplane.Revision(digestOf(t, c.Document))
	if err := s.Append(ctx, c, 0); err != nil {
		t.Fatal(err)
	}
	heads := map[varplane.Scope]varplane.ChainHead{}
	scopes, _ := s.Scopes(ctx)
	for _, sc := range scopes {
		st, _ := s.State(ctx, sc)
		heads[sc] = st.Chain
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path, heads
}

// TestVerifyLog: a sound log verifies, with the chain heads the store
// reported and their digest, every document checked against its revision,
// and the file is left as it was.
func TestVerifyLog(t *testing.T) {
	path, heads := verifySample(t)
	before := readLog(t, path)
	fi0, _ := os.Stat(path)
	rep, err := file.VerifyLog(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Events != bytes.Count(before, []byte("\n")) || rep.Scopes != len(heads) || rep.ChainDigest != varplane.ChainDigest(heads) {
		t.Errorf("report %+v, want %d events, %d scopes, digest %s", rep, bytes.Count(before, []byte("\n")), len(heads), varplane.ChainDigest(heads))
	}
	for sc, h := range heads {
		if rep.Heads[sc] != h {
			t.Errorf("%s: head %+v, the store's %+v", sc, rep.Heads[sc], h)
		}
	}
	if rep.Problem != nil || rep.Documents == 0 {
		t.Errorf("problem %v (%d documents checked), want a sound log", rep.Problem, rep.Documents)
	}
	fi1, _ := os.Stat(path)
	if !bytes.Equal(readLog(t, path), before) || !fi1.ModTime().Equal(fi0.ModTime()) {
		t.Error("VerifyLog changed the log")
	}
}

// TestVerifyLogChecksDocuments: a document stored under a revision that is
// not its digest (which the engine never writes, and the chain does not
// cover) is reported, with its line.
func TestVerifyLogChecksDocuments(t *testing.T) {
	ctx := context.Background()
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	c := storetest.CreatedEvent("v.doc", storetest.Doc(1))
	c.Revision = storetest.RevisionOf(storetest.Doc(2))
	if err := s.Append(ctx, c, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := file.VerifyLog(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problem == nil || !strings.Contains(rep.Problem.Error(), "digests to") || rep.Problem.Line != 1 {
		t.Errorf("problem %v, want line 1's document, which is not its revision", rep.Problem)
	}
}

func digestOf(t *testing.T, doc []byte) string {
	t.Helper()
	d, err := canonicalDigest(doc)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// canonicalDocsLog writes a log whose every revision is its document's
// canonical digest (as the engine stores them), with a publish, a subtree
// deactivation and a rejection.
func canonicalDocsLog(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	for i, sc := range []varplane.Scope{"cd", "cd.a", "cd.b", "cd.a", "other"} {
		c := storetest.CreatedEvent(sc, storetest.Doc(i))
		c.Revision = varplane.Revision(digestOf(t, c.Document))
		st, _ := s.State(ctx, sc)
		if _, err := s.AppendPublish(ctx, c, storetest.ActivatedEvent(sc, c.Revision, st.Generation), st.Generation); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AppendSubtreeDeactivation(ctx, storetest.DeactivatedEvent("cd", 1), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, &varplane.Event{Kind: varplane.EventRejected, Scope: "other", RejectionReason: "x"}, 0); err != nil {
		t.Fatal(err)
	}
	c := storetest.CreatedEvent("other", storetest.Doc(99))
	c.Revision = varplane.Revision(digestOf(t, c.Document))
	if err := s.Append(ctx, c, 0); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Compact(ctx, map[varplane.Scope][]varplane.Revision{"other": {c.Revision}}); err != nil || res.Reclaimed != 1 {
		t.Fatalf("Compact: %+v %v", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVerifyLogFindsDamage alters a sound log in its middle: VerifyLog
// names the first broken or missing link (or the document that is not its
// revision) with its line and byte offset, reports what came before it,
// and changes nothing; a torn tail is counted, not a problem.
func TestVerifyLogFindsDamage(t *testing.T) {
	path := canonicalDocsLog(t)
	good := readLog(t, path)
	rep, err := file.VerifyLog(context.Background(), path)
	if err != nil || rep.Problem != nil || rep.Events != 13 || rep.Documents != 5 || rep.Reclaimed != 1 {
		t.Fatalf("the sound log: %+v, %v", rep, err)
	}
	line3 := lineOf(t, good, 2, `"scope":"cd.a"`) // cd.a's revision
	for _, tc := range []struct {
		name  string
		alter func([]byte) []byte
		line  int
		scope varplane.Scope
		chain bool
	}{
		{"changed byte", func(b []byte) []byte {
			return alter(b, line3, func(l []byte) []byte {
				return bytes.Replace(l, []byte(`"actor":"storetest"`), []byte(`"actor":"storetesT"`), 1)
			})
		}, line3, "cd.a", true},
		{"deleted line", func(b []byte) []byte { return alter(b, line3, func([]byte) []byte { return nil }) }, line3, "cd.a", true},
		{"changed document", func(b []byte) []byte {
			return alter(b, line3, func(l []byte) []byte { return bytes.Replace(l, []byte(`"n":1,`), []byte(`"n":3,`), 1) })
		}, line3, "cd.a", false},
		{"garbage line", func(b []byte) []byte { return alter(b, line3, func([]byte) []byte { return []byte("{\"kind\":\n") }) }, line3, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "log.jsonl")
			altered := tc.alter(good)
			if err := os.WriteFile(p, altered, 0o600); err != nil {
				t.Fatal(err)
			}
			rep, err := file.VerifyLog(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			pr := rep.Problem
			off := int64(len(bytes.Join(bytes.SplitAfter(altered, []byte("\n"))[:tc.line-1], nil)))
			if pr == nil || pr.Line != tc.line || pr.Offset != off || pr.Scope != tc.scope {
				t.Fatalf("problem %+v, want line %d at %d of %q", pr, tc.line, off, tc.scope)
			}
			var ce *varplane.ChainError
			if errors.As(pr, &ce) != tc.chain || (tc.chain && pr.Seq != ce.Seq) {
				t.Errorf("problem %v: a chain error %v, want %v", pr, ce, tc.chain)
			}
			if tc.chain && rep.Events != tc.line-1 {
				t.Errorf("%d events before the problem, want %d", rep.Events, tc.line-1)
			}
			if !bytes.Equal(readLog(t, p), altered) {
				t.Error("VerifyLog changed the log")
			}
		})
	}
	t.Run("torn tail", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "log.jsonl")
		if err := os.WriteFile(p, append(append([]byte{}, good...), `{"kind":"activ`...), 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := file.VerifyLog(context.Background(), p)
		if err != nil || rep.Problem != nil || rep.Tail != int64(len(`{"kind":"activ`)) || rep.Events != 13 {
			t.Fatalf("%+v, %v", rep, err)
		}
	})
	t.Run("while the store runs", func(t *testing.T) {
		s := mustOpen(t, path, file.Options{})
		if err := s.Append(context.Background(), &varplane.Event{Kind: varplane.EventRejected, Scope: "other", RejectionReason: "y"}, 0); err != nil {
			t.Fatal(err)
		}
		rep, err := file.VerifyLog(context.Background(), path)
		if err != nil || rep.Problem != nil || rep.Events != 14 {
			t.Fatalf("%+v, %v", rep, err)
		}
	})
}

// TestVerifyLogHostile: a huge line in the middle is the problem, read
// past in bounded memory; a legacy log is an error (it has no links).
func TestVerifyLogHostile(t *testing.T) {
	defer file.SetMaxLineBytes(file.SetMaxLineBytes(1 << 20))
	path := canonicalDocsLog(t)
	good := readLog(t, path)
	first := bytes.IndexByte(good, '\n') + 1
	in := append(append(append(append([]byte{}, good[:first]...), bytes.Repeat([]byte("x"), 48<<20)...), '\n'), good[first:]...)
	if err := os.WriteFile(path, in, 0o600); err != nil {
		t.Fatal(err)
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	rep, err := file.VerifyLog(context.Background(), path)
	runtime.ReadMemStats(&m1)
	if err != nil || rep.Problem == nil || rep.Problem.Line != 2 || !strings.Contains(rep.Problem.Error(), "longer than") {
		t.Fatalf("%+v, %v", rep, err)
	}
	if got := m1.TotalAlloc - m0.TotalAlloc; got > 16<<20 {
		t.Errorf("VerifyLog allocated %d MiB for a 48 MiB line", got>>20)
	}
	legacy, _ := copyFixture(t, "format2")
	if _, err := file.VerifyLog(context.Background(), legacy); err == nil || !strings.Contains(err.Error(), "format before 3") {
		t.Errorf("VerifyLog of a legacy log: %v", err)
	}
}

func canonicalDigest(doc []byte) (string, error) { return canonical.Digest(doc) }
