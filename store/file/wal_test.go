package file_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

// walOpts opens with the smallest ring, so that a few hundred commits wrap
// it several times.
var walOpts = file.Options{WALSize: file.WALSizeMin, CheckpointEvery: -1}

// commitN commits n revisions, scope w.<i> each, and returns the log's
// bytes after them.
func commitN(t *testing.T, s *file.Store, path string, from, n int) []byte {
	t.Helper()
	file.WaitWAL(s)
	ctx := context.Background()
	for i := from; i < from+n; i++ {
		sc := varplane.Scope(fmt.Sprintf("w.%d", i))
		c := storetest.CreatedEvent(sc, storetest.Doc(i))
		if _, err := s.AppendPublish(ctx, c, storetest.ActivatedEvent(sc, c.Revision, 0), 0); err != nil {
			t.Fatal(err)
		}
	}
	return readLog(t, path)
}

// checkCommitted fails unless every scope w.<i>, i < n, serves its
// publish.
func checkCommitted(t *testing.T, s *file.Store, n int) {
	t.Helper()
	for i := range n {
		sc := varplane.Scope(fmt.Sprintf("w.%d", i))
		st, err := s.State(context.Background(), sc)
		if err != nil || st.Head == nil || st.Head.Revision != storetest.RevisionOf(storetest.Doc(i)) {
			t.Fatalf("acknowledged publish %s lost: %+v %v", sc, st, err)
		}
	}
}

// TestWALRestoresLostTail plays a machine crash that lost the page cache:
// after commits that wrapped the WAL's ring, the log is cut, zeroed or
// garbled after the point the WAL says is durable, and Open must give back
// the log byte for byte, every acknowledged publish in it.
func TestWALRestoresLostTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, path string, from int64)
	}{
		{"cut", func(t *testing.T, path string, from int64) {
			if err := os.Truncate(path, from); err != nil {
				t.Fatal(err)
			}
		}},
		{"zeros", func(t *testing.T, path string, from int64) {
			overwrite(t, path, from, func(b []byte) { clear(b) })
		}},
		{"garbage", func(t *testing.T, path string, from int64) {
			overwrite(t, path, from, func(b []byte) {
				for i := range b {
					b[i] = "x\n{"[i%3]
				}
			})
		}},
		{"shorter garbage", func(t *testing.T, path string, from int64) {
			if err := os.Truncate(path, from+100); err != nil {
				t.Fatal(err)
			}
			overwrite(t, path, from+10, func(b []byte) { copy(b, `{"kind":"activated"}`) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := logPath(t)
			s := mustOpen(t, path, walOpts)
			const n = 300
			want := commitN(t, s, path, 0, n)
			if file.WALSeq(s) < n || int64(len(want)) < 2*file.WALSizeMin {
				t.Fatalf("the ring did not wrap: %d records, %d log bytes", file.WALSeq(s), len(want))
			}
			file.Abandon(s)
			lap, err := file.WALLap(path)
			if err != nil || len(lap) == 0 || len(lap) >= n {
				t.Fatalf("the WAL's lap holds %d records (%v), want some but not all", len(lap), err)
			}
			tc.lose(t, path, lap[0])
			s = mustOpen(t, path, walOpts)
			checkCommitted(t, s, n)
			if got := readLog(t, path); !bytes.Equal(got, want) {
				t.Fatalf("the log after restore differs: %d bytes, want %d", len(got), len(want))
			}
			// The restored store commits on, and a clean Close leaves
			// nothing to restore.
			want = commitN(t, s, path, n, 5)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if lap, err := file.WALLap(path); err != nil || len(lap) != 0 {
				t.Fatalf("after Close the WAL holds %d records (%v), want none", len(lap), err)
			}
			s = mustOpen(t, path, walOpts)
			checkCommitted(t, s, n+5)
			if got := readLog(t, path); !bytes.Equal(got, want) {
				t.Fatal("the log changed across a clean restart")
			}
		})
	}
}

func overwrite(t *testing.T, path string, from int64, fill func([]byte)) {
	t.Helper()
	b := readLog(t, path)
	fill(b[from:])
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWALTornRecord: a record whose bytes do not check (a crash during its
// write: it was never synced, so never acknowledged) ends what Open
// restores; the batches before it are restored, it is not, and Open
// succeeds.
func TestWALTornRecord(t *testing.T) {
	path := logPath(t)
	s := mustOpen(t, path, file.Options{CheckpointEvery: -1})
	before := commitN(t, s, path, 0, 10)
	after := commitN(t, s, path, 10, 1)
	file.Abandon(s)
	lap, err := file.WALLap(path)
	if err != nil || len(lap) != 11 {
		t.Fatalf("lap %v %v, want 11 records", lap, err)
	}
	// The last record's payload is the last publish's lines: damage one
	// byte of it in the WAL, and take the last two batches from the log.
	ring, err := os.ReadFile(path + ".wal")
	if err != nil {
		t.Fatal(err)
	}
	last := after[lap[10]:]
	i := bytes.LastIndex(ring, last)
	if i < 0 {
		t.Fatal("the last batch is not in the WAL")
	}
	ring[i+len(last)/2] ^= 0x20
	if err := os.WriteFile(path+".wal", ring, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, lap[9]); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, file.Options{CheckpointEvery: -1})
	checkCommitted(t, s, 10)
	if st, _ := s.State(context.Background(), "w.10"); st.Generation != 0 {
		t.Errorf("the torn record was restored: w.10 at generation %d", st.Generation)
	}
	if got := readLog(t, path); !bytes.Equal(got, before) {
		t.Errorf("log after restore: %d bytes, want the %d before the torn record", len(got), len(before))
	}
}

// TestWALGap: a log shorter than where the WAL's first record of its lap
// goes lost bytes the WAL never held: Open refuses, naming both files, and
// changes neither.
func TestWALGap(t *testing.T) {
	path := logPath(t)
	s := mustOpen(t, path, walOpts)
	commitN(t, s, path, 0, 150) // wraps the ring: its lap starts past 0
	file.Abandon(s)
	lap, err := file.WALLap(path)
	if err != nil || len(lap) == 0 || lap[0] == 0 {
		t.Fatalf("lap %v %v", lap, err)
	}
	if err := os.Truncate(path, lap[0]-1); err != nil {
		t.Fatal(err)
	}
	log, wal := readLog(t, path), readLog(t, path+".wal")
	_, err = file.Open(context.Background(), path, walOpts)
	if err == nil || !strings.Contains(err.Error(), path+".wal") || !strings.Contains(err.Error(), path+",") {
		t.Fatalf("Open of a log shorter than its WAL's lap: %v, want an error naming both files", err)
	}
	if !bytes.Equal(readLog(t, path), log) || !bytes.Equal(readLog(t, path+".wal"), wal) {
		t.Fatal("the refused Open changed the files")
	}
}

// TestWALCompaction: a compaction rewrites the log at other offsets; the
// WAL must not hold records of the old log after it, or a crash would
// write them into the new one.
func TestWALCompaction(t *testing.T) {
	path := logPath(t)
	opts := file.Options{CheckpointEvery: -1}
	s := mustOpen(t, path, opts)
	ctx := context.Background()
	var revs []varplane.Revision
	for i := range 5 {
		c := storetest.CreatedEvent("r.k", storetest.Doc(100+i))
		if _, err := s.AppendPublish(ctx, c, storetest.ActivatedEvent("r.k", c.Revision, varplane.Generation(i)), varplane.Generation(i)); err != nil {
			t.Fatal(err)
		}
		revs = append(revs, c.Revision)
	}
	if _, err := s.Compact(ctx, map[varplane.Scope][]varplane.Revision{"r.k": revs[:4]}); err != nil {
		t.Fatal(err)
	}
	want := commitN(t, s, path, 0, 3)
	file.Abandon(s)
	s = mustOpen(t, path, opts)
	checkCommitted(t, s, 3)
	if got := readLog(t, path); !bytes.Equal(got, want) {
		t.Fatalf("the log changed at Open after a compaction:\n%s\nwant\n%s", got, want)
	}
}

const walCrashEnv = "VARPLANE_TEST_WAL_CRASH"

// TestWALCrash kills (SIGKILL) a child process that publishes and reports
// each acknowledgement, then takes from the log everything after the point
// its WAL says is durable (the page cache a machine crash loses): Open must
// have every acknowledged publish.
func TestWALCrash(t *testing.T) {
	if os.Getenv(walCrashEnv) != "" {
		t.Skip("the child runs TestWALCrashChild")
	}
	path := logPath(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestWALCrashChild$")
	cmd.Env = append(os.Environ(), walCrashEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := -1
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if i, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "acked ")); err == nil {
			acked = i
			if i == 400 {
				_ = cmd.Process.Kill()
			}
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed", err)
	}
	if acked < 400 {
		t.Fatalf("the child acknowledged %d publishes, want 400 at least", acked+1)
	}
	lap, err := file.WALLap(path)
	if err != nil || len(lap) == 0 {
		t.Fatalf("lap %v %v", lap, err)
	}
	if err := os.Truncate(path, lap[0]); err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, path, walOpts)
	checkCommitted(t, s, acked+1)
}

// TestWALCrashChild is the child of TestWALCrash: it publishes w.0, w.1…
// until it is killed, printing "acked i" once each is acknowledged.
func TestWALCrashChild(t *testing.T) {
	path := os.Getenv(walCrashEnv)
	if path == "" {
		t.Skip("run by TestWALCrash")
	}
	s, err := file.Open(context.Background(), path, walOpts)
	if err != nil {
		t.Fatal(err)
	}
	file.WaitWAL(s)
	ctx := context.Background()
	for i := 0; ; i++ {
		sc := varplane.Scope(fmt.Sprintf("w.%d", i))
		c := storetest.CreatedEvent(sc, storetest.Doc(i))
		if _, err := s.AppendPublish(ctx, c, storetest.ActivatedEvent(sc, c.Revision, 0), 0); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("acked %d\n", i)
	}
}

// TestConformanceNoWAL runs the suite with commits that sync the log
// itself (TestConformance runs it with the WAL, the default).
func TestConformanceNoWAL(t *testing.T) {
	if raceEnabled {
		// The same suite runs under the detector as TestConformance, with
		// the WAL and the checkpointer, which have every goroutine this
		// variant has; go test ./... runs this variant without it.
		t.Skip("runs without the race detector (TestConformance runs with it)")
	}
	storetest.Run(t, harness(file.Options{WALSize: -1}))
}
