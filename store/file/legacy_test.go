package file_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

// The logs of the formats before 3 (testdata/legacy) are converted once,
// at Open; these tests hold the conversion to what the store of their
// format answered, and the reader of those formats to their torn-tail
// rules, which it applies before converting.

// legacyFixtures names each fixture and the name its old log is kept under.
var legacyFixtures = []struct{ name, kept string }{
	{"format1", "format1"},
	{"format2", "format2"},
	{"format1then2", "format2"},
	{"compacted1", "checkpoint1"},
	{"compacted2", "checkpoint2"},
}

// copyFixture copies testdata/legacy/name.jsonl into a new directory and
// returns its path there.
func copyFixture(t testing.TB, name string) (string, []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "legacy", name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, b
}

func goldenView(t *testing.T, name string) legacyView {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "legacy", name+".view.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v legacyView
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// viewDiff returns "" when the views are the same, else the first lines
// where their JSON differs.
func viewDiff(t *testing.T, want, got legacyView) string {
	t.Helper()
	w, err := json.MarshalIndent(want, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	g, err := json.MarshalIndent(got, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	wl, gl := strings.Split(string(w), "\n"), strings.Split(string(g), "\n")
	for i := range max(len(wl), len(gl)) {
		var a, b string
		if i < len(wl) {
			a = wl[i]
		}
		if i < len(gl) {
			b = gl[i]
		}
		if a != b {
			return fmt.Sprintf("line %d:\n-%s\n+%s", i+1, a, b)
		}
	}
	return ""
}

// TestConvertLegacy opens each legacy fixture: it is converted once (one
// log line at Info), into a log of format 3 whose every line is a linked
// event, that answers every head, history, revision (reclaimed ones
// included) and idempotency record as the store of its format did; the old
// log is kept beside it, and a second Open converts nothing.
func TestConvertLegacy(t *testing.T) {
	for _, fx := range legacyFixtures {
		t.Run(fx.name, func(t *testing.T) {
			path, old := copyFixture(t, fx.name)
			want := goldenView(t, fx.name)
			logger, logs := captureLog()
			s := mustOpen(t, path, file.Options{Logger: logger})
			if n := strings.Count(logs.String(), "converted the log to format 3"); n != 1 || !strings.Contains(logs.String(), "level=INFO") {
				t.Errorf("%d conversion lines at Info: %s", n, logs)
			}
			if diff := viewDiff(t, want, viewOf(t, s)); diff != "" {
				t.Fatalf("the converted log answers otherwise (-old +new):\n%s", diff)
			}
			ctx := context.Background()
			scopes, _ := s.Scopes(ctx)
			for _, sc := range scopes {
				hist, _ := s.History(ctx, sc)
				v, err := varplane.VerifyChain(sc, hist)
				if err != nil || v.Unchained != 0 {
					t.Errorf("chain of %s: %+v %v", sc, v, err)
				}
				if st, _ := s.State(ctx, sc); st.Chain != v.Head {
					t.Errorf("%s: State().Chain %+v, history's %+v", sc, st.Chain, v.Head)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			kept, err := os.ReadFile(path + ".legacy-" + fx.kept)
			if err != nil || !bytes.Equal(kept, old) {
				t.Errorf("the old log was not kept as it was: %v", err)
			}
			for i, l := range bytes.SplitAfter(readLog(t, path), []byte("\n")) {
				if len(l) == 0 {
					continue
				}
				if !bytes.HasPrefix(l, []byte(`{"kind":"`)) || !bytes.Contains(l, []byte(`,"seq":`)) {
					t.Fatalf("line %d of the converted log is no linked event: %s", i+1, l)
				}
			}
			logger, logs = captureLog()
			s = mustOpen(t, path, file.Options{Logger: logger})
			if strings.Contains(logs.String(), "converted") {
				t.Errorf("a second Open converted again: %s", logs)
			}
			if diff := viewDiff(t, want, viewOf(t, s)); diff != "" {
				t.Fatalf("after a restart (-old +new):\n%s", diff)
			}
		})
	}
}

// TestConvertAfterCrash: a conversion that a crash interrupted left its
// file beside the log, and perhaps the old log's second name: the next Open
// removes the one, replaces the other, and converts.
func TestConvertAfterCrash(t *testing.T) {
	path, old := copyFixture(t, "format2")
	if err := os.WriteFile(path+".format3", []byte(`{"kind":"half`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(path, path+".legacy-format2"); err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, path, file.Options{Logger: quiet})
	if diff := viewDiff(t, goldenView(t, "format2"), viewOf(t, s)); diff != "" {
		t.Fatalf("(-old +new):\n%s", diff)
	}
	if _, err := os.Stat(path + ".format3"); err == nil {
		t.Error("the interrupted conversion's file is still there")
	}
	if b, _ := os.ReadFile(path + ".legacy-format2"); !bytes.Equal(b, old) {
		t.Error("the kept old log changed")
	}
}

// legacyBatches returns the offsets where each batch of the format-2 log b
// ends (just past its sync line).
func legacyBatches(b []byte) []int {
	var ends []int
	off := 0
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		off += len(l)
		if bytes.HasPrefix(l, []byte(`{"synced":`)) {
			ends = append(ends, off)
		}
	}
	return ends
}

// eventLines counts the event lines of a legacy log.
func eventLines(b []byte) int {
	n := 0
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if bytes.HasPrefix(l, []byte(`{"kind":`)) && bytes.HasSuffix(l, []byte("\n")) {
			n++
		}
	}
	return n
}

// countEvents counts the events every scope of s holds, cascade entries
// apart.
func countEvents(t *testing.T, s *file.Store) int {
	t.Helper()
	ctx := context.Background()
	scopes, _ := s.Scopes(ctx)
	n := 0
	for _, sc := range scopes {
		hist, _ := s.History(ctx, sc)
		for _, ev := range hist {
			if ev.Seq != 0 {
				n++
			}
		}
	}
	return n
}

// TestLegacyFormat2CrashAtEveryOffset cuts the format-2 fixture at every
// offset of its last three batches and fills the rest with zeros, as a crash
// during a write into preallocated space left it: the conversion keeps
// exactly the batches whose sync line is whole, and warns only when
// something written (not zeros) was cut.
func TestLegacyFormat2CrashAtEveryOffset(t *testing.T) {
	if raceEnabled {
		// One goroutine reopening a log cut at each offset: the run
		// without the detector (go test ./...) checks every offset.
		t.Skip("runs without the race detector")
	}
	_, good := copyFixture(t, "format2")
	ends := legacyBatches(good)
	dir := t.TempDir()
	for cut := ends[len(ends)-4]; cut <= len(good); cut++ {
		// Every byte of the last batch; around each line end and every
		// 16th byte of the two before.
		nearNewline := bytes.IndexByte(good[max(cut-2, 0):min(cut+2, len(good))], '\n') >= 0
		if cut < ends[len(ends)-2] && !nearNewline && cut%16 != 0 {
			continue
		}
		{
			zeros := 4096 * (cut % 2) // with zeros after it, or not
			path := filepath.Join(dir, fmt.Sprintf("cut-%d-%d.jsonl", cut, zeros))
			if err := os.WriteFile(path, append(append([]byte{}, good[:cut]...), make([]byte, zeros)...), 0o600); err != nil {
				t.Fatal(err)
			}
			logger, out := captureLog()
			s, err := file.Open(context.Background(), path, file.Options{Logger: logger, NoSync: true})
			if err != nil {
				t.Fatalf("cut at %d (+%d zeros): Open: %v", cut, zeros, err)
			}
			keep := 0
			for _, e := range ends {
				if e <= cut {
					keep = e
				}
			}
			if got, want := countEvents(t, s), eventLines(good[:keep]); got != want {
				t.Errorf("cut at %d: %d events, want %d", cut, got, want)
			}
			if warned := strings.Contains(out.String(), "level=WARN"); warned != (cut != keep) {
				t.Errorf("cut at %d (+%d zeros): warned %v, want %v: %s", cut, zeros, warned, cut != keep, out)
			}
			_ = s.Close()
			if b, _ := os.ReadFile(path + ".legacy-format2"); !bytes.Equal(b, good[:keep]) {
				t.Errorf("cut at %d: the kept old log is %d bytes, want the first %d", cut, len(b), keep)
			}
		}
	}
}

// TestLegacyFormat1TornTail: a fragment after the last line of a format-1
// log is cut before the conversion, with a warning; nothing else is lost.
func TestLegacyFormat1TornTail(t *testing.T) {
	path, good := copyFixture(t, "format1")
	if err := os.WriteFile(path, append(append([]byte{}, good...), `{"kind":"activated","sco`...), 0o600); err != nil {
		t.Fatal(err)
	}
	logger, out := captureLog()
	s := mustOpen(t, path, file.Options{Logger: logger})
	if !strings.Contains(out.String(), "torn") || !strings.Contains(out.String(), "level=WARN") {
		t.Errorf("no warning: %s", out)
	}
	if diff := viewDiff(t, goldenView(t, "format1"), viewOf(t, s)); diff != "" {
		t.Fatalf("(-old +new):\n%s", diff)
	}
}

var damagedAt = regexp.MustCompile(`line (\d+) \(byte offset (\d+)\) is damaged`)

// TestLegacyDamageStopsOpen changes bytes of legacy logs where no crash
// can: a middle batch of format 2 (its checksum, or a later batch that
// checks, tells), a middle line of format 1, a revision block of a
// checkpoint (its checksum). Each may be an acknowledged commit: Open fails
// naming the line or the block and its byte offset, converts nothing, and
// leaves the file as it was.
func TestLegacyDamageStopsOpen(t *testing.T) {
	flip := func(from, to string, nth int) func([]byte) []byte {
		return func(b []byte) []byte {
			at := 0
			for range nth {
				i := bytes.Index(b[at:], []byte(from))
				if i < 0 {
					t.Fatalf("no %q", from)
				}
				at += i + 1
			}
			at--
			return append(append(append([]byte{}, b[:at]...), to...), b[at+len(from):]...)
		}
	}
	for _, tc := range []struct {
		fixture, name string
		damage        func([]byte) []byte
		want          string
	}{
		{"format2", "checksum", flip(`"generation":2,"previousGeneration":1`, `"generation":7,"previousGeneration":1`, 1), "line 5 (byte offset"},
		{"format2", "zeroed batch", flip(`"kind":"`, "\x00\x00\x00\x00\x00\x00\x00\x00", 3), "is damaged"},
		{"format1", "garbage line", flip(`"kind":"activated"`, `"kind":"activ\x01ted"`, 2), "line 4 (byte offset"},
		{"compacted2", "revision block", flip(`"document":{"enabled":true,"n":10`, `"document":{"enabled":true,"n":70`, 1), "are damaged"},
	} {
		t.Run(tc.fixture+"/"+tc.name, func(t *testing.T) {
			path, good := copyFixture(t, tc.fixture)
			damaged := tc.damage(good)
			if err := os.WriteFile(path, damaged, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := file.Open(context.Background(), path, file.Options{Logger: quiet})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "byte offset") {
				t.Fatalf("Open: %v, want an error with %q naming the byte offset", err, tc.want)
			}
			if m := damagedAt.FindStringSubmatch(err.Error()); m != nil {
				line, _ := strconv.Atoi(m[1])
				off, _ := strconv.Atoi(m[2])
				if line != bytes.Count(damaged[:off], []byte("\n"))+1 {
					t.Errorf("line %d does not start at byte offset %d", line, off)
				}
			}
			if b, _ := os.ReadFile(path); !bytes.Equal(b, damaged) {
				t.Error("Open changed the log")
			}
			if _, err := os.Stat(path + ".format3"); err == nil {
				t.Error("a failed conversion left its file")
			}
		})
	}
}

// TestLegacyForgedSyncLineMemory puts 32 MiB of lines that do not decode
// after the format-2 fixture, then a sync line that claims them all as its
// batch with a wrong checksum: Open stops naming the first bad line,
// changes nothing, and checks the claim without holding the claimed bytes
// in memory.
func TestLegacyForgedSyncLineMemory(t *testing.T) {
	path, good := copyFixture(t, "format2")
	junk := bytes.Repeat([]byte(strings.Repeat("x", 1023)+"\n"), 32<<10)
	in := append(append(append([]byte{}, good...), junk...), fmt.Sprintf(`{"synced":%d,"crc32c":1}`+"\n", len(junk))...)
	if err := os.WriteFile(path, in, 0o600); err != nil {
		t.Fatal(err)
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	_, err := file.Open(context.Background(), path, file.Options{Logger: quiet})
	runtime.ReadMemStats(&m1)
	if want := fmt.Sprintf("line %d (byte offset %d)", bytes.Count(good, []byte("\n"))+1, len(good)); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open: %v, want an error naming %s", err, want)
	}
	if got := m1.TotalAlloc - m0.TotalAlloc; got > 16<<20 {
		t.Errorf("Open allocated %d MiB checking a 32 MiB claim", got>>20)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, in) {
		t.Error("Open changed the log")
	}
}

// FuzzOpenLegacy opens arbitrary bytes after the legacy fixtures' heads (a
// checkpoint's header, a format-2 log): Open never panics, and a log it
// accepts (converted) answers its reads and opens again.
func FuzzOpenLegacy(f *testing.F) {
	for _, name := range []string{"compacted2", "compacted1", "format2"} {
		b, err := os.ReadFile(filepath.Join("testdata", "legacy", name+".jsonl"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte(`{"checkpoint":1,"state":80                  ,"tail":81                  }` + "\n" + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "log.jsonl")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := file.Open(context.Background(), path, file.Options{NoSync: true, Logger: quiet})
		if err != nil {
			return
		}
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
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, err = file.Open(context.Background(), path, file.Options{NoSync: true, Logger: quiet})
		if err != nil {
			t.Fatalf("a converted log does not open again: %v", err)
		}
		_ = s.Close()
	})
}

// TestConvertEmptyLegacyLog: a format-2 log that never got an event (its
// frame start only) converts to an empty log.
func TestConvertEmptyLegacyLog(t *testing.T) {
	path := logPath(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"synced":0,"crc32c":0}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, path, file.Options{Logger: quiet})
	if sc, _ := s.Scopes(context.Background()); len(sc) != 0 {
		t.Errorf("scopes %v", sc)
	}
	if err := s.Append(context.Background(), storetest.CreatedEvent("e.k", storetest.Doc(1)), 0); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if b := readLog(t, path); !bytes.HasPrefix(b, []byte(`{"kind":"revision-created"`)) || bytes.Count(b, []byte("\n")) != 1 {
		t.Errorf("log %q", b)
	}
}
