package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/store/storetest"
)

// wantFailed asserts that err is the document-failed error (HTTP 503) of a
// vanished or undecodable head: never "no head", never a zero state.
func wantFailed(t *testing.T, what string, st *varplane.ScopeState, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s = %+v, want a document-failed error", what, st)
	}
	if c := varplane.ErrorCode(err); c != varplane.CodeDocumentFailed || wire.Status(c) != 503 {
		t.Fatalf("%s = %v (code %s), want document-failed (503)", what, err, c)
	}
	if errors.Is(err, varplane.ErrNoHead) {
		t.Fatalf("%s reads as no-head", what)
	}
}

// TestVanishedHead: after a DEL of a head, reads of the scope fail closed
// (cold and installed), no activation, publish, rejection or deactivation
// reuses generation 1, no create writes the head again, nothing is written
// by the refused commits, and an activation that expects the floor resumes
// at floor+1.
func TestVanishedHead(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	a := openStore(t, u, Options{RevalidateInterval: 50 * time.Millisecond})
	raw := rawClient(t, u)
	ctx := context.Background()

	const sc = varplane.Scope("van.x")
	rev := create(t, a, sc, 1)
	activate(t, a, sc, rev, 0)
	if err := raw.Do(ctx, raw.B().Del().Key(a.keys.head(sc)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	histBefore, err := a.History(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}

	cold := openStore(t, u, Options{})
	st, err := cold.State(ctx, sc)
	wantFailed(t, "cold State after DEL", st, err)
	eventually(t, 3*time.Second, "installed head to fail closed", func() bool {
		_, err := a.State(ctx, sc)
		return varplane.ErrorCode(err) == varplane.CodeDocumentFailed
	})

	for name, commit := range map[string]func(s *Store) error{
		"activate": func(s *Store) error { return s.Append(ctx, storetest.ActivatedEvent(sc, rev, 0), 0) },
		// a create writes the head hash too (the chain head): it would
		// recreate it without its generation
		"create": func(s *Store) error { return s.Append(ctx, storetest.CreatedEvent(sc, storetest.Doc(8)), 0) },
		"publish": func(s *Store) error {
			_, err := s.AppendPublish(ctx, storetest.CreatedEvent(sc, storetest.Doc(7)), storetest.ActivatedEvent(sc, storetest.RevisionOf(storetest.Doc(7)), 0), 0)
			return err
		},
		"reject": func(s *Store) error {
			return s.Append(ctx, &varplane.Event{Kind: varplane.EventRejected, Scope: sc, Revision: rev, Actor: "t", Timestamp: time.Now().UTC()}, 0)
		},
		"deactivate": func(s *Store) error { return s.AppendSubtreeDeactivation(ctx, storetest.DeactivatedEvent(sc, 0), 0) },
	} {
		for _, s := range []*Store{a, cold} {
			err := commit(s)
			wantFailed(t, name+" over a vanished head", nil, err)
		}
	}
	histAfter, err := a.History(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	if len(histAfter) != len(histBefore) {
		t.Fatalf("refused commits wrote %d history entries", len(histAfter)-len(histBefore))
	}
	if n, err := raw.Do(ctx, raw.B().Exists().Key(a.keys.head(sc)).Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("a refused commit recreated the head (exists=%d, %v)", n, err)
	}

	// The documented recovery: activate expecting the floor.
	activate(t, cold, sc, rev, 1)
	if got := state(t, cold, sc); got.Generation != 2 || got.Head == nil || got.Head.Revision != rev {
		t.Fatalf("state after recovery = %+v, want generation 2 with %s", got, rev)
	}
	eventually(t, 3*time.Second, "the other instance to serve the recovered head", func() bool {
		st, err := a.State(ctx, sc)
		return err == nil && st.Generation == 2
	})
	hist, err := a.History(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[varplane.Generation]bool{}
	for _, ev := range hist {
		if ev.Kind == varplane.EventActivated || ev.Kind == varplane.EventDeactivated {
			if seen[ev.Generation] {
				t.Fatalf("generation %d handed out twice: %+v", ev.Generation, hist)
			}
			seen[ev.Generation] = true
		}
	}
}

// TestHeadRewrittenBelowFloor: a head rewritten by hand to a lower
// generation (HSET g 0), a head replaced by a string (SET), and a deleted
// descendant under a subtree deactivation are store failures.
func TestHeadRewrittenBelowFloor(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	a := openStore(t, u, Options{})
	raw := rawClient(t, u)
	ctx := context.Background()

	rev := create(t, a, "low.x", 1)
	activate(t, a, "low.x", rev, 0)
	activate(t, a, "low.x", rev, 1)
	if err := raw.Do(ctx, raw.B().Hset().Key(a.keys.head("low.x")).FieldValue().FieldValue("g", "1").FieldValue("c", "x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	rev2 := create(t, a, "str.x", 2)
	activate(t, a, "str.x", rev2, 0)
	if err := raw.Do(ctx, raw.B().Del().Key(a.keys.head("str.x")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Do(ctx, raw.B().Set().Key(a.keys.head("str.x")).Value("garbage").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	cold := openStore(t, u, Options{})
	for _, sc := range []varplane.Scope{"low.x", "str.x"} {
		st, err := cold.State(ctx, sc)
		wantFailed(t, "State("+string(sc)+")", st, err)
	}
	err := cold.Append(ctx, storetest.ActivatedEvent("low.x", rev, 1), 1)
	wantFailed(t, "activate expecting the rewritten generation", nil, err)
	if v, err := raw.Do(ctx, raw.B().Get().Key(a.keys.head("str.x")).Build()).ToString(); err != nil || v != "garbage" {
		t.Fatalf("corrupt head = %q, %v; want it left in place", v, err)
	}

	// A descendant whose head vanished keeps its floor: deactivating the
	// parent leaves it failed, and its next activation is above the floor.
	r := create(t, a, "tree", 3)
	activate(t, a, "tree", r, 0)
	rc := create(t, a, "tree.c", 4)
	activate(t, a, "tree.c", rc, 0)
	activate(t, a, "tree.c", rc, 1)
	if err := raw.Do(ctx, raw.B().Del().Key(a.keys.head("tree.c")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := cold.AppendSubtreeDeactivation(ctx, storetest.DeactivatedEvent("tree", 1), 1); err != nil {
		t.Fatal(err)
	}
	st, err := openStore(t, u, Options{}).State(ctx, "tree.c")
	wantFailed(t, "State of a vanished descendant after the cascade", st, err)
	err = cold.Append(ctx, storetest.ActivatedEvent("tree.c", rc, 0), 0)
	wantFailed(t, "activate of the vanished descendant at generation 1", nil, err)
	activate(t, cold, "tree.c", rc, 2)
}
