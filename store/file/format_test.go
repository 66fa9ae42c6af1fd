package file_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

// TestHoleInTheLastWrite zeroes a run of bytes inside a publish's two lines
// (one write), as a crash that left some of the write's blocks reading as
// zeros would: when the zeros are in its last line, nothing whole follows
// them and the publish is cut, both lines, with a warning; when a whole
// line follows them, they cannot be told from a zeroed acknowledged line,
// and Open stops naming their line, changing nothing.
func TestHoleInTheLastWrite(t *testing.T) {
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
	good := readLog(t, src)
	lines := bytes.SplitAfter(good, []byte("\n"))
	start := len(lines[0])          // where the publish's write starts
	second := start + len(lines[1]) // where its activation line starts
	for at := start; at < len(good)-1; at += 11 {
		for _, n := range []int{1, 16, 512} {
			b := append([]byte{}, good...)
			for i := at; i < min(at+n, len(b)-1); i++ {
				b[i] = 0
			}
			path := filepath.Join(dir, fmt.Sprintf("hole-%d-%d.jsonl", at, n))
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			logger, out := captureLog()
			s, err := file.Open(ctx, path, file.Options{Logger: logger})
			if at < second-1 && at+n < second-1 {
				// The activation line is whole after the hole.
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("line 2 (byte offset %d) is damaged", start)) {
					t.Fatalf("hole of %d at %d before a whole line: Open: %v, want the damage named", n, at, err)
				}
				if got := readLog(t, path); !bytes.Equal(got, b) {
					t.Errorf("hole of %d at %d: a failed Open changed the log", n, at)
				}
				continue
			}
			if err != nil {
				t.Fatalf("hole of %d at %d: Open: %v", n, at, err)
			}
			if st, _ := s.State(ctx, "hole.b"); st.Generation != 0 {
				t.Errorf("hole of %d at %d: the torn publish is visible (gen %d)", n, at, st.Generation)
			}
			if _, err := s.Revision(ctx, "hole.b", c.Revision); err == nil {
				t.Errorf("hole of %d at %d: half the publish is stored", n, at)
			}
			if h, _ := s.History(ctx, "hole.a"); len(h) != 1 {
				t.Errorf("hole of %d at %d: the acknowledged line before it was lost", n, at)
			}
			if !strings.Contains(out.String(), "level=WARN") {
				t.Errorf("hole of %d at %d: no warning", n, at)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if got := readLog(t, path); !bytes.Equal(got, good[:start]) {
				t.Errorf("hole of %d at %d: log is %d bytes, want the first %d", n, at, len(got), start)
			}
		}
	}
}

// TestHugeLineBoundedMemory puts a line far longer than any the store
// writes in the log, whole or as its last fragment: Open reads past it in
// bounded memory, refuses the whole one naming it (it could be an
// acknowledged line, changed), and cuts the fragment.
func TestHugeLineBoundedMemory(t *testing.T) {
	defer file.SetMaxLineBytes(file.SetMaxLineBytes(1 << 20))
	path := logPath(t)
	good := writeSample(t, path)
	huge := bytes.Repeat([]byte("x"), 48<<20)
	for _, whole := range []bool{true, false} {
		in := append(append([]byte{}, good...), huge...)
		if whole {
			in = append(append(in, '\n'), good[:bytes.IndexByte(good, '\n')+1]...)
		}
		if err := os.WriteFile(path, in, 0o600); err != nil {
			t.Fatal(err)
		}
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		s, err := file.Open(context.Background(), path, file.Options{Logger: quiet})
		runtime.ReadMemStats(&m1)
		if got := m1.TotalAlloc - m0.TotalAlloc; got > 16<<20 {
			t.Errorf("whole %v: Open allocated %d MiB for a 48 MiB line", whole, got>>20)
		}
		if whole {
			want := fmt.Sprintf("line 7 (byte offset %d) is damaged: the line is longer than", len(good))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Open: %v, want %q", err, want)
			}
			if !bytes.Equal(readLog(t, path), in) {
				t.Error("Open changed the log")
			}
			continue
		}
		if err != nil {
			t.Fatalf("Open with a huge fragment: %v", err)
		}
		_ = s.Close()
		if !bytes.Equal(readLog(t, path), good) {
			t.Error("the huge fragment was not cut")
		}
	}
	// The writer refuses what the reader would not read back.
	s := mustOpen(t, path, file.Options{})
	doc := []byte(`{"x":"` + strings.Repeat("y", 1<<20) + `"}`)
	if err := s.Append(context.Background(), storetest.CreatedEvent("huge.k", doc), 0); varplane.ErrorCode(err) != varplane.CodeBadRequest {
		t.Errorf("Append of an event longer than a line: %v, want bad-request", err)
	}
}

// TestNoZerosInTheLog: while the store commits, and after it closes, the
// log file is its lines and nothing else: its size is LogSize, it ends with
// a newline, and it holds no zero byte (the space the log grows into is
// never visible in it).
func TestNoZerosInTheLog(t *testing.T) {
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	ctx := context.Background()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				sc := varplane.Scope(fmt.Sprintf("z.w%d", w))
				c := storetest.CreatedEvent(sc, storetest.Doc(i))
				if _, err := s.AppendPublish(ctx, c, storetest.ActivatedEvent(sc, c.Revision, varplane.Generation(i)), varplane.Generation(i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	for looks := 0; time.Now().Before(deadline) || looks < 20; looks++ {
		b := readLog(t, path)
		if i := bytes.IndexByte(b, 0); i >= 0 {
			t.Fatalf("a zero byte at offset %d of the open log", i)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			// A write in progress may be seen in part; never zeros.
			continue
		}
	}
	stop.Store(true)
	wg.Wait()
	size, _ := s.LogSize()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b := readLog(t, path)
	if int64(len(b)) != size || bytes.IndexByte(b, 0) >= 0 || b[len(b)-1] != '\n' {
		t.Errorf("closed log: %d bytes (LogSize %d), zeros at %d", len(b), size, bytes.IndexByte(b, 0))
	}
}
