package postgres

import (
	"context"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/store/storetest"
)

// followOpts: a follower that learns of commits by notification only (no
// revalidation pass runs during a test).
var followOpts = Options{RevalidateInterval: 5 * time.Minute}

// coldState reads scope's head as a new replica would: from the heads row.
func coldState(t *testing.T, u string, scope varplane.Scope) *varplane.ScopeState {
	t.Helper()
	return state(t, openStore(t, u, followOpts), scope)
}

// follower opens a writer A and a follower B on a new schema, creates two
// revisions of sc through A, has B install sc (at the row version 0 the
// creations made, so that every activation follows it) and activates the
// first: it returns once B holds generation 1.
func follower(t *testing.T, sc varplane.Scope) (u string, a, b *Store, r1, r2 varplane.Revision) {
	t.Helper()
	u = freshSchema(t, sharedURL(t))
	a = openStore(t, u, followOpts)
	b = openStore(t, u, followOpts)
	r1, r2 = create(t, a, sc, 1), create(t, a, sc, 2)
	state(t, b, sc)
	activate(t, a, sc, r1, 0)
	eventually(t, 5*time.Second, "B on generation 1", func() bool { return state(t, b, sc).Generation == 1 })
	return u, a, b, r1, r2
}

// TestFollowFromLog: a follower installed at a scope's row reads each
// further activation of it from the log, delivers each one in order, and
// ends with the head a cold read of the heads row gives (a rejection in
// between, read from its row, is carried by the activations after it).
func TestFollowFromLog(t *testing.T) {
	const sc = "follow.k"
	u, a, b, r1, r2 := follower(t, sc)
	bw := watchChan(t, b)
	activate(t, a, sc, r2, 1)
	activate(t, a, sc, r1, 2) // a record B does not hold
	rej := &varplane.Event{Kind: varplane.EventRejected, Scope: sc, RejectionReason: "document.type: /x", Timestamp: time.Now().UTC()}
	if err := a.Append(context.Background(), rej, 0); err != nil {
		t.Fatal(err)
	}
	// the rejection is read from its row; the next activation follows it
	eventually(t, 5*time.Second, "B to install the rejection", func() bool { return state(t, b, sc).LastRejected != nil })
	activate(t, a, sc, r1, 3) // the record B holds; the rejection carried
	for _, w := range []struct {
		gen varplane.Generation
		rev varplane.Revision
	}{{2, r2}, {3, r1}, {4, r1}} {
		ch := nextCommit(t, bw, 5*time.Second).Changes[0]
		if ch.Generation != w.gen || ch.Head == nil || ch.Head.Revision != w.rev {
			t.Fatalf("B delivered %+v, want generation %d with head %s", ch, w.gen, w.rev)
		}
	}
	eventually(t, 5*time.Second, "B on generation 4", func() bool { return state(t, b, sc).Generation == 4 })
	got, want := state(t, b, sc), coldState(t, u, sc)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("B holds %+v\nthe heads row gives %+v", got, want)
	}
	if got.LastRejected == nil || got.LastRejected.RejectionReason != rej.RejectionReason {
		t.Errorf("B's last rejection = %+v, want the one appended", got.LastRejected)
	}
	if st := b.Stats(); st.LogFollows != 4 || st.DecodeErrors != 0 {
		t.Errorf("B read %d activations from the log (decode errors %d), want all 4 (0)", st.LogFollows, st.DecodeErrors)
	}
}

// TestFollowDamagedLog: a log holding two activations of one generation
// (written past the store) is not trusted: the follower installs the head
// the heads row holds, the one committed.
func TestFollowDamagedLog(t *testing.T) {
	const sc = "damaged.k"
	u, a, b, r1, r2 := follower(t, sc)
	before := b.Stats().LogFollows
	forged := eventjson.Event(storetest.ActivatedEvent(sc, r1, 1))
	c := rawConn(t, u)
	if _, err := c.Exec(context.Background(), "INSERT INTO events (scope, kind, generation, body) VALUES ($1, 'activated', 2, $2)", sc, forged); err != nil {
		t.Fatal(err)
	}
	activate(t, a, sc, r2, 1)
	eventually(t, 5*time.Second, "B on generation 2", func() bool { return state(t, b, sc).Generation == 2 })
	if h := state(t, b, sc).Head; h == nil || h.Revision != r2 {
		t.Fatalf("B serves %+v, want the committed %s", h, r2)
	}
	if n := b.Stats().LogFollows - before; n != 0 {
		t.Errorf("B read %d activations from a damaged log, want 0", n)
	}
}

// TestNextSnapshot: the head an activation read from the log makes is
// built only from the event of the commit announced, made against the
// installed head, with its own revision's record.
func TestNextSnapshot(t *testing.T) {
	const sc = "next.k"
	c1 := storetest.CreatedEvent(sc, storetest.Doc(1))
	c2 := storetest.CreatedEvent(sc, storetest.Doc(2))
	recOf := func(c *varplane.Event) *varplane.RevisionRecord {
		return &varplane.RevisionRecord{Scope: c.Scope, Revision: c.Revision, Document: c.Document, SchemaID: c.SchemaID, Actor: c.Actor, CreatedAt: c.Timestamp}
	}
	rec1, rec2 := recOf(c1), recOf(c2)
	a1 := storetest.ActivatedEvent(sc, rec1.Revision, 0)
	rej := &varplane.Event{Kind: varplane.EventRejected, Scope: sc, RejectionReason: "x", Timestamp: time.Now().UTC()}
	cur := &snapshot{
		state:   &varplane.ScopeState{Scope: sc, Generation: 1, Head: varplane.NewHead(a1, rec1), LastRejected: rej},
		version: 5, rec: rec1,
	}
	probe := nextProbe{scope: sc, version: 6, gen: 2, cur: cur}
	ev := func(mod func(*varplane.Event)) []byte {
		e := storetest.ActivatedEvent(sc, rec2.Revision, 1)
		if mod != nil {
			mod(e)
		}
		return eventjson.Event(e)
	}
	cases := []struct {
		name    string
		body    []byte
		rec     []byte
		wantRev varplane.Revision // "": no snapshot
	}{
		{"next activation", ev(nil), eventjson.Record(rec2), rec2.Revision},
		{"the installed revision again", ev(func(e *varplane.Event) { e.Revision = rec1.Revision }), nil, rec1.Revision},
		{"record missing", ev(nil), nil, ""},
		{"record of another revision", ev(nil), eventjson.Record(rec1), ""},
		{"record of another scope", ev(nil), eventjson.Record(&varplane.RevisionRecord{Scope: "other.k", Revision: rec2.Revision, Document: rec2.Document}), ""},
		{"record not JSON", ev(nil), []byte(`{"scope":`), ""},
		{"event not JSON", []byte(`{"kind":"activated"`), eventjson.Record(rec2), ""},
		{"a deactivation", ev(func(e *varplane.Event) { e.Kind, e.Revision = varplane.EventDeactivated, "" }), nil, ""},
		{"another scope", ev(func(e *varplane.Event) { e.Scope = "other.k" }), eventjson.Record(rec2), ""},
		{"another generation", ev(func(e *varplane.Event) { e.Generation = 3 }), eventjson.Record(rec2), ""},
		{"no previous generation", ev(func(e *varplane.Event) { e.PreviousGeneration = nil }), eventjson.Record(rec2), ""},
		{"made against another head", ev(func(e *varplane.Event) { e.PreviousGeneration = varplane.GenerationPtr(0) }), eventjson.Record(rec2), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap := nextSnapshot(&probe, tc.body, tc.rec)
			if tc.wantRev == "" {
				if snap != nil {
					t.Fatalf("got a snapshot at %s, want none", snap.state.Head.Revision)
				}
				return
			}
			if snap == nil {
				t.Fatal("got no snapshot")
			}
			st := snap.state
			if snap.version != 6 || st.Generation != 2 || st.Head == nil || st.Head.Revision != tc.wantRev || snap.rec.Revision != tc.wantRev {
				t.Errorf("snapshot: version %d, generation %d, head %+v, want 6, 2, %s", snap.version, st.Generation, st.Head, tc.wantRev)
			}
			if st.LastRejected != rej {
				t.Errorf("last rejection %+v, want the installed one carried", st.LastRejected)
			}
		})
	}
}

// TestForgedNotifications: notifications sent on the store's channel by
// someone else (any role that may NOTIFY) announcing activations that were
// never committed (the next version and generation of an installed scope,
// a generation that is not a number, one far ahead, a scope never written)
// change nothing: the follower finds no such commit in the log, reads the
// rows, and installs and delivers nothing; a flood of them leaves the heap
// bounded; the real commit after them is the first thing delivered, and
// the follower ends with what the heads row holds.
func TestForgedNotifications(t *testing.T) {
	const sc = "forged.k"
	u, a, b, _, r2 := follower(t, sc)
	bw := watchChan(t, b)
	before := state(t, b, sc)
	ctx := context.Background()
	c := rawConn(t, u)
	payloads := []string{
		"activated\n2 2 " + sc,
		"activated each\n2 2 " + sc + "\n1 1 forged.never",
		"activated\n2 x " + sc,
		"activated\n2 18446744073709551615 " + sc,
		"activated\n9223372036854775807 2 " + sc,
	}
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	for i := 0; i < 400; i++ {
		if _, err := c.Exec(ctx, "SELECT pg_notify($1, $2)", b.channel, payloads[i%len(payloads)]); err != nil {
			t.Fatal(err)
		}
	}
	activate(t, a, sc, r2, 1) // the real commit, announced after the forged ones
	ch := nextCommit(t, bw, 10*time.Second).Changes[0]
	if ch.Generation != 2 || ch.Head == nil || ch.Head.Revision != r2 {
		t.Fatalf("B delivered %+v first, want the real generation 2 (%s)", ch, r2)
	}
	if got := state(t, b, "forged.never"); got.Generation != 0 || got.Head != nil {
		t.Errorf("a scope never written is installed as %+v", got)
	}
	if before.Generation != 1 {
		t.Fatalf("B held generation %d before, want 1", before.Generation)
	}
	eventually(t, 5*time.Second, "B on the real generation 2", func() bool { return state(t, b, sc).Generation == 2 })
	if !reflect.DeepEqual(state(t, b, sc), coldState(t, u, sc)) {
		t.Errorf("B holds %+v, the heads row gives %+v", state(t, b, sc), coldState(t, u, sc))
	}
	// (A forged line handled after the real commit may be the one that
	// installs it, from the log or the row: either way, what the database
	// holds.)
	if st := b.Stats(); st.Regressions != 0 || st.DecodeErrors != 0 {
		t.Errorf("B counted %d regressions and %d decode errors, want none", st.Regressions, st.DecodeErrors)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	if grew := int64(ms1.HeapAlloc) - int64(ms0.HeapAlloc); grew > 32<<20 {
		t.Errorf("the heap grew by %d MiB over 400 forged notifications", grew>>20)
	}
}
