package file_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

// publishN publishes n documents on scope, each at the generation the one
// before made.
func publishN(tb testing.TB, s varplane.Store, scope varplane.Scope, n int) {
	tb.Helper()
	ctx := context.Background()
	for i := range n {
		c := storetest.CreatedEvent(scope, storetest.Doc(i))
		a := storetest.ActivatedEvent(scope, c.Revision, varplane.Generation(i))
		if _, err := s.AppendPublish(ctx, c, a, varplane.Generation(i)); err != nil {
			tb.Fatalf("publish %d on %s: %v", i, scope, err)
		}
	}
}

// waitZeroed waits until the zeroer has nothing left to do (fewer than
// piece bytes of allocated space short of ahead past the last line), and
// returns the store's offsets then.
func waitZeroed(t *testing.T, s *file.Store, piece, ahead int64) (off, zeroed, size int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		off, zeroed, size = file.ZeroState(s)
		if min(off+ahead, size)-max(zeroed, off) < piece {
			return off, zeroed, size
		}
		if time.Now().After(deadline) {
			t.Fatalf("zeroer did not catch up: last line ends at %d, zeros at %d, allocated %d", off, zeroed, size)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestZeroAhead: the zeroer writes zeros over the allocated space just past
// the last line, never on it; a closed log holds its lines only, and they
// all read back.
func TestZeroAhead(t *testing.T) {
	const piece, ahead = 4096, 16 << 10
	path := logPath(t)
	s := mustOpen(t, path, file.Options{Preallocate: 1 << 20})
	file.SetZeroAhead(s, piece, ahead)
	publishN(t, s, "z.a", 40)
	off, zeroed, size := waitZeroed(t, s, piece, ahead)
	if zeroed < off+ahead-piece || zeroed > off+ahead || zeroed > size {
		t.Fatalf("zeros end at %d: want within [%d, %d] past the last line at %d, and inside the allocated %d", zeroed, off+ahead-piece, off+ahead, off, size)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(raw)) < zeroed {
		t.Fatalf("log is %d bytes, zeros end at %d", len(raw), zeroed)
	}
	if n := int64(len(bytes.TrimRight(raw[:off], "\x00"))); n != off {
		t.Errorf("the lines end at %d, the store says %d", n, off)
	}
	if !bytes.Equal(raw[off:zeroed], make([]byte, zeroed-off)) {
		t.Error("the space written ahead of the last line is not all zeros")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Size() != off {
		t.Errorf("closed log is %d bytes, want %d (its lines only)", fi.Size(), off)
	}
	s = mustOpen(t, path, file.Options{})
	if st, err := s.State(context.Background(), "z.a"); err != nil || st.Generation != 40 {
		t.Errorf("reopened: generation %v (%v), want 40", st, err)
	}
}

// TestZeroAheadRacesCommits: with pieces far smaller than a batch, the
// zeroer runs between nearly every two batches of 16 writers and is
// overtaken all the time; every acknowledged publish reads back after a
// restart (a piece written on a line would fail Open or lose a batch).
func TestZeroAheadRacesCommits(t *testing.T) {
	const writers, each = 16, 40
	for _, tc := range []struct {
		name         string
		piece, ahead int64
	}{
		{"overtaken", 512, 1024},
		{"ahead", 4096, 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := logPath(t)
			s := mustOpen(t, path, file.Options{Preallocate: 256 << 10})
			file.SetZeroAhead(s, tc.piece, tc.ahead)
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() { publishN(t, s, varplane.Scope(fmt.Sprintf("z.w%d", w)), each) })
			}
			wg.Wait()
			if _, zeroed, _ := file.ZeroState(s); zeroed == 0 {
				t.Error("the zeroer never ran")
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, path, file.Options{})
			for w := range writers {
				sc := varplane.Scope(fmt.Sprintf("z.w%d", w))
				if st, err := s.State(context.Background(), sc); err != nil || st.Generation != each {
					t.Errorf("%s after restart: %+v (%v), want generation %d", sc, st, err, each)
				}
			}
		})
	}
}

// TestNoZeroerWithoutPrealloc: a log that grows by appends writes no zeros.
func TestNoZeroerWithoutPrealloc(t *testing.T) {
	path := logPath(t)
	s := mustOpen(t, path, file.Options{Preallocate: -1})
	file.SetZeroAhead(s, 512, 4096)
	publishN(t, s, "z.n", 20)
	if off, zeroed, _ := file.ZeroState(s); zeroed != 0 {
		t.Errorf("zeros end at %d (last line at %d), want none", zeroed, off)
	}
	if fi, _ := os.Stat(path); fi.Size() != int64(len(logBytes(t, path))) {
		t.Error("the log holds bytes after its last line")
	}
}
