package logstate_test

import (
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/logstate"
)

// TestReclaimDropsBodies: Reclaim takes the reclaimed documents out of the
// fold's memory at once (the revision index, the history, and the
// idempotency record of a keyed create, which holds no document at all).
func TestReclaimDropsBodies(t *testing.T) {
	st := logstate.New()
	var size int64
	for i := 1; i <= 4; i++ {
		ev := &varplane.Event{Kind: varplane.EventRevisionCreated, Scope: "r.a", Revision: revOf(i), Document: doc(i)}
		if i == 2 {
			ev.IdempotencyKey, ev.RequestHash = "k2", "h2"
		}
		commitOne(t, st, ev, 0)
		size += int64(len(doc(i)))
	}
	commitOne(t, st, &varplane.Event{Kind: varplane.EventActivated, Scope: "r.a", Revision: revOf(4)}, 0)
	if b := st.Bodies(); b.Resident != 4 || b.ResidentBytes != size {
		t.Fatalf("before: %+v, want 4 bodies of %d bytes", b, size)
	}
	if rec, ok := st.Idempotency("k2"); !ok || rec.Event.Document != nil {
		t.Fatalf("idempotency record %+v holds a document", rec)
	}
	got := st.Reclaim("r.a", []varplane.Revision{revOf(1), revOf(2), revOf(4)})
	if len(got) != 2 {
		t.Fatalf("Reclaim took %v, want the two that are not the head", got)
	}
	if b := st.Bodies(); b.Resident != 2 || b.ResidentBytes != int64(len(doc(3))+len(doc(4))) {
		t.Fatalf("after: %+v, want the bodies of revisions 3 and 4", b)
	}
	for _, ev := range st.History("r.a") {
		reclaimed := ev.Revision == revOf(1) || ev.Revision == revOf(2)
		if ev.Kind == varplane.EventRevisionCreated && reclaimed != (ev.Document == nil) {
			t.Fatalf("history event of %s: document %q", ev.Revision, ev.Document)
		}
		if logstate.IsOnDisk(ev.Document) {
			t.Fatal("a memory fold's history holds the on-disk marker")
		}
	}
}
