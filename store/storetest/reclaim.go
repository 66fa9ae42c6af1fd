package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/varplane/varplane"
)

// reclaimer is the store side of retention (retention.Reclaimer and
// retention.Finisher), restated here so that the suite does not depend on
// the pass.
type reclaimer interface {
	ReclaimRevisions(ctx context.Context, scope varplane.Scope, revs []varplane.Revision) (int, error)
}

type finisher interface {
	FinishReclaim(ctx context.Context) (int, error)
}

// reclaim reclaims revs of scope the way a pass does: ReclaimRevisions,
// then FinishReclaim when the store completes its deletions at the end.
func reclaim(t testing.TB, s varplane.Store, scope varplane.Scope, revs ...varplane.Revision) int {
	t.Helper()
	ctx := context.Background()
	r := s.(reclaimer)
	n, err := r.ReclaimRevisions(ctx, scope, revs)
	if err != nil {
		t.Fatalf("ReclaimRevisions: %v", err)
	}
	if f, ok := s.(finisher); ok {
		m, err := f.FinishReclaim(ctx)
		if err != nil {
			t.Fatalf("FinishReclaim: %v", err)
		}
		n += m
	}
	return n
}

// testReclaim: a reclaimed body answers revision-reclaimed, before and
// after a restart, and a revision never created not-found; the head is
// never reclaimed; every event stays, the reclaimed revision's without its
// document; replaying to a generation whose head was reclaimed answers
// revision-reclaimed; the reclaimed revision cannot be activated.
func testReclaim(t *testing.T, h Harness) {
	s := open(t, h)
	if _, ok := s.(reclaimer); !ok {
		t.Skipf("the %s store does not reclaim revisions yet", s.Name())
	}
	ctx := context.Background()
	const scope = "reclaim.k"
	var revs []varplane.Revision
	for i := range 3 {
		revs = append(revs, mustCreate(t, s, scope, Doc(100+i)))
		mustActivate(t, s, scope, revs[i], varplane.Generation(i))
	}
	orphan := mustCreate(t, s, scope, Doc(200))
	before := mustHistory(t, s, scope)
	if n := reclaim(t, s, scope, revs[0], revs[2], orphan); n != 2 {
		t.Errorf("reclaimed %d bodies, want 2 (the head is kept)", n)
	}
	never := RevisionOf(Doc(999))
	check := func(s varplane.Store, when string) {
		t.Helper()
		for _, r := range []varplane.Revision{revs[0], orphan} {
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
			if want.Revision == revs[0] || want.Revision == orphan {
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
