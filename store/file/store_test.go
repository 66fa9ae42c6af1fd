package file_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

func logPath(t *testing.T) string { return filepath.Join(t.TempDir(), "data", "var-log.jsonl") }

// writeSample commits a few events and returns the log's bytes.
func writeSample(t testing.TB, path string) []byte {
	t.Helper()
	s, err := file.Open(context.Background(), path, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		ev := storetest.CreatedEvent("agentic.lanes.vinci", storetest.Doc(i))
		if err := s.Append(ctx, ev, 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, storetest.ActivatedEvent("agentic.lanes.vinci", ev.Revision, varplane.Generation(i)), varplane.Generation(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOpenCreatesPrivateFiles(t *testing.T) {
	path := logPath(t)
	mustOpen(t, path, file.Options{})
	for p, want := range map[string]os.FileMode{filepath.Dir(path): 0o700, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got&^want != 0 {
			t.Errorf("%s mode = %v, want at most %v", p, got, want)
		}
	}
}

func TestSecondWriterIsLockedOut(t *testing.T) {
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	_, err := file.Open(context.Background(), path, file.Options{})
	if !errors.Is(err, file.ErrLocked) {
		t.Fatalf("second Open: err = %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name the log", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, path, file.Options{}) // released by Close
}

func TestLogLinesAreEventJSON(t *testing.T) {
	path := logPath(t)
	b := writeSample(t, path)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 6 {
		t.Fatalf("log has %d event lines, want 6", len(lines))
	}
	for _, want := range []string{`"kind":"activated"`, `"scope":"agentic.lanes.vinci"`, `"generation":3`, `"previousGeneration":2`, `"seq":6,"hash":"`} {
		if !strings.Contains(lines[5], want) {
			t.Errorf("last line %s lacks %s", lines[5], want)
		}
	}
	// Each line is the event's JSON and nothing else (no member the
	// decoder skips), and the chain holds.
	var hist []varplane.Event
	for i, l := range lines {
		var ev varplane.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if got := string(eventjson.Event(&ev)); got != l {
			t.Errorf("line %d is not the event's JSON:\n%s\n%s", i+1, l, got)
		}
		hist = append(hist, ev)
	}
	if v, err := varplane.VerifyChain("agentic.lanes.vinci", hist); err != nil || v.Head.Seq != 6 {
		t.Errorf("the log's chain: %+v, %v", v, err)
	}
}

func captureLog() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

// TestTornTailIsCut appends what a crash during a write leaves after the
// last line (fragments without a newline, zeros where the file grew without
// its data, lines that hold such zeros): Open cuts exactly that, keeps
// every earlier event, and logs a warning unless it cut zeros only.
func TestTornTailIsCut(t *testing.T) {
	path0 := logPath(t)
	good0 := writeSample(t, path0)
	lastLine := good0[bytes.LastIndexByte(good0[:len(good0)-1], '\n')+1:]
	for name, tail := range map[string]string{
		"no newline": `{"kind":"activated","scope":"agentic.lanes.vinci","revis`,
		"zeros":      "\x00\x00\x00\x00",
		// A whole event without its newline was not acknowledged either:
		// its newline was part of the same write and fdatasync.
		"event without newline": string(lastLine[:len(lastLine)-1]),
		"fragment and zeros":    `{"kind":"activ` + strings.Repeat("\x00", 3000),
		// Lines whose blocks did not all reach the disk, with no whole
		// line after them.
		"zeroed lines":       "\x00\x00\x00\x00" + string(lastLine[4:]) + "\x00\x00\n",
		"line holding zeros": "{\"kind\":\"activ\x00\x00\n",
		"line of zeros":      "\x00\x00\x00\x00\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := logPath(t)
			good := writeSample(t, path)
			if err := os.WriteFile(path, append(append([]byte{}, good...), tail...), 0o600); err != nil {
				t.Fatal(err)
			}
			logger, out := captureLog()
			s := mustOpen(t, path, file.Options{Logger: logger})
			st, _ := s.State(context.Background(), "agentic.lanes.vinci")
			if st.Generation != 3 || st.Head == nil {
				t.Errorf("recovered state = gen %d head %v, want gen 3 with a head", st.Generation, st.Head)
			}
			warned := strings.Contains(out.String(), "torn") && strings.Contains(out.String(), "level=WARN")
			if zerosOnly := strings.Trim(tail, "\x00") == ""; warned == zerosOnly {
				t.Errorf("warned %v for a tail of zeros only %v: %q", warned, zerosOnly, out.String())
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(path); string(b) != string(good) {
				t.Errorf("log after open has %d bytes, want the %d good ones", len(b), len(good))
			}
		})
	}
}

// TestDamagedLineStopsOpen damages one complete line (ending in a newline),
// in the middle of the log or as its last line, where no crash can: a line
// without a zero byte that does not decode or does not link, or a line of
// zeros that a whole line follows. It may be an acknowledged event, so Open
// fails naming the line and its byte offset, and leaves the file byte for
// byte as it was.
func TestDamagedLineStopsOpen(t *testing.T) {
	gap := func(i int) func(l []string) []string {
		return func(l []string) []string {
			l[i] = strings.Replace(l[i], fmt.Sprintf(`"generation":%d,"previousGeneration":%d`, i/2+1, i/2), `"generation":9,"previousGeneration":8`, 1)
			return l
		}
	}
	tests := []struct {
		name   string
		damage func(lines []string) []string
		line   int
	}{
		{"garbage", func(l []string) []string { l[1] = `{"kind":"revision-cre` + "\x00"; return l }, 2},
		{"blank", func(l []string) []string { l[2] = ""; return l }, 3},
		{"generation gap", gap(3), 4},
		{"zeros in the middle", func(l []string) []string { l[3] = strings.Repeat("\x00", len(l[3])); return l }, 4},
		{"garbage last line", func(l []string) []string { l[5] = "{\"kind\":\"activ!!"; return l }, 6},
		{"blank last line", func(l []string) []string { return append(l, "") }, 7},
		{"truncated last line", func(l []string) []string { l[5] = l[5][:len(l[5])/2]; return l }, 6},
		{"generation gap last line", gap(5), 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := logPath(t)
			good := writeSample(t, path)
			lines := strings.Split(strings.TrimSuffix(string(good), "\n"), "\n")
			damaged := strings.Join(tc.damage(lines), "\n") + "\n"
			if err := os.WriteFile(path, []byte(damaged), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := file.Open(context.Background(), path, file.Options{})
			if err == nil {
				t.Fatal("Open of a damaged log succeeded")
			}
			offset := 0
			for _, l := range lines[:tc.line-1] {
				offset += len(l) + 1
			}
			if want := fmt.Sprintf("line %d (byte offset %d)", tc.line, offset); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %s", err, want)
			}
			if b, _ := os.ReadFile(path); string(b) != damaged {
				t.Error("Open changed a damaged log")
			}
			// The lock is released after a failed Open.
			if _, err := file.Open(context.Background(), path, file.Options{}); errors.Is(err, file.ErrLocked) {
				t.Error("failed Open kept the lock")
			}
		})
	}
}

// TestCrashAtOffsetsOfLastLines cuts a log within its last three lines,
// as a crash during a group commit that wrote them in one write could (at
// every byte of the last line, and around every newline and every 16th byte
// of the two before, every other cut followed by zeros), and checks the
// torn-tail rule: Open keeps every complete line and cuts only the fragment
// after the last newline, warning unless it cut zeros only.
func TestCrashAtOffsetsOfLastLines(t *testing.T) {
	if raceEnabled {
		// One goroutine reopening a log cut at each offset: the run
		// without the detector (go test ./...) checks every offset.
		t.Skip("runs without the race detector")
	}
	dir := t.TempDir()
	good := writeSample(t, filepath.Join(dir, "src.jsonl"))
	lines := strings.SplitAfter(string(good), "\n")
	from := len(good) - len(lines[3]) - len(lines[4]) - len(lines[5])
	lastStart := len(good) - len(lines[5])
	for cut := from; cut <= len(good); cut++ {
		nearNewline := bytes.IndexByte(good[max(cut-2, 0):min(cut+2, len(good))], '\n') >= 0
		if cut < lastStart && !nearNewline && cut%16 != 0 {
			continue
		}
		path := filepath.Join(dir, fmt.Sprintf("cut-%d.jsonl", cut))
		// Every other cut with zeros after it, where the file grew
		// without its data.
		if err := os.WriteFile(path, append(append([]byte{}, good[:cut]...), make([]byte, 4096*(cut%2))...), 0o600); err != nil {
			t.Fatal(err)
		}
		logger, out := captureLog()
		s, err := file.Open(context.Background(), path, file.Options{Logger: logger})
		if err != nil {
			t.Fatalf("cut at %d: Open: %v", cut, err)
		}
		// Lines alternate create, activate: k complete lines hold k/2
		// activations.
		complete := bytes.Count(good[:cut], []byte("\n"))
		wantLen := bytes.LastIndexByte(good[:cut], '\n') + 1
		wantGen := varplane.Generation(complete / 2)
		st, _ := s.State(context.Background(), "agentic.lanes.vinci")
		h, _ := s.History(context.Background(), "agentic.lanes.vinci")
		if st.Generation != wantGen || len(h) != complete {
			t.Errorf("cut at %d: gen %d with %d events, want gen %d with %d", cut, st.Generation, len(h), wantGen, complete)
		}
		if torn := cut != wantLen; torn != strings.Contains(out.String(), "level=WARN") {
			t.Errorf("cut at %d: torn %v, but the log says %q", cut, torn, out.String())
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != string(good[:wantLen]) {
			t.Errorf("cut at %d: log is %d bytes after open, want the first %d", cut, len(b), wantLen)
		}
	}
}

// TestDocumentAtDepthCeilingSurvivesRestart is the attack of issue 11: a
// document nested deeper than the reader accepted was acknowledged, and the
// next Open refused the log or, as its last line, cut it. Now the reader
// accepts every document the ceilings allow, and a line beyond its bound
// (which no engine acknowledges) stops Open naming the line instead of being
// cut.
func TestDocumentAtDepthCeilingSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	nested := func(depth int) json.RawMessage {
		return json.RawMessage(strings.Repeat(`{"a":[`, depth/2) + strings.Repeat("[", depth%2) + "1" + strings.Repeat("]", depth%2) + strings.Repeat(`]}`, depth/2))
	}
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	doc := nested(varplane.MaxDepthCeiling)
	if err := storetest.Ceilings.CheckJSON(doc, 0); err != nil {
		t.Fatalf("the ceiling-deep document is refused by the limits: %v", err)
	}
	rev := storetest.CreatedEvent("deep.k", doc)
	if err := s.Append(ctx, rev, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, file.Options{})
	rec, err := s.Revision(ctx, "deep.k", rev.Revision)
	if err != nil || !bytes.Equal(rec.Document, doc) {
		t.Fatalf("after restart: revision %v, err %v; want the %d-deep document", rec, err, varplane.MaxDepthCeiling)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A 1,002-deep document as the last line, written by a version without
	// limits: Open refuses the log naming the line, and deletes nothing.
	good, _ := os.ReadFile(path)
	deep := storetest.CreatedEvent("deep.k", nested(1002))
	damaged := append(eventjson.AppendEvent(append([]byte{}, good...), deep), '\n')
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = file.Open(ctx, path, file.Options{})
	if want := fmt.Sprintf("line %d (byte offset %d)", bytes.Count(good, []byte("\n"))+1, len(good)); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Open of a log with a 1,002-deep last line: err = %v, want one naming %s", err, want)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, damaged) {
		t.Error("Open changed the log")
	}
}

func TestFailedSyncIsFailStop(t *testing.T) {
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	ctx := context.Background()
	ev := storetest.CreatedEvent("k.a", storetest.Doc(1))
	if err := s.Append(ctx, ev, 0); err != nil {
		t.Fatal(err)
	}
	good := readLog(t, path)
	fail := true
	var mu sync.Mutex
	file.SetSyncFunc(s, func() error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return errors.New("injected EIO")
		}
		return nil
	})
	err := s.Append(ctx, storetest.ActivatedEvent("k.a", ev.Revision, 0), 0)
	if !errors.Is(err, varplane.ErrOutcomeUnknown) {
		t.Fatalf("Append with failing sync: err = %v, want outcome-unknown", err)
	}
	if st, _ := s.State(ctx, "k.a"); st.Generation != 0 || st.Head != nil {
		t.Errorf("an undurable commit became visible: gen %d", st.Generation)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	if err := s.Append(ctx, storetest.ActivatedEvent("k.a", ev.Revision, 0), 0); !errors.Is(err, varplane.ErrUnavailable) {
		t.Errorf("Append after a failed sync: err = %v, want store-unavailable (fail-stop)", err)
	}
	if b := readLog(t, path); !bytes.Equal(b, good) {
		t.Errorf("the failed batch was left in the log (%d bytes, want %d)", len(b), len(good))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, file.Options{})
	if st, _ := s.State(ctx, "k.a"); st.Generation != 0 {
		t.Errorf("after reopen: gen %d, want 0", st.Generation)
	}
}

// TestDurableBeforeVisible holds a commit inside its fsync and checks that
// nothing of it is visible, nor acknowledged, until the fsync returns.
func TestDurableBeforeVisible(t *testing.T) {
	s := mustOpen(t, logPath(t), file.Options{})
	ctx := context.Background()
	ev := storetest.CreatedEvent("k.a", storetest.Doc(1))
	if err := s.Append(ctx, ev, 0); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	file.SetSyncFunc(s, func() error {
		once.Do(func() { close(entered); <-release })
		return nil
	})
	watched := make(chan varplane.Commit, 1)
	s.Watch(func(c varplane.Commit) { watched <- c })
	acked := make(chan error, 1)
	go func() { acked <- s.Append(ctx, storetest.ActivatedEvent("k.a", ev.Revision, 0), 0) }()
	<-entered
	if st, _ := s.State(ctx, "k.a"); st.Generation != 0 {
		t.Errorf("visible before fsync: gen %d", st.Generation)
	}
	select {
	case err := <-acked:
		t.Fatalf("acknowledged before fsync returned: %v", err)
	case c := <-watched:
		t.Fatalf("watched before fsync returned: %+v", c)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if err := <-acked; err != nil {
		t.Fatal(err)
	}
	if st, _ := s.State(ctx, "k.a"); st.Generation != 1 {
		t.Errorf("after ack: gen %d, want 1", st.Generation)
	}
	<-watched
}

// TestGroupCommit queues many commits behind a slow fsync: they share
// fsyncs, and a conflict in a batch fails only its own caller.
func TestGroupCommit(t *testing.T) {
	s := mustOpen(t, logPath(t), file.Options{})
	ctx := context.Background()
	const n = 64
	revs := make([]varplane.Revision, n)
	for i := range n {
		ev := storetest.CreatedEvent(varplane.Scope(fmt.Sprintf("g.k%d", i)), storetest.Doc(i))
		if err := s.Append(ctx, ev, 0); err != nil {
			t.Fatal(err)
		}
		revs[i] = ev.Revision
	}
	race := storetest.CreatedEvent("g.race", storetest.Doc(0))
	if err := s.Append(ctx, race, 0); err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	file.SetSyncFunc(s, func() error { time.Sleep(5 * time.Millisecond); return nil })
	var wg sync.WaitGroup
	own := make([]error, n)
	racers := make([]error, n)
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			own[i] = s.Append(ctx, storetest.ActivatedEvent(varplane.Scope(fmt.Sprintf("g.k%d", i)), revs[i], 0), 0)
		}()
		go func() {
			defer wg.Done()
			racers[i] = s.Append(ctx, storetest.ActivatedEvent("g.race", race.Revision, 0), 0)
		}()
	}
	wg.Wait()
	wins := 0
	for i := range n {
		if own[i] != nil {
			t.Errorf("activation of g.k%d: %v", i, own[i])
		}
		if racers[i] == nil {
			wins++
		} else if !errors.Is(racers[i], varplane.ErrConflict) {
			t.Errorf("racer %d: %v, want a conflict", i, racers[i])
		}
	}
	if wins != 1 {
		t.Errorf("%d racers won, want 1", wins)
	}
	st := s.Stats()
	commits, fsyncs := st.Commits-before.Commits, st.Fsyncs-before.Fsyncs
	if commits != n+1 {
		t.Errorf("commits = %d, want %d", commits, n+1)
	}
	if fsyncs >= commits {
		t.Errorf("%d commits took %d fsyncs: no group commit", commits, fsyncs)
	}
	if st.Refused-before.Refused != n-1 {
		t.Errorf("refused = %d, want %d", st.Refused-before.Refused, n-1)
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// FuzzTornTail appends arbitrary bytes, and zeros, to a good log: Open
// never panics and never loses a good event; a failed Open names a line and
// its offset and changes nothing; what Open cuts is only ever what a crash
// leaves (a fragment without a newline, lines holding zero bytes with no
// whole line after them), and the log it leaves holds no zero byte.
func FuzzTornTail(f *testing.F) {
	good := writeSample(f, filepath.Join(f.TempDir(), "good.jsonl"))
	lastLine := good[bytes.LastIndexByte(good[:len(good)-1], '\n')+1:]
	f.Add([]byte(`{"kind":"activ`), uint16(0))
	f.Add([]byte("\n"), uint16(16))
	f.Add(lastLine[:len(lastLine)-1], uint16(0))
	f.Add(lastLine[:len(lastLine)-3], uint16(4096))
	f.Add(append([]byte("garbage\n"), lastLine...), uint16(0))
	f.Add(append([]byte("\x00\x00\n"), lastLine...), uint16(0))
	f.Fuzz(func(t *testing.T, tail []byte, zeros uint16) {
		in := append(append(append([]byte{}, good...), tail...), make([]byte, zeros)...)
		b, opened := openFuzzed(t, in, file.Options{Logger: quiet, NoSync: true})
		if !opened {
			if !bytes.Contains(tail, []byte("\n")) {
				t.Fatal("a tail without newline failed Open")
			}
			return
		}
		if !bytes.HasPrefix(b, good) {
			t.Fatal("the good lines were changed")
		}
		if bytes.IndexByte(b, 0) >= 0 {
			t.Fatal("zeros were kept in the log")
		}
		cut := in[len(b):]
		lines := bytes.SplitAfter(cut, []byte("\n"))
		for i, l := range lines[:len(lines)-1] {
			if bytes.IndexByte(l, 0) < 0 && (i > 0 || !bytes.HasSuffix(l, []byte(`,"publish":true}`+"\n"))) {
				t.Fatalf("a whole line without zeros was cut: %q", l)
			}
		}
	})
}

// openFuzzed writes in as a log and opens it, for the fuzz tests. When Open
// fails it checks that the error names a line and its offset and that the
// log is unchanged, and reports false; otherwise it checks that the six
// events of writeSample survived, closes the store and returns the log.
func openFuzzed(t *testing.T, in []byte, opts file.Options) ([]byte, bool) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(path, in, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := file.Open(context.Background(), path, opts)
	if err != nil {
		if !strings.Contains(err.Error(), "line ") || !strings.Contains(err.Error(), "byte offset ") {
			t.Fatalf("error does not name a line and its offset: %v", err)
		}
		if b, _ := os.ReadFile(path); !bytes.Equal(b, in) {
			t.Fatal("a failed Open changed the log")
		}
		return nil, false
	}
	h, _ := s.History(context.Background(), "agentic.lanes.vinci")
	if len(h) < 6 {
		t.Fatalf("only %d of the 6 good events survived", len(h))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b, true
}

// readLog returns the bytes of the log at path.
func readLog(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
