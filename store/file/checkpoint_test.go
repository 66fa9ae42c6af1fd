package file_test

import (
	"bytes"
	"context"
	"errors"
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

// TestCheckpointRestart: Close writes a checkpoint beside the log (the log
// itself is not rewritten); the next Open starts from it and reads only the
// lines after it, and answers everything as the full replay does: heads,
// histories, revisions, idempotency records, chains. A key recorded before
// the checkpoint is refused right after the restart.
func TestCheckpointRestart(t *testing.T) {
	defer file.SetDigestChunk(file.SetDigestChunk(4096)) // several chunks
	ctx := context.Background()
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	workload(t, s, 0, 60)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	log := readLog(t, path)
	if _, err := os.Stat(path + ".checkpoint"); err != nil {
		t.Fatalf("no checkpoint after Close: %v", err)
	}
	full := mustOpen(t, path, file.Options{CheckpointEvery: -1})
	want := snapshotOf(t, full, 60)
	wantChains := chainsOf(t, full)
	_ = full.Close()

	s = mustOpen(t, path, file.Options{})
	if at := file.CheckpointedAt(s); at != int64(len(log)) {
		t.Fatalf("Open started from %d, want the checkpoint at the log's end %d", at, len(log))
	}
	if got := snapshotOf(t, s, 60); got != want {
		t.Fatalf("from the checkpoint:\n%s\nwant\n%s", got, want)
	}
	if got := chainsOf(t, s); got != wantChains {
		t.Fatalf("chains from the checkpoint:\n%s\nwant\n%s", got, wantChains)
	}
	a := storetest.CreatedEvent("w.c", storetest.Doc(1000))
	a.IdempotencyKey, a.RequestHash = "key-0", "h"
	if err := s.Append(ctx, a, 0); !errors.Is(err, varplane.ErrDuplicateIdempotencyKey) {
		t.Errorf("a key of the log before the checkpoint, reused: %v", err)
	}
	// Commits after the checkpoint, then a restart from the next one.
	workload(t, s, 60, 15)
	want = snapshotOf(t, s, 75)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(readLog(t, path), log) {
		t.Fatal("the log was rewritten")
	}
	s = mustOpen(t, path, file.Options{})
	if got := snapshotOf(t, s, 75); got != want {
		t.Fatalf("from the second checkpoint:\n%s\nwant\n%s", got, want)
	}
}

// chainsOf renders every scope's chain head.
func chainsOf(t testing.TB, s varplane.Store) string {
	t.Helper()
	ctx := context.Background()
	scopes, _ := s.Scopes(ctx)
	var b strings.Builder
	for _, sc := range scopes {
		st, _ := s.State(ctx, sc)
		hist, _ := s.History(ctx, sc)
		v, err := varplane.VerifyChain(sc, hist)
		if err != nil || v.Head != st.Chain {
			t.Fatalf("%s: chain %+v, state %+v: %v", sc, v.Head, st.Chain, err)
		}
		fmt.Fprintf(&b, "%s %d %s\n", sc, st.Chain.Seq, st.Chain.Hash)
	}
	return b.String()
}

// TestCheckpointInTheBackground: after CheckpointEvery events a checkpoint
// is written while the store runs; a crash (no Close) then restarts from it
// and the lines after it.
func TestCheckpointInTheBackground(t *testing.T) {
	path := logPath(t)
	s := mustOpen(t, path, file.Options{CheckpointEvery: 20})
	workload(t, s, 0, 30)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path + ".checkpoint"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint was written in the background")
		}
		time.Sleep(10 * time.Millisecond)
	}
	workload(t, s, 30, 5)
	want := snapshotOf(t, s, 35)
	// A crash: the files as they are, without Close.
	dir := t.TempDir()
	for _, suffix := range []string{"", ".checkpoint"} {
		if err := os.WriteFile(filepath.Join(dir, "log.jsonl"+suffix), readLog(t, path+suffix), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := mustOpen(t, filepath.Join(dir, "log.jsonl"), file.Options{})
	if at := file.CheckpointedAt(c); at <= 0 || at >= int64(len(readLog(t, path))) {
		t.Errorf("the copy opened from byte offset %d, want a checkpoint inside the log", at)
	}
	if got := snapshotOf(t, c, 35); got != want {
		t.Fatalf("after a crash:\n%s\nwant\n%s", got, want)
	}
}

// TestCheckpointIgnored: a checkpoint that cannot be read (damaged, cut,
// not one at all) or that no longer matches a log changed in its place (a
// compaction that did not get to remove it, say) is ignored with a warning,
// and the whole log is replayed.
func TestCheckpointIgnored(t *testing.T) {
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	workload(t, s, 0, 40)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	good := readLog(t, path+".checkpoint")
	full := mustOpen(t, path, file.Options{CheckpointEvery: -1})
	want := snapshotOf(t, full, 40)
	_ = full.Close()
	for _, tc := range []struct {
		name  string
		check func([]byte) []byte
	}{
		{"damaged scope line", func(b []byte) []byte { return bytes.Replace(b, []byte(`"generation":`), []byte(`"generation":9`), 1) }},
		{"cut", func(b []byte) []byte { return b[:len(b)/2] }},
		{"empty", func([]byte) []byte { return nil }},
		{"garbage", func([]byte) []byte { return []byte("\x00\x01 not a checkpoint\n") }},
		{"a huge line", func([]byte) []byte { return bytes.Repeat([]byte("x"), 3<<20) }},
		{"damaged block", func(b []byte) []byte {
			i := bytes.LastIndex(b, []byte("[")) + 1
			return append(append(append([]byte{}, b[:i]...), '9'), b[i+1:]...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer file.SetMaxLineBytes(file.SetMaxLineBytes(1 << 20))
			if err := os.WriteFile(path+".checkpoint", tc.check(good), 0o600); err != nil {
				t.Fatal(err)
			}
			logger, out := captureLog()
			s := mustOpen(t, path, file.Options{Logger: logger})
			ignored := strings.Contains(out.String(), "ignoring the checkpoint")
			if tc.name == "damaged block" {
				// Blocks are read on use: a read of the scope's revisions
				// fails naming the damage, the rest stands.
				if ignored {
					t.Error("a damaged block made Open ignore the checkpoint it does not read")
				}
				_, err := s.Revision(context.Background(), "w.c", storetest.RevisionOf(storetest.Doc(2)))
				if err == nil || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "byte offset") {
					t.Errorf("a revision in the damaged block: %v", err)
				}
				if st, err := s.State(context.Background(), "w.c"); err != nil || st.Generation == 0 {
					t.Errorf("the scope's state: %+v %v", st, err)
				}
				_ = s.Close() // before the line bound is set back
				return
			}
			if got := snapshotOf(t, s, 40); got != want {
				t.Fatalf("with the checkpoint %s:\n%s\nwant\n%s", tc.name, got, want)
			}
			if !ignored || !strings.Contains(out.String(), "level=WARN") {
				t.Errorf("no warning: %s", out)
			}
			_ = s.Close()
		})
	}
}

// alter returns the log b with line i (from 1) replaced by what change
// makes of it (nil: the line deleted).
func alter(b []byte, i int, change func(line []byte) []byte) []byte {
	lines := bytes.SplitAfter(b, []byte("\n"))
	lines[i-1] = change(lines[i-1])
	return bytes.Join(lines, nil)
}

// lineOf returns the number of the first line of b that holds all of subs,
// from line after on.
func lineOf(t *testing.T, b []byte, after int, subs ...string) int {
	t.Helper()
	for i, l := range bytes.SplitAfter(b, []byte("\n")) {
		if i+1 <= after {
			continue
		}
		ok := true
		for _, s := range subs {
			ok = ok && bytes.Contains(l, []byte(s))
		}
		if ok {
			return i + 1
		}
	}
	t.Fatalf("no line with %q", subs)
	return 0
}

// TestAlteredLogRefused alters a log in its middle, with a checkpoint
// beside it and without: Open refuses it, naming the first line that does
// not link (or, for an event taken out after which its scope wrote
// nothing, the scope whose chain the checkpoint recorded further), and
// changes nothing. With a checkpoint, its digest tells the log changed and
// the whole log is replayed and checked.
func TestAlteredLogRefused(t *testing.T) {
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	workload(t, s, 0, 20)
	c := storetest.CreatedEvent("early.k", storetest.Doc(7)) // its scope writes nothing after
	if _, err := s.AppendPublish(context.Background(), c, storetest.ActivatedEvent("early.k", c.Revision, 0), 0); err != nil {
		t.Fatal(err)
	}
	workload(t, s, 20, 20)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	good := readLog(t, path)
	ckpt := readLog(t, path+".checkpoint")
	// A line of w.a in the middle, and the next line of the same scope.
	mid := lineOf(t, good, 20, `"scope":"w.a"`, `"kind":"activated"`)
	next := lineOf(t, good, mid, `"scope":"w.a"`)
	lastOfScope := lineOf(t, good, 0, `"scope":"early.k"`, `"kind":"activated"`)
	for _, tc := range []struct {
		name   string
		alter  func([]byte) []byte
		line   int  // the line the error names (0: none)
		ckOnly bool // only a checkpoint can tell
	}{
		{"changed byte", func(b []byte) []byte {
			return alter(b, mid, func(l []byte) []byte {
				return bytes.Replace(l, []byte(`"actor":"storetest"`), []byte(`"actor":"storetesT"`), 1)
			})
		}, mid, false},
		{"deleted line", func(b []byte) []byte { return alter(b, mid, func([]byte) []byte { return nil }) }, next - 1, false},
		{"swapped lines of a scope", func(b []byte) []byte {
			lines := bytes.SplitAfter(b, []byte("\n"))
			lines[mid-1], lines[next-1] = lines[next-1], lines[mid-1]
			return bytes.Join(lines, nil)
		}, mid, false},
		{"truncated middle", func(b []byte) []byte {
			lines := bytes.SplitAfter(b, []byte("\n"))
			at := len(bytes.Join(lines[:mid-1], nil)) + 40
			return append(append([]byte{}, b[:at]...), b[at+len(lines[mid-1])+len(lines[mid])/2:]...)
		}, mid, false},
		// A scope's last event taken out leaves its chain sound: only the
		// head a checkpoint recorded (or one anchored outside) tells.
		{"deleted last event of a scope", func(b []byte) []byte { return alter(b, lastOfScope, func([]byte) []byte { return nil }) }, 0, true},
		{"deleted last event of the log", func(b []byte) []byte {
			lines := bytes.SplitAfter(b, []byte("\n"))
			return bytes.Join(lines[:len(lines)-2], nil)
		}, 0, true},
	} {
		for _, withCkpt := range []bool{false, true} {
			if tc.ckOnly && !withCkpt {
				continue
			}
			t.Run(fmt.Sprintf("%s/checkpoint=%v", tc.name, withCkpt), func(t *testing.T) {
				dir := t.TempDir()
				p := filepath.Join(dir, "log.jsonl")
				altered := tc.alter(good)
				if err := os.WriteFile(p, altered, 0o600); err != nil {
					t.Fatal(err)
				}
				if withCkpt {
					if err := os.WriteFile(p+".checkpoint", ckpt, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				_, err := file.Open(context.Background(), p, file.Options{Logger: quiet})
				if err == nil {
					t.Fatal("Open accepted the altered log")
				}
				if tc.line > 0 {
					off := len(bytes.Join(bytes.SplitAfter(altered, []byte("\n"))[:tc.line-1], nil))
					if want := fmt.Sprintf("line %d (byte offset %d)", tc.line, off); !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not name %s", err, want)
					}
				} else if !strings.Contains(err.Error(), "checkpoint") || !strings.Contains(err.Error(), "scope") {
					t.Errorf("error %q does not name the scope its checkpoint recorded further", err)
				}
				if !bytes.Equal(readLog(t, p), altered) {
					t.Error("Open changed the altered log")
				}
			})
		}
	}
}

// TestReclaimedAcrossRestarts: a revision reclaimed by a compaction answers
// revision-reclaimed after restarts from the checkpoint the compaction
// wrote, from a full replay, and after a second compaction; its event keeps
// its place and link.
func TestReclaimedAcrossRestarts(t *testing.T) {
	ctx := context.Background()
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	var revs []varplane.Revision
	for i := range 4 {
		c := storetest.CreatedEvent("rr.k", storetest.Doc(i))
		if _, err := s.AppendPublish(ctx, c, storetest.ActivatedEvent("rr.k", c.Revision, varplane.Generation(i)), varplane.Generation(i)); err != nil {
			t.Fatal(err)
		}
		revs = append(revs, c.Revision)
	}
	if res, err := s.Compact(ctx, map[varplane.Scope][]varplane.Revision{"rr.k": {revs[0]}}); err != nil || res.Reclaimed != 1 {
		t.Fatalf("Compact: %+v %v", res, err)
	}
	check := func(s *file.Store, when string) {
		t.Helper()
		if _, err := s.Revision(ctx, "rr.k", revs[0]); !errors.Is(err, varplane.ErrReclaimed) {
			t.Errorf("%s: the reclaimed revision: %v", when, err)
		}
		if _, err := s.Revision(ctx, "rr.k", revs[1]); err != nil {
			t.Errorf("%s: a kept revision: %v", when, err)
		}
		hist, err := s.History(ctx, "rr.k")
		if err != nil || len(hist) != 8 || hist[0].Document != nil || hist[0].Seq != 1 {
			t.Fatalf("%s: history %d events, %v", when, len(hist), err)
		}
		if _, err := varplane.VerifyChain("rr.k", hist); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
	check(s, "after the compaction")
	_ = s.Close()
	s = mustOpen(t, path, file.Options{})
	if file.CheckpointedAt(s) < 0 {
		t.Error("no checkpoint after the compaction")
	}
	check(s, "from the checkpoint")
	if _, err := s.Compact(ctx, map[varplane.Scope][]varplane.Revision{"rr.k": {revs[1]}}); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	s = mustOpen(t, path, file.Options{CheckpointEvery: -1})
	for _, r := range revs[:2] {
		if _, err := s.Revision(ctx, "rr.k", r); !errors.Is(err, varplane.ErrReclaimed) {
			t.Errorf("full replay after a second compaction: %s: %v", r, err)
		}
	}
	hist, err := s.History(ctx, "rr.k")
	if err != nil || len(hist) != 8 || hist[0].Document != nil || hist[2].Document != nil || hist[4].Document == nil {
		t.Fatalf("history after a second compaction: %d events, %v", len(hist), err)
	}
	if _, err := varplane.VerifyChain("rr.k", hist); err != nil {
		t.Error(err)
	}
}

// FuzzOpenCheckpoint puts arbitrary bytes beside a good log as its
// checkpoint: Open never panics, and answers exactly what the log holds,
// or refuses it only because the checkpoint claims events the log lacks.
func FuzzOpenCheckpoint(f *testing.F) {
	dir := f.TempDir()
	seed := filepath.Join(dir, "seed.jsonl")
	s, err := file.Open(context.Background(), seed, file.Options{NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	workload(f, s, 0, 12)
	if err := s.Close(); err != nil {
		f.Fatal(err)
	}
	log := readLog(f, seed)
	ckpt := readLog(f, seed+".checkpoint")
	full, err := file.Open(context.Background(), seed, file.Options{CheckpointEvery: -1, NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	want := snapshotOf(f, full, 12)
	_ = full.Close()
	f.Add(ckpt)
	f.Add(ckpt[:len(ckpt)/2])
	f.Add(bytes.Replace(ckpt, []byte(`"seq":`), []byte(`"seq":1`), 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "log.jsonl")
		if err := os.WriteFile(path, log, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+".checkpoint", data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := file.Open(context.Background(), path, file.Options{NoSync: true, Logger: quiet})
		if err != nil {
			if !strings.Contains(err.Error(), "does not hold what its checkpoint") {
				t.Fatalf("Open: %v", err)
			}
			return
		}
		defer s.Close()
		if got := snapshotOf(t, s, 12); got != want {
			t.Fatalf("with a fuzzed checkpoint:\n%s\nwant\n%s", got, want)
		}
	})
}
