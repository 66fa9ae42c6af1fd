package file_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

// bodyLog commits revs revisions to each of scopes scopes, activating every
// one, and returns every document by scope and revision.
func bodyLog(t *testing.T, s *file.Store, scopes, revs int) map[varplane.Scope]map[varplane.Revision][]byte {
	t.Helper()
	ctx := context.Background()
	docs := map[varplane.Scope]map[varplane.Revision][]byte{}
	for k := range scopes {
		sc := varplane.Scope(fmt.Sprintf("b.s%d", k))
		docs[sc] = map[varplane.Revision][]byte{}
		for i := range revs {
			doc := fmt.Appendf(nil, `{"scope":%d,"rev":%d,"pad":"%s"}`, k, i, bytes.Repeat([]byte{'a' + byte(i%26)}, 100+i))
			c := storetest.CreatedEvent(sc, doc)
			if err := s.Append(ctx, c, 0); err != nil {
				t.Fatal(err)
			}
			if err := s.Append(ctx, storetest.ActivatedEvent(sc, c.Revision, varplane.Generation(i)), varplane.Generation(i)); err != nil {
				t.Fatal(err)
			}
			docs[sc][c.Revision] = doc
		}
	}
	return docs
}

// checkBodies reads every revision of docs through Revision and History and
// compares the documents byte for byte.
func checkBodies(t *testing.T, s *file.Store, docs map[varplane.Scope]map[varplane.Revision][]byte) {
	t.Helper()
	if err := bodiesErr(s, docs); err != nil {
		t.Fatal(err)
	}
}

func bodiesErr(s *file.Store, docs map[varplane.Scope]map[varplane.Revision][]byte) error {
	ctx := context.Background()
	for sc, revs := range docs {
		for rev, want := range revs {
			rec, err := s.Revision(ctx, sc, rev)
			if err != nil {
				return fmt.Errorf("Revision %s %s: %w", sc, rev, err)
			}
			if !bytes.Equal(rec.Document, want) {
				return fmt.Errorf("Revision %s %s = %s, want %s", sc, rev, rec.Document, want)
			}
		}
		hist, err := s.History(ctx, sc)
		if err != nil {
			return err
		}
		n := 0
		for _, ev := range hist {
			if ev.Kind != varplane.EventRevisionCreated {
				continue
			}
			n++
			if !bytes.Equal(ev.Document, revs[ev.Revision]) {
				return fmt.Errorf("History %s %s document = %q, want %s", sc, ev.Revision, ev.Document, revs[ev.Revision])
			}
		}
		if n != len(revs) {
			return fmt.Errorf("History %s: %d revisions, want %d", sc, n, len(revs))
		}
	}
	return nil
}

// TestBodiesStayOnDisk: after a full replay only the heads' documents are
// in memory, after a restart from a checkpoint no scope's revisions are
// even read until used, and every read returns exactly what was stored; an
// old revision that becomes the head again is read back from the log.
func TestBodiesStayOnDisk(t *testing.T) {
	const scopes, revs = 4, 6
	path := filepath.Join(t.TempDir(), "log.jsonl")
	s := mustOpen(t, path, file.Options{})
	docs := bodyLog(t, s, scopes, revs)
	if b := s.Bodies(); b.Resident != scopes*revs || b.OnDisk != 0 {
		t.Fatalf("before any restart: %+v, want %d resident", b, scopes*revs)
	}
	_ = s.Close()

	s = mustOpen(t, path, file.Options{CheckpointEvery: -1})
	if b := s.Bodies(); b.Resident != scopes || b.OnDisk != scopes*(revs-1) || b.Unloaded != 0 {
		t.Fatalf("after a full replay: %+v, want %d resident (the heads), %d on disk", b, scopes, scopes*(revs-1))
	}
	checkBodies(t, s, docs)
	if b := s.Bodies(); b.Resident != scopes {
		t.Fatalf("reads made bodies resident: %+v", b)
	}
	_ = s.Close()

	// From the checkpoint (the first Close wrote it): no scope's
	// revisions are even read until used.
	s = mustOpen(t, path, file.Options{})
	defer s.Close()
	if b := s.Bodies(); b.Resident != scopes || b.OnDisk != 0 || b.Unloaded != scopes {
		t.Fatalf("after a restart from the checkpoint: %+v, want %d resident and %d scopes unloaded", b, scopes, scopes)
	}
	checkBodies(t, s, docs)
	if b := s.Bodies(); b.Resident != scopes || b.OnDisk != scopes*(revs-1) || b.Unloaded != 0 {
		t.Fatalf("after reading every revision: %+v, want %d resident (the heads), %d on disk", b, scopes, scopes*(revs-1))
	}
	// Rolling back to an old revision brings its body in (it is the head).
	ctx := context.Background()
	old := revisionWith(docs["b.s0"], `"rev":0,`)
	if err := s.Append(ctx, storetest.ActivatedEvent("b.s0", old, revs), revs); err != nil {
		t.Fatal(err)
	}
	st, _ := s.State(ctx, "b.s0")
	if st.Head == nil || st.Head.Revision != old || !bytes.Equal(st.Head.Document, docs["b.s0"][old]) {
		t.Fatalf("head after rollback = %+v", st.Head)
	}
	if b := s.Bodies(); b.Resident != scopes+1 || b.OnDisk != scopes*(revs-1)-1 {
		t.Fatalf("after a rollback in one scope: %+v", b)
	}
	checkBodies(t, s, docs)
	// Publishing an old revision's document again finds the revision and
	// activates it.
	old1 := revisionWith(docs["b.s1"], `"rev":1,`)
	c := storetest.CreatedEvent("b.s1", docs["b.s1"][old1])
	created, err := s.AppendPublish(ctx, c, storetest.ActivatedEvent("b.s1", old1, revs), revs)
	if err != nil || created {
		t.Fatalf("AppendPublish of a stored revision: created %v, %v; want found", created, err)
	}
	st, _ = s.State(ctx, "b.s1")
	if st.Head == nil || st.Head.Revision != old1 || !bytes.Equal(st.Head.Document, docs["b.s1"][old1]) {
		t.Fatalf("head after publishing a stored revision = %+v", st.Head)
	}
}

// revisionWith returns the revision of docs whose document contains s.
func revisionWith(docs map[varplane.Revision][]byte, s string) varplane.Revision {
	for r, d := range docs {
		if bytes.Contains(d, []byte(s)) {
			return r
		}
	}
	return ""
}

// TestReclaimFreesMemory: a reclamation pass drops the reclaimed bodies
// from memory at once, without a restart.
func TestReclaimFreesMemory(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "log.jsonl")
	s := mustOpen(t, path, file.Options{})
	defer s.Close()
	docs := bodyLog(t, s, 2, 10)
	before := s.Bodies()
	if before.Resident != 20 {
		t.Fatalf("before the pass: %+v, want 20 resident", before)
	}
	var reclaimed []varplane.Revision
	var goneBytes int64
	for sc, revs := range docs {
		st, _ := s.State(ctx, sc)
		var list []varplane.Revision
		for r := range revs {
			if r != st.Head.Revision && len(list) < 7 {
				list = append(list, r)
				goneBytes += int64(len(revs[r]))
			}
		}
		if _, err := s.ReclaimRevisions(ctx, sc, list); err != nil {
			t.Fatal(err)
		}
		reclaimed = append(reclaimed, list...)
	}
	n, err := s.FinishReclaim(ctx)
	if err != nil || n != 14 {
		t.Fatalf("FinishReclaim = %d, %v; want 14", n, err)
	}
	after := s.Bodies()
	if after.Resident != 6 || after.ResidentBytes != before.ResidentBytes-goneBytes || after.OnDisk != 0 {
		t.Fatalf("after the pass: %+v, want 6 resident, %d bytes fewer than %+v", after, goneBytes, before)
	}
	for sc, revs := range docs {
		for r := range revs {
			_, err := s.Revision(ctx, sc, r)
			isGone := false
			for _, x := range reclaimed {
				isGone = isGone || x == r
			}
			if isGone != errors.Is(err, varplane.ErrReclaimed) || (!isGone && err != nil) {
				t.Fatalf("Revision %s %s after the pass: %v (reclaimed: %v)", sc, r, err, isGone)
			}
			if isGone {
				delete(revs, r)
			}
		}
	}
	checkBodiesKept(t, s, docs)
}

// checkBodiesKept is checkBodies for scopes some of whose revisions were
// reclaimed (their events carry no document).
func checkBodiesKept(t *testing.T, s *file.Store, docs map[varplane.Scope]map[varplane.Revision][]byte) {
	t.Helper()
	for sc, revs := range docs {
		for rev, want := range revs {
			rec, err := s.Revision(context.Background(), sc, rev)
			if err != nil || !bytes.Equal(rec.Document, want) {
				t.Fatalf("Revision %s %s: %v", sc, rev, err)
			}
		}
		hist, _ := s.History(context.Background(), sc)
		for _, ev := range hist {
			if ev.Kind == varplane.EventRevisionCreated && !bytes.Equal(ev.Document, revs[ev.Revision]) {
				t.Fatalf("History %s %s document = %q, want %q", sc, ev.Revision, ev.Document, revs[ev.Revision])
			}
		}
	}
}

// TestBodyReadsRaceCompaction reads old revisions from several goroutines
// while compactions replace the log under them: a read that started on the
// old file either finishes there (its descriptor stays open until every
// reference is re-pointed) or finds it retired and reads the new one; no
// read fails or returns other bytes. Run with -race.
func TestBodyReadsRaceCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	s := mustOpen(t, path, file.Options{NoSync: true})
	docs := bodyLog(t, s, 3, 8)
	var victims []varplane.Revision // revisions the compactions reclaim, one each
	for i := range 16 {
		c := storetest.CreatedEvent("junk", storetest.Doc(i))
		if err := s.Append(context.Background(), c, 0); err != nil {
			t.Fatal(err)
		}
		victims = append(victims, c.Revision)
	}
	_ = s.Close()
	s = mustOpen(t, path, file.Options{NoSync: true})
	defer s.Close()
	type item struct {
		sc  varplane.Scope
		rev varplane.Revision
		doc []byte
	}
	var items []item
	for sc, revs := range docs {
		for r, d := range revs {
			items = append(items, item{sc, r, d})
		}
	}
	ctx := context.Background()
	var (
		stop  atomic.Bool
		wg    sync.WaitGroup
		reads atomic.Int64
		errc  = make(chan error, 8)
	)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; !stop.Load(); i++ {
				it := items[i%len(items)]
				rec, err := s.Revision(ctx, it.sc, it.rev)
				if err == nil && !bytes.Equal(rec.Document, it.doc) {
					err = fmt.Errorf("Revision %s %s = %s, want %s", it.sc, it.rev, rec.Document, it.doc)
				}
				if err == nil && i%5 == 0 {
					var hist []varplane.Event
					if hist, err = s.History(ctx, it.sc); err == nil && len(hist) != 16 {
						err = fmt.Errorf("History %s: %d events", it.sc, len(hist))
					}
				}
				if err != nil {
					errc <- err
					return
				}
				reads.Add(1)
			}
		}()
	}
	for _, r := range victims {
		if res, err := s.Compact(ctx, map[varplane.Scope][]varplane.Revision{"junk": {r}}); err != nil || res.Reclaimed != 1 {
			t.Fatalf("Compact: %+v, %v", res, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if reads.Load() == 0 {
		t.Fatal("no read ran during the compactions")
	}
	checkBodies(t, s, docs)
}

// TestBodyReadAtEveryCompactionStep reads every old revision at each step of
// a compaction (on the committer, between its steps): before the rename the
// old log is read; after it, but before the fold is re-pointed, the old
// log's open descriptor still is (its name now belongs to the new log).
func TestBodyReadAtEveryCompactionStep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	s := mustOpen(t, path, file.Options{})
	docs := bodyLog(t, s, 3, 5)
	victim := revisionWith(docs["b.s2"], `"rev":0,`)
	delete(docs, "b.s2")
	_ = s.Close()
	s = mustOpen(t, path, file.Options{})
	defer s.Close()
	var steps []string
	file.SetCompactHook(func(step string) {
		steps = append(steps, step)
		if err := bodiesErr(s, docs); err != nil {
			t.Errorf("at %s: %v", step, err)
		}
	})
	defer file.SetCompactHook(nil)
	if _, err := s.Compact(context.Background(), map[varplane.Scope][]varplane.Revision{"b.s2": {victim}}); err != nil {
		t.Fatal(err)
	}
	if len(steps) != 6 {
		t.Fatalf("steps %v", steps)
	}
	checkBodies(t, s, docs)
}
