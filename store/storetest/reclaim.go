package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/varplane/varplane"
)

// reclaim reclaims revs of scope the way a pass does: ReclaimRevisions,
// then FinishReclaim when the store completes its deletions at the end.
func reclaim(t testing.TB, s varplane.Store, scope varplane.Scope, revs ...varplane.Revision) int {
	t.Helper()
	ctx := context.Background()
	r := s.(varplane.Reclaimer)
	n, err := r.ReclaimRevisions(ctx, scope, revs)
	if err != nil {
		t.Fatalf("ReclaimRevisions: %v", err)
	}
	if f, ok := s.(varplane.ReclaimFinisher); ok {
		m, err := f.FinishReclaim(ctx)
		if err != nil {
			t.Fatalf("FinishReclaim: %v", err)
		}
		n += m
	}
	return n
}

// reclaimFixture opens a store that reclaims (skipping otherwise) and
// makes Doc(base), Doc(base+1) and Doc(base+2) the head of scope in turn,
// at generations 1 to 3.
func reclaimFixture(t *testing.T, h Harness, scope varplane.Scope, base int) (varplane.Store, []varplane.Revision) {
	t.Helper()
	s := open(t, h)
	if _, ok := s.(varplane.Reclaimer); !ok {
		t.Skipf("the %s store does not reclaim revisions yet", s.Name())
	}
	var revs []varplane.Revision
	for i := range 3 {
		revs = append(revs, mustCreate(t, s, scope, Doc(base+i)))
		mustActivate(t, s, scope, revs[i], varplane.Generation(i))
	}
	return s, revs
}

// testReclaim: a reclaimed body answers revision-reclaimed, before and
// after a restart, and a revision never created not-found; the head is
// never reclaimed; every event stays, the reclaimed revision's without its
// document; replaying to a generation whose head was reclaimed answers
// revision-reclaimed; the reclaimed revision cannot be activated. One of
// the reclaimed documents holds a string with \u0000.
func testReclaim(t *testing.T, h Harness) {
	s, revs := reclaimFixture(t, h, "reclaim.k", 100)
	ctx := context.Background()
	const scope = "reclaim.k"
	// A string holding \u0000, which a stricter JSON type (PostgreSQL's
	// jsonb) refuses: its body is reclaimed like any other.
	staged := mustCreate(t, s, scope, json.RawMessage(`{"nul":"a\u0000b","n":200}`))
	before := mustHistory(t, s, scope)
	if n := reclaim(t, s, scope, revs[0], revs[2], staged); n != 2 {
		t.Errorf("reclaimed %d bodies, want 2 (the head is kept)", n)
	}
	never := RevisionOf(Doc(999))
	check := func(s varplane.Store, when string) {
		t.Helper()
		for _, r := range []varplane.Revision{revs[0], staged} {
			if _, err := s.Revision(ctx, scope, r); !errors.Is(err, varplane.ErrReclaimed) {
				t.Errorf("%s: Revision of a reclaimed revision: %v, want revision-reclaimed", when, err)
			}
		}
		if _, err := s.Revision(ctx, scope, never); !errors.Is(err, varplane.ErrNotFound) || errors.Is(err, varplane.ErrReclaimed) {
			t.Errorf("%s: Revision never created: %v, want not-found", when, err)
		}
		for _, r := range revs[1:] {
			if _, err := s.Revision(ctx, scope, r); err != nil {
				t.Errorf("%s: kept revision %s: %v", when, r, err)
			}
		}
		wantHead(t, s, scope, 3, revs[2])
		hist := mustHistory(t, s, scope)
		if len(hist) != len(before) {
			t.Fatalf("%s: history has %d events, had %d", when, len(hist), len(before))
		}
		for i := range hist {
			got, want := hist[i], before[i]
			if want.Revision == revs[0] || want.Revision == staged {
				if got.Kind == varplane.EventRevisionCreated && got.Document != nil {
					t.Errorf("%s: the reclaimed revision's event still carries its document", when)
				}
				want.Document, got.Document = nil, nil
			}
			if fmt.Sprint(got.Kind, got.Revision, got.Generation, got.Actor, got.Reason, got.Timestamp.UTC()) !=
				fmt.Sprint(want.Kind, want.Revision, want.Generation, want.Actor, want.Reason, want.Timestamp.UTC()) {
				t.Errorf("%s: history event %d = %+v, want %+v", when, i, got, want)
			}
		}
		if r, ok := s.(varplane.Replayer); ok {
			if _, err := r.Replay(ctx, scope, 1); !errors.Is(err, varplane.ErrReclaimed) {
				t.Errorf("%s: replay to a reclaimed head: %v, want revision-reclaimed", when, err)
			}
			if st, err := r.Replay(ctx, scope, 2); err != nil || st.Head == nil || st.Head.Revision != revs[1] {
				t.Errorf("%s: replay to a kept head: %+v, %v", when, st, err)
			}
		}
		if err := s.Append(ctx, ActivatedEvent(scope, revs[0], 3), 3); err == nil {
			t.Errorf("%s: activating a reclaimed revision succeeded", when)
		}
	}
	check(s, "after reclamation")
	if n := reclaim(t, s, scope, revs[0]); n != 0 {
		t.Errorf("reclaiming again deleted %d bodies, want 0", n)
	}
	if h.Reopen != nil {
		check(h.Reopen(t, s), "after a restart")
	}
}

// testReclaimRestored: the document of a reclaimed revision, created or
// published again, is stored whole again, as a new creation: a new
// revision-created event carries it, it reads back, and it can be made the
// head; also after a restart.
func testReclaimRestored(t *testing.T, h Harness) {
	s, revs := reclaimFixture(t, h, "reclaim.again", 300)
	ctx := context.Background()
	const scope = "reclaim.again"
	if n := reclaim(t, s, scope, revs[0], revs[1]); n != 2 {
		t.Fatalf("reclaimed %d bodies, want 2", n)
	}
	if got := mustCreate(t, s, scope, Doc(300)); got != revs[0] {
		t.Fatalf("created again as %s, want %s", got, revs[0])
	}
	mustActivate(t, s, scope, revs[0], 3)
	if rev, created := publish(t, s, scope, Doc(301), 4); rev != revs[1] || !created {
		t.Errorf("publish of a reclaimed revision = %s created %v, want %s created", rev, created, revs[1])
	}
	check := func(s varplane.Store, when string) {
		t.Helper()
		wantHead(t, s, scope, 5, revs[1])
		for i, r := range revs {
			rec, err := s.Revision(ctx, scope, r)
			if err != nil || !jsonEqual(rec.Document, Doc(300+i)) {
				t.Errorf("%s: Revision %d = %+v, %v, want its document", when, i, rec, err)
			}
		}
		hist := mustHistory(t, s, scope)
		const want = "revision-created activated revision-created activated revision-created activated " +
			"revision-created activated revision-created activated"
		if got := kinds(hist); got != want {
			t.Fatalf("%s: history = %s, want %s", when, got, want)
		}
		// The first creations lost their documents; a store that attaches
		// documents from the stored records (Redis) shows the restored one
		// there too, which is the same document.
		for _, i := range []int{0, 2} {
			if d := hist[i].Document; d != nil && !jsonEqual(d, Doc(300+i/2)) {
				t.Errorf("%s: history event %d carries %s, want none or %s", when, i, d, Doc(300+i/2))
			}
		}
		for _, c := range []struct {
			at  int
			doc []byte
		}{{4, Doc(302)}, {6, Doc(300)}, {8, Doc(301)}} {
			if !jsonEqual(hist[c.at].Document, c.doc) {
				t.Errorf("%s: history event %d carries %s, want %s", when, c.at, hist[c.at].Document, c.doc)
			}
		}
	}
	check(s, "restored")
	if h.Reopen != nil {
		check(h.Reopen(t, s), "after a restart")
	}
}
