package file_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

// unframed returns the log b without its sync lines: the same events as a
// log of format 1 would hold them.
func unframed(b []byte) []byte {
	var out []byte
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if !bytes.HasPrefix(l, []byte(`{"synced":`)) {
			out = append(out, l...)
		}
	}
	return out
}

// logBytes returns the log at path without the zeros allocated after its
// last line while a store has it open.
func logBytes(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimRight(b, "\x00")
}

// batches returns the offsets where each batch of the framed log b ends
// (just past its sync line), the frame start first.
func batches(b []byte) []int {
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

// eventsBefore counts the event lines of b before offset end.
func eventsBefore(b []byte, end int) int { return bytes.Count(unframed(b[:end]), []byte("\n")) }

// TestFramedCrashAtEveryOffset cuts a framed log at every byte of its last
// three batches and fills the rest with zeros, as a crash during a write
// into preallocated space leaves it: Open keeps exactly the batches whose
// sync line is whole, cuts the rest back to the last one, and warns only
// when something written (not zeros) was cut.
func TestFramedCrashAtEveryOffset(t *testing.T) {
	dir := t.TempDir()
	good := writeSample(t, filepath.Join(dir, "src.jsonl"))
	ends := batches(good)
	if len(ends) != 7 { // the frame start and six commits
		t.Fatalf("the sample has %d batches, want 7", len(ends))
	}
	for cut := ends[len(ends)-4]; cut <= len(good); cut++ {
		for _, zeros := range []int{0, 4096} {
			path := filepath.Join(dir, fmt.Sprintf("cut-%d-%d.jsonl", cut, zeros))
			if err := os.WriteFile(path, append(append([]byte{}, good[:cut]...), make([]byte, zeros)...), 0o600); err != nil {
				t.Fatal(err)
			}
			logger, out := captureLog()
			s, err := file.Open(context.Background(), path, file.Options{Logger: logger})
			if err != nil {
				t.Fatalf("cut at %d (+%d zeros): Open: %v", cut, zeros, err)
			}
			keep := 0
			for _, e := range ends {
				if e <= cut {
					keep = e
				}
			}
			h, _ := s.History(context.Background(), "agentic.lanes.vinci")
			if want := eventsBefore(good, keep); len(h) != want {
				t.Errorf("cut at %d: %d events, want %d", cut, len(h), want)
			}
			if warned := strings.Contains(out.String(), "level=WARN"); warned != (cut != keep) {
				t.Errorf("cut at %d (+%d zeros): warned %v, want %v: %s", cut, zeros, warned, cut != keep, out)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(path); !bytes.Equal(b, good[:keep]) {
				t.Errorf("cut at %d (+%d zeros): log is %d bytes after Open and Close, want the first %d", cut, zeros, len(b), keep)
			}
		}
	}
}

// TestFramedHoleIsTorn zeroes a run of bytes inside the last batch, as a
// crash leaves a write whose later sectors reached the disk and an earlier
// one did not: the batch was never acknowledged, and Open cuts it whole.
func TestFramedHoleIsTorn(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.jsonl")
	s := mustOpen(t, src, file.Options{})
	ctx := context.Background()
	if err := s.Append(ctx, storetest.CreatedEvent("hole.a", storetest.Doc(1)), 0); err != nil {
		t.Fatal(err)
	}
	c := storetest.CreatedEvent("hole.b", storetest.Doc(2))
	if _, err := s.AppendPublish(ctx, c, storetest.ActivatedEvent("hole.b", c.Revision, 0), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(src)
	ends := batches(good)
	last := ends[len(ends)-2] // where the publish's batch starts
	for at := last; at < len(good)-1; at += 7 {
		for _, n := range []int{1, 16, 512} {
			b := append([]byte{}, good...)
			for i := at; i < min(at+n, len(b)-1); i++ {
				b[i] = 0
			}
			path := filepath.Join(dir, fmt.Sprintf("hole-%d-%d.jsonl", at, n))
			if err := os.WriteFile(path, append(b, make([]byte, 100)...), 0o600); err != nil {
				t.Fatal(err)
			}
			logger, out := captureLog()
			s, err := file.Open(ctx, path, file.Options{Logger: logger})
			if err != nil {
				t.Fatalf("hole of %d at %d: Open: %v", n, at, err)
			}
			if st, _ := s.State(ctx, "hole.b"); st.Generation != 0 {
				t.Errorf("hole of %d at %d: the torn publish is visible (gen %d)", n, at, st.Generation)
			}
			if h, _ := s.History(ctx, "hole.a"); len(h) != 1 {
				t.Errorf("hole of %d at %d: the acknowledged batch before it lost its event", n, at)
			}
			if !strings.Contains(out.String(), "level=WARN") {
				t.Errorf("hole of %d at %d: no warning", n, at)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, good[:last]) {
				t.Errorf("hole of %d at %d: log is %d bytes, want the first %d", n, at, len(got), last)
			}
		}
	}
}

var damagedAt = regexp.MustCompile(`line (\d+) \(byte offset (\d+)\) is damaged`)

// TestFramedDamageStopsOpen changes bytes of a framed log where no crash
// can: inside a batch that a later batch follows, or inside the last batch
// with every byte of it present. Each may be an acknowledged commit, so Open
// fails naming the line and its offset and leaves the file as it was.
func TestFramedDamageStopsOpen(t *testing.T) {
	good := writeSample(t, filepath.Join(t.TempDir(), "src.jsonl"))
	ends := batches(good)
	lineAt := func(off int) int { return bytes.Count(good[:off], []byte("\n")) + 1 }
	flip := func(at int, from, to string) func([]byte) []byte {
		return func(b []byte) []byte {
			i := bytes.Index(b[at:], []byte(from))
			if i < 0 {
				t.Fatalf("no %q after %d", from, at)
			}
			return append(append(append([]byte{}, b[:at+i]...), to...), b[at+i+len(from):]...)
		}
	}
	tests := []struct {
		name   string
		damage func([]byte) []byte
		at     int // the offset the error names
	}{
		// The digit of a generation changed: every line still decodes, the
		// checksum catches it.
		{"middle batch, checksum", flip(ends[3], `"generation":2`, `"generation":7`), ends[3]},
		{"middle batch, garbage", flip(ends[2], `"kind"`, `"ki\x01d`), ends[2]},
		// Zeros where a crash leaves a hole, but later batches check: this
		// one was synced before them, so it is damage, not a torn write.
		{"middle batch, zeroed", flip(ends[2], `"kind":"`, "\x00\x00\x00\x00\x00\x00\x00\x00"), ends[2]},
		{"last batch, checksum", flip(ends[5], `"generation":3`, `"generation":7`), ends[5]},
		{"last batch, sync line", flip(ends[5], `"crc32c":`, `"crc32c":1`), ends[5]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log.jsonl")
			damaged := tc.damage(good)
			if err := os.WriteFile(path, damaged, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := file.Open(context.Background(), path, file.Options{})
			if err == nil {
				t.Fatal("Open of a damaged log succeeded")
			}
			// It names the damaged batch: its first line or its sync line.
			var line, off int
			if m := damagedAt.FindStringSubmatch(err.Error()); m != nil {
				line, _ = strconv.Atoi(m[1])
				off, _ = strconv.Atoi(m[2])
			}
			end := len(good)
			if i := slices.Index(ends, tc.at); i+1 < len(ends) {
				end = ends[i+1]
			}
			if off < tc.at || off >= end || line != lineAt(off) {
				t.Errorf("error %q does not name a line of the batch at [%d, %d)", err, tc.at, end)
			}
			if !strings.Contains(err.Error(), "line ") || !strings.Contains(err.Error(), "byte offset ") {
				t.Errorf("error %q does not name a line and its offset", err)
			}
			if b, _ := os.ReadFile(path); !bytes.Equal(b, damaged) {
				t.Error("Open changed a damaged log")
			}
		})
	}
}

// TestForgedSyncLineMemory puts 32 MiB of lines that do not decode after a
// good framed log, then a sync line that claims them all as its batch with
// a wrong checksum: Open stops naming the first bad line, changes nothing,
// and checks the claim without holding the claimed bytes in memory.
func TestForgedSyncLineMemory(t *testing.T) {
	path := logPath(t)
	good := writeSample(t, path)
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

// TestPreallocatedLogAtRest checks the space allocated ahead of the log:
// while the store is open the file holds it (a commit overwrites allocated
// space), LogSize counts only the lines, and Close cuts it, so that a log at
// rest ends with its last line and reopens to the same state.
func TestPreallocatedLogAtRest(t *testing.T) {
	path := logPath(t)
	s := mustOpen(t, path, file.Options{Preallocate: 1 << 20})
	ctx := context.Background()
	for i := range 50 {
		if err := s.Append(ctx, storetest.CreatedEvent(varplane.Scope(fmt.Sprintf("p.k%d", i)), storetest.Doc(i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	used, _ := s.LogSize()
	fi, _ := os.Stat(path)
	if fi.Size() <= used {
		t.Errorf("open log is %d bytes for %d used: nothing allocated ahead", fi.Size(), used)
	}
	if b := logBytes(t, path); int64(len(b)) != used {
		t.Errorf("LogSize %d, but the lines end at %d", used, len(b))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Size() != used {
		t.Errorf("closed log is %d bytes, want %d (its lines only)", fi.Size(), used)
	}
	s = mustOpen(t, path, file.Options{Preallocate: -1})
	if sc, err := s.Scopes(ctx); err != nil || len(sc) != 50 {
		t.Errorf("reopened: %d scopes (%v), want 50", len(sc), err)
	}
	if err := s.Append(ctx, storetest.CreatedEvent("p.more", storetest.Doc(99)), 0); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Size() != int64(len(logBytes(t, path))) {
		t.Error("Preallocate -1 allocated ahead")
	}
}

// FuzzFramedTail appends arbitrary bytes, and zeros, to a good framed log:
// Open never panics and never loses a good event; a failed Open names a line
// and its offset and changes nothing; a tail without a newline is cut.
func FuzzFramedTail(f *testing.F) {
	good := writeSample(f, filepath.Join(f.TempDir(), "good.jsonl"))
	ends := batches(good)
	lastBatch := good[ends[len(ends)-2]:]
	f.Add([]byte(`{"kind":"activ`), uint16(0))
	f.Add([]byte("\n"), uint16(16))
	f.Add(lastBatch, uint16(0))
	f.Add(lastBatch[:len(lastBatch)-3], uint16(4096))
	f.Add(append([]byte("\x00\x00\n"), lastBatch...), uint16(0))
	f.Add([]byte(file.FrameStart), uint16(1))
	f.Fuzz(func(t *testing.T, tail []byte, zeros uint16) {
		in := append(append(append([]byte{}, good...), tail...), make([]byte, zeros)...)
		b, opened := openFuzzed(t, in, file.Options{Logger: quiet, NoSync: true, Preallocate: -1})
		if !opened {
			return
		}
		if !bytes.HasPrefix(b, good) {
			t.Fatal("the good batches were changed")
		}
		if !bytes.Contains(tail, []byte("\n")) && !bytes.Equal(b, good) {
			t.Fatalf("a tail without newline was kept: %q", b[len(good):])
		}
		if bytes.IndexByte(b, 0) >= 0 {
			t.Fatal("zeros were kept in the log")
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
