package file_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
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
// in memory, after a restart from a checkpoint no scope's revisions are even
// decoded until used, and every read returns exactly what was stored.
func TestBodiesStayOnDisk(t *testing.T) {
	const scopes, revs = 4, 6
	path := filepath.Join(t.TempDir(), "log.jsonl")
	s := mustOpen(t, path, file.Options{})
	docs := bodyLog(t, s, scopes, revs)
	if b := s.Bodies(); b.Resident != scopes*revs || b.OnDisk != 0 {
		t.Fatalf("before any restart: %+v, want %d resident", b, scopes*revs)
	}
	_ = s.Close()

	s = mustOpen(t, path, file.Options{})
	if b := s.Bodies(); b.Resident != scopes || b.OnDisk != scopes*(revs-1) || b.Unloaded != 0 {
		t.Fatalf("after a full replay: %+v, want %d resident (the heads), %d on disk", b, scopes, scopes*(revs-1))
	}
	checkBodies(t, s, docs)
	if b := s.Bodies(); b.Resident != scopes {
		t.Fatalf("reads made bodies resident: %+v", b)
	}
	if _, err := s.Compact(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if b := s.Bodies(); b.Resident != scopes || b.OnDisk != 0 || b.Unloaded != scopes {
		t.Fatalf("after a compaction: %+v, want %d resident and %d scopes unloaded", b, scopes, scopes)
	}
	checkBodies(t, s, docs)
	_ = s.Close()

	s = mustOpen(t, path, file.Options{})
	defer s.Close()
	if b := s.Bodies(); b.Resident != scopes || b.OnDisk != 0 || b.Unloaded != scopes {
		t.Fatalf("after a restart from the checkpoint: %+v, want %d resident and %d scopes unloaded", b, scopes, scopes)
	}
	// Rolling back to an old revision brings its body in (it is the head).
	ctx := context.Background()
	var old varplane.Revision
	for r, d := range docs["b.s0"] {
		if bytes.Contains(d, []byte(`"rev":0,`)) {
			old = r
		}
	}
	if err := s.Append(ctx, storetest.ActivatedEvent("b.s0", old, revs), revs); err != nil {
		t.Fatal(err)
	}
	st, _ := s.State(ctx, "b.s0")
	if st.Head == nil || st.Head.Revision != old || !bytes.Equal(st.Head.Document, docs["b.s0"][old]) {
		t.Fatalf("head after rollback = %+v", st.Head)
	}
	if b := s.Bodies(); b.Unloaded != scopes-1 || b.OnDisk != revs-2 {
		t.Fatalf("after a rollback in one scope: %+v, want %d unloaded, %d on disk", b, scopes-1, revs-2)
	}
	checkBodies(t, s, docs)

	// Publishing an old revision's document again finds the revision in
	// the scope's block (not loaded until then) and activates it. The
	// tail's rollback loaded b.s0's block on replay.
	_ = s.Close()
	s = mustOpen(t, path, file.Options{})
	defer s.Close()
	if b := s.Bodies(); b.Unloaded != scopes-1 {
		t.Fatalf("after a restart from the checkpoint and its tail: %+v, want %d unloaded", b, scopes-1)
	}
	// The tail's rollback made an old revision the head again: its
	// document, which the checkpoint's block holds, was read back.
	if st, _ := s.State(ctx, "b.s0"); st.Head == nil || st.Head.Revision != old || !bytes.Equal(st.Head.Document, docs["b.s0"][old]) {
		t.Fatalf("head after a restart whose tail rolled back = %+v", st.Head)
	}
	var old1 varplane.Revision
	for r, d := range docs["b.s1"] {
		if bytes.Contains(d, []byte(`"rev":1,`)) {
			old1 = r
		}
	}
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

// TestReclaimFreesMemory: a reclamation pass drops the reclaimed bodies
// from memory at once, without a restart, and the compaction after it
// leaves only the heads' bodies in memory.
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
	var headBytes int64
	for sc, revs := range docs {
		st, _ := s.State(ctx, sc)
		headBytes += int64(len(st.Head.Document))
		var list []varplane.Revision
		for r := range revs {
			if r != st.Head.Revision && len(list) < 7 {
				list = append(list, r)
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
	if after.Resident != 2 || after.ResidentBytes != headBytes || after.OnDisk != 0 {
		t.Fatalf("after the pass: %+v, want the 2 heads (%d bytes) resident", after, headBytes)
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
	for range 15 {
		if _, err := s.Compact(ctx, nil); err != nil {
			t.Fatal(err)
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
	docs := bodyLog(t, s, 2, 5)
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
	if _, err := s.Compact(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if len(steps) != 8 {
		t.Fatalf("steps %v", steps)
	}
	checkBodies(t, s, docs)
}

// TestDamagedBlock: a flipped byte inside a document of a checkpoint's
// revision block (which the JSON grammar does not notice) does not stop Open,
// which does not read the block, but every read that needs the block fails
// naming the byte offset, and nothing else of the store is affected.
func TestDamagedBlock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "log.jsonl")
	s := mustOpen(t, path, file.Options{})
	docs := bodyLog(t, s, 2, 3)
	if _, err := s.Compact(ctx, nil); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var old varplane.Revision
	for r, d := range docs["b.s1"] {
		if bytes.Contains(d, []byte(`"rev":0,`)) {
			old = r
		}
	}
	i := bytes.Index(b, []byte(`"document":{"scope":1,"rev":0,`))
	if i < 0 {
		t.Fatal("block line not found")
	}
	b[i+len(`"document":{"scope":1,"rev":0,"pad":"`)] = 'z'
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, file.Options{})
	defer s.Close()
	_, err = s.Revision(ctx, "b.s1", old)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("damaged")) || !bytes.Contains([]byte(err.Error()), []byte("byte offset")) {
		t.Fatalf("Revision in the damaged block: %v, want a damage error naming the offset", err)
	}
	if _, err := s.History(ctx, "b.s1"); err == nil {
		t.Fatal("History of the damaged scope: no error")
	}
	delete(docs, "b.s1")
	checkBodies(t, s, docs)
	st, err := s.State(ctx, "b.s1")
	if err != nil || st.Head == nil {
		t.Fatalf("head of the damaged scope: %v %v", st, err)
	}
}

// TestCheckpointVersion1 opens a log compacted by the previous version
// (every retained body in the state section, the reclaimed revisions in the
// scope line), reads it, and compacts it into the current version.
func TestCheckpointVersion1(t *testing.T) {
	ctx := context.Background()
	a := storetest.CreatedEvent("v.a", []byte(`{"n":1}`))
	b := storetest.CreatedEvent("v.a", []byte(`{"n":2}`))
	gone := storetest.CreatedEvent("v.a", []byte(`{"n":0}`))
	act := storetest.ActivatedEvent("v.a", b.Revision, 0)
	line := func(ev *varplane.Event, doc bool, mark string) string {
		cp := *ev
		if !doc {
			cp.Document = nil
		}
		l := string(eventjson.AppendEvent(nil, &cp))
		if mark != "" {
			l = l[:len(l)-1] + mark
		}
		return l + "\n"
	}
	header := func(state, tail int) string {
		return fmt.Sprintf(`{"checkpoint":1,"state":%-20d,"tail":%-20d}`+"\n", state, tail)
	}
	hist := line(gone, false, `,"reclaimed":true}`) + line(a, false, "") + line(b, false, "") + line(act, false, "")
	actJSON := string(eventjson.AppendEvent(nil, act))
	state := line(a, true, "") + line(b, true, "") +
		`{"scopeState":{"scope":"v.a","generation":1,"head":` + actJSON + `,"revisions":2,"reclaimed":["` + string(gone.Revision) + `"]}}` + "\n" +
		`{"checkpointEnd":{"scopes":1,"revisions":2,"idem":0,"history":4}}` + "\n"
	h := len(header(0, 0))
	log := header(h+len(hist), h+len(hist)+len(state)) + hist + state
	path := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	docs := map[varplane.Scope]map[varplane.Revision][]byte{"v.a": {a.Revision: a.Document, b.Revision: b.Document}}
	for round := range 2 {
		s := mustOpen(t, path, file.Options{})
		checkBodiesKept(t, s, docs)
		if _, err := s.Revision(ctx, "v.a", gone.Revision); !errors.Is(err, varplane.ErrReclaimed) {
			t.Fatalf("round %d: the reclaimed revision: %v", round, err)
		}
		st, _ := s.State(ctx, "v.a")
		if st.Head == nil || st.Head.Revision != b.Revision || !bytes.Equal(st.Head.Document, b.Document) {
			t.Fatalf("round %d: head %+v", round, st.Head)
		}
		if round == 0 {
			if _, err := s.Compact(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		_ = s.Close()
	}
	if got, _ := os.ReadFile(path); !bytes.HasPrefix(got, []byte(`{"checkpoint":2,`)) {
		t.Fatalf("compacted log starts %.40s", got)
	}
}
