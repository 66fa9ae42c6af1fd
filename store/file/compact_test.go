package file_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

// workload commits n rounds over a few scopes: revisions, activations,
// rejections, subtree deactivations and publishes with idempotency keys.
func workload(t testing.TB, s varplane.Store, from, n int) {
	t.Helper()
	ctx := context.Background()
	scopes := []varplane.Scope{"w.a", "w.a.b", "w.c"}
	for i := from; i < from+n; i++ {
		sc := scopes[i%len(scopes)]
		st, err := s.State(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		switch i % 7 {
		case 3:
			if err := s.Append(ctx, &varplane.Event{Kind: varplane.EventRejected, Scope: sc, RejectionReason: fmt.Sprint("r", i)}, 0); err != nil {
				t.Fatal(err)
			}
		case 5:
			if err := s.AppendSubtreeDeactivation(ctx, storetest.DeactivatedEvent(sc, st.Generation), st.Generation); err != nil {
				t.Fatal(err)
			}
		default:
			c := storetest.CreatedEvent(sc, storetest.Doc(i))
			a := storetest.ActivatedEvent(sc, c.Revision, st.Generation)
			a.IdempotencyKey, a.RequestHash = fmt.Sprint("key-", i), "h"
			if _, err := s.AppendPublish(ctx, c, a, st.Generation); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// snapshotOf is what a store answers for the workload's scopes.
func snapshotOf(t testing.TB, s varplane.Store, keys int) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	scopes, err := s.Scopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scopes {
		st, _ := s.State(ctx, sc)
		fmt.Fprintf(&b, "%s gen=%d", sc, st.Generation)
		if st.Head != nil {
			fmt.Fprintf(&b, " head=%s %s", st.Head.Revision, st.Head.ReadBody())
		}
		if st.LastRejected != nil {
			fmt.Fprintf(&b, " rej=%s", st.LastRejected.RejectionReason)
		}
		hist, err := s.History(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range hist {
			fmt.Fprintf(&b, "\n  %s %s %d %s %s", ev.Kind, ev.Revision, ev.Generation, ev.Reason, ev.Document)
			if ev.Kind == varplane.EventRevisionCreated {
				rec, err := s.Revision(ctx, sc, ev.Revision)
				switch {
				case errors.Is(err, varplane.ErrReclaimed):
					b.WriteString(" reclaimed")
				case err != nil:
					t.Fatalf("revision %s of %s: %v", ev.Revision, sc, err)
				default:
					fmt.Fprintf(&b, " body=%s", rec.Document)
				}
			}
		}
		b.WriteString("\n")
	}
	for i := range keys {
		if rec, err := s.Idempotency(ctx, fmt.Sprint("key-", i)); err == nil {
			fmt.Fprintf(&b, "key-%d gen=%d %s\n", i, rec.Generation, rec.Event.Revision)
		}
	}
	return b.String()
}

// TestCompactKeepsEverything: a compaction while commits go on changes no
// answer, and a restart from the checkpoint and its tail answers the same.
func TestCompactKeepsEverything(t *testing.T) {
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	workload(t, s, 0, 60)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // commits during the compaction
		defer wg.Done()
		workload(t, s, 60, 40)
	}()
	res, err := s.Compact(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if res.Events == 0 || res.Reclaimed != 0 {
		t.Errorf("compaction result %+v", res)
	}
	workload(t, s, 100, 20)
	want := snapshotOf(t, s, 120)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := mustOpen(t, path, file.Options{})
	if got := snapshotOf(t, s2, 120); got != want {
		t.Fatalf("after restart from the checkpoint:\n%s\nwant\n%s", got, want)
	}
	// A second compaction of a log opened from a checkpoint.
	if _, err := s2.Compact(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	workload(t, s2, 120, 10)
	want = snapshotOf(t, s2, 130)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := snapshotOf(t, mustOpen(t, path, file.Options{}), 130); got != want {
		t.Fatalf("after a second compaction:\n%s\nwant\n%s", got, want)
	}
}

// TestCompactReclaims: a reclaimed body answers revision-reclaimed before
// and after a restart, its events stay, a head is never reclaimed, and a
// revision never created is not found.
func TestCompactReclaims(t *testing.T) {
	ctx := context.Background()
	path := logPath(t)
	s := mustOpen(t, path, file.Options{})
	var revs []varplane.Revision
	for i := range 3 {
		c := storetest.CreatedEvent("r.k", storetest.Doc(i))
		if _, err := s.AppendPublish(ctx, c, storetest.ActivatedEvent("r.k", c.Revision, varplane.Generation(i)), varplane.Generation(i)); err != nil {
			t.Fatal(err)
		}
		revs = append(revs, c.Revision)
	}
	never := storetest.RevisionOf(storetest.Doc(99))
	// A revision never created, named for reclamation, stays never created.
	res, err := s.Compact(ctx, map[varplane.Scope][]varplane.Revision{"r.k": {revs[0], revs[2], never}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reclaimed != 1 {
		t.Errorf("reclaimed %d, want 1 (the head is kept)", res.Reclaimed)
	}
	check := func(s *file.Store) {
		t.Helper()
		if _, err := s.Revision(ctx, "r.k", revs[0]); !errors.Is(err, varplane.ErrReclaimed) {
			t.Errorf("reclaimed revision: %v, want revision-reclaimed", err)
		}
		if _, err := s.Revision(ctx, "r.k", never); !errors.Is(err, varplane.ErrNotFound) {
			t.Errorf("never created: %v, want not-found", err)
		}
		for _, r := range revs[1:] {
			if _, err := s.Revision(ctx, "r.k", r); err != nil {
				t.Errorf("kept revision %s: %v", r, err)
			}
		}
		if _, err := s.Replay(ctx, "r.k", 1); !errors.Is(err, varplane.ErrReclaimed) {
			t.Errorf("replay to the reclaimed head: %v, want revision-reclaimed", err)
		}
		if st, err := s.Replay(ctx, "r.k", 2); err != nil || st.Head.Revision != revs[1] {
			t.Errorf("replay to a kept head: %+v %v", st, err)
		}
		hist, err := s.History(ctx, "r.k")
		if err != nil || len(hist) != 6 {
			t.Fatalf("history %d events, %v; want 6", len(hist), err)
		}
		if hist[0].Revision != revs[0] || hist[0].Document != nil || hist[1].Generation != 1 || hist[1].Revision != revs[0] {
			t.Errorf("history of the reclaimed revision: %+v %+v", hist[0], hist[1])
		}
		if hist[2].Document == nil {
			t.Errorf("a kept revision's event lost its document")
		}
		if err := s.Append(ctx, storetest.ActivatedEvent("r.k", revs[0], 3), 3); err == nil {
			t.Errorf("activating a reclaimed revision succeeded")
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(mustOpen(t, path, file.Options{}))
}

// crashSteps are the compaction's steps (file.SetCompactHook), in order;
// from "renamed" on, the compacted log has the log's name.
var crashSteps = []string{"created", "written", "tail", "renamed", "dir-synced", "repointed"}

// reclaimSet names the revisions of the workload's first scope that the
// crash test's compaction reclaims: its first three but the head.
func reclaimSet(t testing.TB, s varplane.Store) map[varplane.Scope][]varplane.Revision {
	t.Helper()
	ctx := context.Background()
	hist, err := s.History(ctx, "w.a")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := s.State(ctx, "w.a")
	var revs []varplane.Revision
	for _, ev := range hist {
		if ev.Kind == varplane.EventRevisionCreated && len(revs) < 3 && (st.Head == nil || ev.Revision != st.Head.Revision) {
			revs = append(revs, ev.Revision)
		}
	}
	return map[varplane.Scope][]varplane.Revision{"w.a": revs}
}

const crashEnv = "VARPLANE_TEST_COMPACT_CRASH"

// TestCompactCrash kills a child process at each step of a compaction that
// reclaims while the child commits, and checks that the log then opens
// whole, with every commit the child had acknowledged (it reports each one
// on stdout) and its reads as they were, the reclaimed bodies gone once the
// compacted log has the log's name.
func TestCompactCrash(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("the child runs TestCompactCrashChild")
	}
	for _, step := range crashSteps {
		t.Run(step, func(t *testing.T) {
			path := logPath(t)
			s := mustOpen(t, path, file.Options{})
			workload(t, s, 0, 50)
			want := snapshotOf(t, s, 50)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if slices.Index(crashSteps, step) >= slices.Index(crashSteps, "renamed") {
				want = compactedSnapshot(t, path)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestCompactCrashChild$", "-test.v")
			cmd.Env = append(os.Environ(), crashEnv+"="+step, "VARPLANE_TEST_LOG="+path)
			out, err := cmd.Output()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child: %v, want killed at %s\n%s", err, step, out)
			}
			acked := strings.Count(string(out), "acked\n")
			if !strings.Contains(string(out), "at "+step+"\n") {
				t.Fatalf("child did not reach step %s:\n%s", step, out)
			}
			s2, err := file.Open(context.Background(), path, file.Options{})
			if err != nil {
				t.Fatalf("open after a crash at %s: %v", step, err)
			}
			defer s2.Close()
			if _, err := os.Stat(path + ".compact"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the unfinished compaction is still there: %v", err)
			}
			// The child acknowledged rejections of scope "c.n", one per
			// commit; each must be in the log.
			hist, err := s2.History(context.Background(), "c.n")
			if err != nil {
				t.Fatal(err)
			}
			if len(hist) < acked {
				t.Fatalf("crash at %s lost acknowledged commits: %d in the log, %d acknowledged", step, len(hist), acked)
			}
			if got := snapshotOf(t, onlyWorkload{s2}, 50); got != want {
				t.Fatalf("after a crash at %s:\n%s\nwant\n%s", step, got, want)
			}
		})
	}
}

// onlyWorkload hides the child's "c.n" scope.
type onlyWorkload struct{ *file.Store }

func (o onlyWorkload) Scopes(ctx context.Context) ([]varplane.Scope, error) {
	sc, err := o.Store.Scopes(ctx)
	out := sc[:0:0]
	for _, s := range sc {
		if s != "c.n" {
			out = append(out, s)
		}
	}
	return out, err
}

// TestCompactCrashChild is the child of TestCompactCrash: it commits while
// it compacts, and kills itself (SIGKILL: no deferred code, no flush) at
// the step named in its environment.
func TestCompactCrashChild(t *testing.T) {
	step := os.Getenv(crashEnv)
	if step == "" {
		t.Skip("run by TestCompactCrash")
	}
	var mu sync.Mutex
	say := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		os.Stdout.WriteString(s + "\n")
	}
	s, err := file.Open(context.Background(), os.Getenv("VARPLANE_TEST_LOG"), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	commit := func(i int) {
		if err := s.Append(ctx, &varplane.Event{Kind: varplane.EventRejected, Scope: "c.n", RejectionReason: fmt.Sprint(i)}, 0); err == nil {
			say("acked")
		}
	}
	for i := range 20 {
		commit(i)
	}
	file.SetCompactHook(func(at string) {
		// A commit between the snapshot and this step lands in the tail
		// (the later steps run on the committer).
		if at == "created" || at == "written" {
			commit(100)
		}
		if at == step {
			say("at " + at)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	})
	_, err = s.Compact(ctx, reclaimSet(t, s))
	t.Fatalf("compaction ended without reaching step %s: %v", step, err)
}

// compactedSnapshot is what the log at path answers once compacted with
// reclaimSet (on a copy).
func compactedSnapshot(t *testing.T, path string) string {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "copy.jsonl")
	if err := os.WriteFile(cp, readLog(t, path), 0o600); err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, cp, file.Options{})
	if _, err := s.Compact(context.Background(), reclaimSet(t, s)); err != nil {
		t.Fatal(err)
	}
	return snapshotOf(t, s, 50)
}
